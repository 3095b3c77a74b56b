// Sixteen Philox blocks at once (kernels/cpu/dropout.cpp): the words core/philox.h's philox_block
// gives blocks first .. first + 15, computed in AVX-512's sixteen 32-bit lanes where the CPU has it,
// one block at a time otherwise; and bernoulli's keep test on those words as an integer compare. For
// the CPU's f32 dropout loop and its tests.
// Not here: the distributions (core/random_spec.h), or a lane version of random_fill.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace frugal::cpu {

inline constexpr std::int64_t kPhiloxLanes = 16;  // 32-bit lanes of an AVX-512 register

// Sixteen blocks' words, word-major: words[w][j] is word w of block j.
using PhiloxWordsInLanes = std::uint32_t[kPhiloxWordsPerBlock][kPhiloxLanes];

// words[w][j] = philox_block(seed, offset, first + j).w[w], bit for bit.
void philox_sixteen_blocks(std::uint64_t seed, std::uint64_t offset, std::uint64_t first, PhiloxWordsInLanes& words);

// bernoulli's keep test on integers: uniform_from_word(w) < a (core/philox.h; bernoulli's in
// core/random_spec.h) exactly when (w >> 8) < bernoulli_keep_threshold(a), that is ceil(a * 2^24)
// within [0, 2^24].
std::uint32_t bernoulli_keep_threshold(double a);

// Whether philox_sixteen_blocks and dropout's f32 loop run in vector lanes on this CPU (AVX-512F).
bool philox_in_lanes();

}  // namespace frugal::cpu
