// 8 floats as one GCC vector ("octet"): an AVX2 register, half of an AVX-512 one, and the elements of
// one mask byte. The CPU loops compiled per instruction set (target_clones) that load, gate and mask
// 8 values at a time share these helpers. Why 8 and not 16: a 16-float vector has no AVX2 register,
// so GCC keeps it on the stack (the comment on Lanes, kernels/cpu/batch_norm_fast.cpp). The helpers
// are always inlined, so each clone gets them in its own instruction set: an out-of-line copy would
// be one instruction set's, and a file built with -mavx2 could give the linker an AVX2 copy for
// every caller. Also a 4x4 transpose of floats (Quad), for copies between layouts. Host code only;
// not a SIMD library: only what those loops use.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/activation_codec_ops.h"  // OpenRange

namespace frugal::cpu {

inline constexpr std::int64_t kOctet = 8;
typedef float Octet __attribute__((vector_size(kOctet * sizeof(float))));
typedef std::int32_t OctetWords __attribute__((vector_size(kOctet * sizeof(std::int32_t))));
typedef std::uint32_t OctetBits __attribute__((vector_size(kOctet * sizeof(std::uint32_t))));
typedef std::uint16_t OctetHalves __attribute__((vector_size(kOctet * sizeof(std::uint16_t))));
inline constexpr OctetWords kOctetIndex = {0, 1, 2, 3, 4, 5, 6, 7};
inline constexpr OctetWords kOctetBit = {1, 2, 4, 8, 16, 32, 64, 128};

[[gnu::always_inline]] inline void load(Octet& v, const float* p) { std::memcpy(&v, p, sizeof v); }

// 8 values of grad, gated by the 8 bits of *mask_at unless mask_at is null (bit l, least significant
// first, for lane l): lane l keeps grad's bits ANDed with minus bit l (all ones or all zeros), which
// is keep_or_zero's select (kernels/activation_codec_ops.h) and so apply_packed_mask's bits. Shifts,
// ANDs and a negation: no comparison, no multiply (a NaN or infinite grad under a 0 bit gives +0, as
// relu6_backward does).
[[gnu::always_inline]] inline void load_gated(Octet& g, const float* grad, const std::uint8_t* mask_at) {
  OctetWords words;
  std::memcpy(&words, grad, sizeof words);
  if (mask_at) words &= -(((OctetWords{} + *mask_at) >> kOctetIndex) & 1);
  g = (Octet)words;
}

// The mask byte of low < v < high for 8 values, as mask_bits (kernels/activation_codec_ops.h) packs
// it: lane l's comparison (all ones or zeros, 0 for a NaN) keeps bit l, and the lanes are ORed
// together in halves. Not a conversion of the lanes to bytes: GCC lowers that to one lane at a time.
typedef std::int32_t QuadWords __attribute__((vector_size(4 * sizeof(std::int32_t))));

[[gnu::always_inline]] inline std::uint8_t mask_byte_of(const Octet& v, const OpenRange<float>& range) {
  const OctetWords bits = (range.low < v) & (v < range.high) & kOctetBit;
  const QuadWords four = __builtin_shufflevector(bits, bits, 0, 1, 2, 3) | __builtin_shufflevector(bits, bits, 4, 5, 6, 7);
  const QuadWords two = four | __builtin_shufflevector(four, four, 2, 3, 0, 1);
  return static_cast<std::uint8_t>(two[0] | two[1]);
}

// Four floats (an SSE register: every x86-64 clone has it) for transposes in 4x4 blocks.
typedef float Quad __attribute__((vector_size(4 * sizeof(float))));

// to[r * to_row + k] = from[k * from_row + r] for r, k < 4: four 4-float loads, the transpose in
// registers, four 4-float stores (where a copy between a row-major and a column-major layout would
// otherwise move each float on its own). Values only move.
[[gnu::always_inline]] inline void transpose_4x4(const float* __restrict from, std::int64_t from_row,
                                                 float* __restrict to, std::int64_t to_row) {
  Quad r[4];
  for (int k = 0; k < 4; ++k) std::memcpy(&r[k], from + k * from_row, sizeof(Quad));
  // Interleave rows 0 and 1, and rows 2 and 3, then take each column's halves from the two.
  const Quad low01 = __builtin_shufflevector(r[0], r[1], 0, 4, 1, 5);
  const Quad high01 = __builtin_shufflevector(r[0], r[1], 2, 6, 3, 7);
  const Quad low23 = __builtin_shufflevector(r[2], r[3], 0, 4, 1, 5);
  const Quad high23 = __builtin_shufflevector(r[2], r[3], 2, 6, 3, 7);
  const Quad columns[4] = {__builtin_shufflevector(low01, low23, 0, 1, 4, 5),
                           __builtin_shufflevector(low01, low23, 2, 3, 6, 7),
                           __builtin_shufflevector(high01, high23, 0, 1, 4, 5),
                           __builtin_shufflevector(high01, high23, 2, 3, 6, 7)};
  for (int k = 0; k < 4; ++k) std::memcpy(to + k * to_row, &columns[k], sizeof(Quad));
}

}  // namespace frugal::cpu
