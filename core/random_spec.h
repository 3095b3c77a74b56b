// RandomSpec: one draw from a distribution, described as plain data so the same description can be
// evaluated by a CPU loop or a CUDA kernel, element by element, with identical results.
// Not here: the user-facing functions (core/random.h) or the generator state.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

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
      return multiply_add_unfused(spec.b - spec.a, uniform_from_word(words.w[lane]), spec.a);
    case Distribution::normal: {
      const int pair = lane & ~1;  // lanes (0,1) share words 0,1; lanes (2,3) share words 2,3
      return multiply_add_unfused(spec.b, normal_from_words(words.w[pair], words.w[pair + 1], lane & 1), spec.a);
    }
    case Distribution::randint:
      return static_cast<double>(
          randint_from_word(words.w[lane], static_cast<std::int64_t>(spec.a), static_cast<std::uint64_t>(spec.b)));
    case Distribution::bernoulli:
      return uniform_from_word(words.w[lane]) < spec.a ? 1.0 : 0.0;
  }
  return 0.0;
}

template <typename T>
inline constexpr bool is_floating_type_v = std::is_floating_point_v<T> || is_half_type_v<T>;

// The largest value of floating type T below `value`.
template <typename T>
FRUGAL_HOST_DEVICE inline T next_below(T value) {
  if constexpr (is_half_type_v<T>) {
    const std::uint16_t bits = value.bits;
    if (bits == 0x0000u) return T::from_bits(0x8001u);  // +0 -> the smallest negative subnormal
    return T::from_bits(static_cast<std::uint16_t>((bits & 0x8000u) ? bits + 1u : bits - 1u));
  } else if constexpr (std::is_same_v<T, float>) {
    return nextafterf(value, -INFINITY);
  } else {
    return nextafter(value, -static_cast<double>(INFINITY));
  }
}

// Stores one drawn value as T. A uniform draw below `high` can round up to `high` itself in a
// narrow dtype (in bf16 about 1 draw in 500 of uniform(0, 1) would); [low, high) excludes it, so
// such values step down to the largest T below high, as PyTorch does.
template <typename T>
FRUGAL_HOST_DEVICE inline T store_random(double value, const RandomSpec& spec) {
  T stored = convert<T>(value);
  if constexpr (is_floating_type_v<T>) {
    if (spec.distribution == Distribution::uniform && spec.b > spec.a)
      while (convert<double>(stored) >= spec.b) stored = next_below(stored);
  }
  return stored;
}

// Writes elements 4*block .. 4*block+3 (those below numel) of a contiguous random tensor: the body of
// both the CPU loop and the CUDA kernel.
template <typename T>
FRUGAL_HOST_DEVICE inline void random_fill_block(T* out, std::int64_t numel, const RandomSpec& spec, std::int64_t block) {
  const PhiloxWords words = philox_block(spec.seed, spec.offset, static_cast<std::uint64_t>(block));
  for (int lane = 0; lane < kPhiloxWordsPerBlock && block * kPhiloxWordsPerBlock + lane < numel; ++lane)
    out[block * kPhiloxWordsPerBlock + lane] = store_random<T>(random_value(spec, words, lane), spec);
}

}  // namespace frugal
