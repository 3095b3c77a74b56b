// Half (IEEE binary16) and BFloat16 (bfloat16): 16-bit floats stored as their bit patterns, with
// conversions to and from float that round to nearest, ties to even, on CPU and GPU alike.
// Not here: arithmetic. Like PyTorch's CPU kernels, frugal computes in float and stores 16 bits.
//
// Formats (sign | exponent | mantissa):
//   f16  1 | 5 (bias 15)  | 10   max 65504, smallest normal 2^-14, smallest subnormal 2^-24
//   bf16 1 | 8 (bias 127) | 7    same range as f32, 8 bits of precision
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace frugal {

namespace half_bits {

FRUGAL_HOST_DEVICE inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

FRUGAL_HOST_DEVICE inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Shifts `value` right by `shift` bits, rounding to nearest with ties to the even result.
FRUGAL_HOST_DEVICE inline std::uint32_t shift_right_round_even(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t dropped = value & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  return kept + ((dropped > halfway || (dropped == halfway && (kept & 1u))) ? 1u : 0u);
}

FRUGAL_HOST_DEVICE inline std::uint16_t from_float_f16(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  constexpr std::uint32_t kFloatInf = 0x7f800000u;
  constexpr std::uint32_t kFirstOverflow = 0x477ff000u;   // 65520: halfway between 65504 and 2^16 rounds to inf
  constexpr std::uint32_t kSmallestNormal = 0x38800000u;  // 2^-14
  constexpr std::uint32_t kHalfSmallestSub = 0x33000000u; // 2^-25: this or less rounds to zero
  if (magnitude > kFloatInf) return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // quiet NaN, payload kept
  if (magnitude >= kFirstOverflow) return static_cast<std::uint16_t>(sign | 0x7c00u);                 // inf
  if (magnitude >= kSmallestNormal) {
    // Re-bias the exponent (127 -> 15, i.e. subtract 112 << 23) and round 23 mantissa bits to 10.
    // A carry out of the mantissa correctly bumps the exponent.
    return static_cast<std::uint16_t>(sign | shift_right_round_even(magnitude - (112u << 23), 13));
  }
  if (magnitude <= kHalfSmallestSub) return static_cast<std::uint16_t>(sign);
  // Subnormal result: value = mantissa_with_hidden_bit * 2^(exponent - 150); in units of 2^-24 that
  // is the mantissa shifted right by (126 - exponent), between 14 and 24 bits here.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  return static_cast<std::uint16_t>(sign | shift_right_round_even(mantissa, static_cast<int>(126u - exponent)));
}

FRUGAL_HOST_DEVICE inline float to_float_f16(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

FRUGAL_HOST_DEVICE inline std::uint16_t from_float_bf16(float value) {
  const std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; overflow carries into inf.
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

FRUGAL_HOST_DEVICE inline float to_float_bf16(std::uint16_t value) {
  return bits_float(static_cast<std::uint32_t>(value) << 16);
}

// A double rounded to float *toward zero, with the last bit set when inexact* ("round to odd").
// Rounding that float to f16 or bf16 then gives the same result as rounding the double directly:
// float keeps at least two more bits than either, and the odd bit remembers that the discarded
// tail was not zero, so ties are never invented. Plain double -> float -> half rounds twice and
// can be off by one step (1 + 2^-11 + 2^-40 would become 1 instead of 1 + 2^-10).
FRUGAL_HOST_DEVICE inline float round_to_odd_float(double value) {
  float nearest = static_cast<float>(value);
  if (!(value == value)) return nearest;  // NaN
  std::uint32_t bits = float_bits(nearest);
  const double back = static_cast<double>(nearest);
  if (back == value) return nearest;
  if ((back > 0 ? back : -back) > (value > 0 ? value : -value)) bits -= 1;  // was rounded away from zero: step back
  return bits_float(bits | 1u);
}

}  // namespace half_bits

struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  FRUGAL_HOST_DEVICE Half(float value) : bits(half_bits::from_float_f16(value)) {}
  FRUGAL_HOST_DEVICE static Half from_bits(std::uint16_t raw) { Half h; h.bits = raw; return h; }
  FRUGAL_HOST_DEVICE static Half from_double(double value) { return Half(half_bits::round_to_odd_float(value)); }
  FRUGAL_HOST_DEVICE operator float() const { return half_bits::to_float_f16(bits); }
};

struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  FRUGAL_HOST_DEVICE BFloat16(float value) : bits(half_bits::from_float_bf16(value)) {}
  FRUGAL_HOST_DEVICE static BFloat16 from_bits(std::uint16_t raw) { BFloat16 b; b.bits = raw; return b; }
  FRUGAL_HOST_DEVICE static BFloat16 from_double(double value) { return BFloat16(half_bits::round_to_odd_float(value)); }
  FRUGAL_HOST_DEVICE operator float() const { return half_bits::to_float_bf16(bits); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit floats must be stored in 2 bytes");

}  // namespace frugal
