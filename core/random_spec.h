// RandomSpec: one draw from a distribution, described as plain data so the same description can be
// evaluated by a CPU loop or a CUDA kernel, element by element, with identical results.
// Not here: the user-facing functions (core/random.h) or the generator state.
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/host_device.h"
#include "core/philox.h"

namespace frugal {

enum class Distribution : std::uint8_t { uniform, normal, randint, bernoulli };

struct RandomSpec {
  Distribution distribution = Distribution::uniform;
  double a = 0.0;  // uniform: low;  normal: mean;   randint: low;   bernoulli: p
  double b = 1.0;  // uniform: high; normal: stddev; randint: range (high - low)
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};

// Value of element 4*block + lane, given that block's four Philox words. Element i always uses block
// i / 4, so the value depends only on (seed, offset, i), never on how the work was split.
FRUGAL_HOST_DEVICE inline double random_value(const RandomSpec& spec, const PhiloxWords& words, int lane) {
  switch (spec.distribution) {
    case Distribution::uniform:
      return spec.a + (spec.b - spec.a) * uniform_from_word(words.w[lane]);
    case Distribution::normal: {
      const int pair = lane & ~1;  // lanes (0,1) share words 0,1; lanes (2,3) share words 2,3
      return spec.a + spec.b * normal_from_words(words.w[pair], words.w[pair + 1], lane & 1);
    }
    case Distribution::randint:
      return static_cast<double>(
          randint_from_word(words.w[lane], static_cast<std::int64_t>(spec.a), static_cast<std::uint64_t>(spec.b)));
    case Distribution::bernoulli:
      return uniform_from_word(words.w[lane]) < spec.a ? 1.0 : 0.0;
  }
  return 0.0;
}

// Writes elements 4*block .. 4*block+3 (those below numel) of a contiguous random tensor: the body of
// both the CPU loop and the CUDA kernel.
template <typename T>
FRUGAL_HOST_DEVICE inline void random_fill_block(T* out, std::int64_t numel, const RandomSpec& spec, std::int64_t block) {
  const PhiloxWords words = philox_block(spec.seed, spec.offset, static_cast<std::uint64_t>(block));
  for (int lane = 0; lane < 4 && block * 4 + lane < numel; ++lane)
    out[block * 4 + lane] = convert<T>(random_value(spec, words, lane));
}

}  // namespace frugal
