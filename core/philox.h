// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based random number generator. Output is a pure function of (key, counter), so element i
// of a random tensor can be computed by any thread on any device, in any order, and the CPU and GPU
// produce the same bits for the same seed. Checked against Random123's known-answer vectors.
// Not here: the generator state (core/random.h) or the distributions' loops (core/cpu, core/cuda).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace frugal {

inline constexpr int kPhiloxWordsPerBlock = 4;  // Philox4x32: one call, four 32-bit words

struct PhiloxWords {
  std::uint32_t w[kPhiloxWordsPerBlock];
};

// Philox calls that cover numel elements at one word each (the last block may be partial).
FRUGAL_HOST_DEVICE constexpr std::int64_t philox_blocks_for(std::int64_t numel) {
  return (numel + kPhiloxWordsPerBlock - 1) / kPhiloxWordsPerBlock;
}

namespace philox_detail {
constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;  // round multipliers and Weyl key increments
constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;  // are the published Philox constants
constexpr std::uint32_t kKeyBump0 = 0x9E3779B9u;     // golden ratio
constexpr std::uint32_t kKeyBump1 = 0xBB67AE85u;     // sqrt(3) - 1
constexpr int kRounds = 10;                           // the "-10": the recommended round count

FRUGAL_HOST_DEVICE inline void round(std::uint32_t c[4], const std::uint32_t k[2]) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(kMultiplier0) * c[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(kMultiplier1) * c[2];
  const std::uint32_t next[4] = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
                                 static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  for (int i = 0; i < 4; ++i) c[i] = next[i];
}
}  // namespace philox_detail

// The raw generator: 128 random bits from a 128-bit counter and a 64-bit key.
FRUGAL_HOST_DEVICE inline PhiloxWords philox4x32_10(const std::uint32_t counter[4], const std::uint32_t key[2]) {
  PhiloxWords out{{counter[0], counter[1], counter[2], counter[3]}};
  std::uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < philox_detail::kRounds; ++r) {
    if (r > 0) {
      k[0] += philox_detail::kKeyBump0;
      k[1] += philox_detail::kKeyBump1;
    }
    philox_detail::round(out.w, k);
  }
  return out;
}

// frugal's counter layout: key = seed, counter = (block, stream offset). Element i of a random
// tensor uses word i % 4 of block i / 4; each draw from a Generator uses a fresh offset.
FRUGAL_HOST_DEVICE inline PhiloxWords philox_block(std::uint64_t seed, std::uint64_t offset, std::uint64_t block) {
  const std::uint32_t counter[4] = {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                                    static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)};
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  return philox4x32_10(counter, key);
}

// ---- distributions: one random word (or a pair) to one value, shared by CPU and GPU

constexpr int kUniformShift = 8;  // a word's top 24 bits: floats have 24 bits of precision
constexpr double kTwoPow24 = static_cast<double>(1u << (32 - kUniformShift));  // the grid's steps in [0, 1)
constexpr double kTwoPow24Inverse = 1.0 / kTwoPow24;

// Uniform in [0, 1) on the 2^24 grid that a float represents exactly.
FRUGAL_HOST_DEVICE inline double uniform_from_word(std::uint32_t word) {
  return (word >> kUniformShift) * kTwoPow24Inverse;
}

// Standard normal by Box-Muller from two words; `second` selects the sine branch. Computed in double
// so that CPU and GPU results agree after rounding to the output type.
FRUGAL_HOST_DEVICE inline double normal_from_words(std::uint32_t w0, std::uint32_t w1, bool second) {
  const double u1 = ((w0 >> kUniformShift) + 1) * kTwoPow24Inverse;  // (0, 1]: log(0) must not happen
  const double u2 = (w1 >> kUniformShift) * kTwoPow24Inverse;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double radius = ::sqrt(-2.0 * ::log(u1));
  return radius * (second ? ::sin(kTwoPi * u2) : ::cos(kTwoPi * u2));
}

// Integer in [low, low + range) with range <= 2^32, by multiply-shift (Lemire). Bias is at most
// range / 2^32, negligible for the sizes a tensor library samples from.
FRUGAL_HOST_DEVICE inline std::int64_t randint_from_word(std::uint32_t word, std::int64_t low, std::uint64_t range) {
  return low + static_cast<std::int64_t>((static_cast<std::uint64_t>(word) * range) >> 32);
}

}  // namespace frugal
