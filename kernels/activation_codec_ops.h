// The per-element and per-channel arithmetic of the activation codecs, written once as
// FRUGAL_HOST_DEVICE code for the CPU loops and the CUDA kernels (kernels/activation_codec.h says
// what the codecs are for). Not here: loops, launches or checks (kernels/activation_codec.cpp).
//
// Glossary: a coded tensor is viewed as contiguous [N, C, S] (BatchNormShape, kernels/batch_norm_ops.h):
// N the batch, C the channels, S the product of the dims after C (1 for [N, C]).
//
// Ranges and decoding compute in double, which holds every f16, bf16 and f32 value exactly and every
// product of an 8-bit code with an f32 step: the results are then the same on the CPU and the GPU,
// whether or not the compiler fuses a multiply and an add (nvcc does by default; x86-64 GCC cannot).
// Codes and masks compute in the compute type (float for 16- and 32-bit floats), which the CPU
// loops vectorise; masks with bounds chosen so that their bits equal double comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/convert.h"
#include "core/host_device.h"

namespace frugal {

// ---- Rounding a double to f32 outward, for mask bounds and for codes' low.

// The largest f32 at or below d, for any d but NaN (below -FLT_MAX: -infinity).
FRUGAL_HOST_DEVICE inline float float_at_or_below(double d) {
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (d < -kFloatMax) return -std::numeric_limits<float>::infinity();
  if (d > kFloatMax) return d == std::numeric_limits<double>::infinity() ? std::numeric_limits<float>::infinity()
                                                                         : std::numeric_limits<float>::max();
  const float nearest = static_cast<float>(d);  // within f32's range: the cast is defined
  return static_cast<double>(nearest) > d ? nextafterf(nearest, -std::numeric_limits<float>::infinity()) : nearest;
}

// The smallest f32 at or above d.
FRUGAL_HOST_DEVICE inline float float_at_or_above(double d) { return -float_at_or_below(-d); }

// ---- 1-bit masks. Bit i is bit i % 8 of byte i / 8, least significant first; the last byte's bits
// past numel are 0.

FRUGAL_HOST_DEVICE constexpr std::int64_t packed_mask_bytes(std::int64_t numel) { return (numel + 7) / 8; }

// ReLU6's top: its gradient passes where 0 < y < 6, the mask every ReLU6 keeps as bits.
constexpr double kReLU6Top = 6.0;

FRUGAL_HOST_DEVICE inline bool mask_bit(const std::uint8_t* mask, std::int64_t i) {
  return ((mask[i / 8] >> (i % 8)) & 1u) != 0;
}

// Note [Masks without branches]: whether an activation lies in (0, 6) is close to a coin toss, so a
// branch on it is mispredicted about half the time. Packing with an `if` and applying with ?: took
// 7 and 7.5 ns per element on the CPU, 5x ReLU6's backward; so both compute their results from the
// comparison's value instead, a full byte is a fixed 8-lane loop, and f32 compares in float: GCC
// vectorises the CPU loops over full bytes then (it did not with double comparisons of converted floats).

// The open interval (low, high) in the compute type C (kernels/visit_floating.h). For float, the
// bounds round outward, low down and high up: no float lies strictly between low and its
// rounding, so for every float x, low < x exactly when float(low) < x, and likewise for high.
template <typename C>
struct OpenRange {
  C low, high;
};

template <typename C>
FRUGAL_HOST_DEVICE inline OpenRange<C> open_range(double low, double high) {
  if constexpr (std::is_same_v<C, double>)
    return {low, high};
  else
    return {float_at_or_below(low), float_at_or_above(high)};
}

// 1 when low < x < high, else 0 (a NaN fails both comparisons).
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline unsigned in_open_range(T x, const OpenRange<C>& range) {
  const C v = convert<C>(x);
  return static_cast<unsigned>(range.low < v) & static_cast<unsigned>(v < range.high);
}

// The mask byte of the `lanes` (at most 8) elements from `first`.
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline std::uint8_t mask_bits(const T* first, int lanes, const OpenRange<C>& range) {
  unsigned bits = 0;
  for (int lane = 0; lane < lanes; ++lane) bits |= in_open_range(first[lane], range) << lane;
  return static_cast<std::uint8_t>(bits);
}

// Byte `byte` of the mask of low < x < high: one byte per call, so the threads that pack a mask each
// own the byte they write and need no atomics.
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline std::uint8_t pack_mask_byte(const T* x, std::int64_t numel, const OpenRange<C>& range,
                                                      std::int64_t byte) {
  const std::int64_t lanes = numel - byte * 8;
  return mask_bits(x + byte * 8, lanes < 8 ? static_cast<int>(lanes) : 8, range);
}

// g when keep is 1, +0 when it is 0: g's bits ANDed with all ones or all zeros, which is exact for
// any value (a multiply by 0 would turn an infinity into NaN) and needs no branch.
template <typename T>
FRUGAL_HOST_DEVICE inline T keep_or_zero(T g, unsigned keep) {
  using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                  std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
  static_assert(sizeof(Bits) == sizeof(T));
  Bits bits;
  memcpy(&bits, static_cast<const void*>(&g), sizeof bits);  // void*: Half and BFloat16 are not trivial types
  bits = static_cast<Bits>(bits & static_cast<Bits>(-static_cast<Bits>(keep)));
  memcpy(static_cast<void*>(&g), &bits, sizeof bits);
  return g;
}

// out = grad where the bit is set, else 0, for the (up to) eight elements of mask byte `byte`. A
// select, not a multiply: an infinite or NaN gradient under a 0 bit gives 0, as relu6_backward does.
template <typename T>
FRUGAL_HOST_DEVICE inline void apply_mask_byte(const T* grad, const std::uint8_t* mask, T* out, std::int64_t numel,
                                               std::int64_t byte) {
  const std::int64_t first = byte * 8, lanes = numel - first;
  const unsigned bits = mask[byte];
  if (lanes >= 8) {
    for (int lane = 0; lane < 8; ++lane) out[first + lane] = keep_or_zero(grad[first + lane], (bits >> lane) & 1u);
  } else {  // the last byte
    for (int lane = 0; lane < lanes; ++lane) out[first + lane] = keep_or_zero(grad[first + lane], (bits >> lane) & 1u);
  }
}

// ---- 8-bit codes per channel: code = round((x - low) / step), decoded as low + code * step.

inline constexpr int kMaxCode = 255;  // the largest 8-bit code: a channel's range spans 255 steps

// A channel's smallest and largest value and its count of NaNs, in the compute type C (exact: a min
// or max is one of the values). min, max and a count come out the same in any order, so however a
// channel is split (CPU planes, GPU threads) the range is exact.
template <typename C>
struct ChannelRange {
  C low = std::numeric_limits<C>::infinity();
  C high = -std::numeric_limits<C>::infinity();
  std::int64_t nans = 0;  // a NaN fails both comparisons below, so it is counted instead (only > 0 is read)

  FRUGAL_HOST_DEVICE void add(C x) {
    low = x < low ? x : low;
    high = x > high ? x : high;
    nans += x != x ? 1 : 0;
  }
  FRUGAL_HOST_DEVICE void merge(const ChannelRange& other) {
    low = other.low < low ? other.low : low;
    high = other.high > high ? other.high : high;
    nans += other.nans;
  }
};

// A channel's low and step from its range. A channel that cannot be coded is marked in its step for
// the caller's check (kernels/activation_codec.cpp reads the steps back): NaN when it holds a NaN
// or an infinity, +infinity when it holds f64 values beyond f32's range (low and step are f32).
// A channel with no elements (N or S is 0) gets low 0 and step 0.
template <typename C>
FRUGAL_HOST_DEVICE inline void finish_channel(const ChannelRange<C>& range, std::int64_t c, float* low, float* step) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  const double min = range.low, max = range.high;  // exact in double
  low[c] = 0.0f;
  if (range.nans > 0 || min == -kInf || max == kInf) {
    step[c] = std::numeric_limits<float>::quiet_NaN();
  } else if (min > max) {
    step[c] = 0.0f;  // empty: nothing to code
  } else if (min < -kFloatMax || max > kFloatMax) {
    step[c] = std::numeric_limits<float>::infinity();
  } else {
    low[c] = float_at_or_below(min);  // an f64 min rounded down: no value lies below low
    // Rounded to f32, 255 steps may fall short of max by a relative 2^-24; the clamp in
    // encode_value then gives max code 255, about 255 * 2^-24 steps from it, far inside half a step.
    step[c] = static_cast<float>((max - static_cast<double>(low[c])) / kMaxCode);
  }
}

// One value's code: (x - low) / step clamped to [0, 255], rounded to nearest with halves up, in the
// compute type C (float for f16, bf16 and f32; double for f64). In float, the subtraction and the
// division each round by at most 2^-24 relatively, so q is off by at most 2 * 2^-24 * 255 < 2^-14
// of a step; IEEE division is exact to the last bit on the CPU and the GPU alike (nvcc's default,
// -prec-div=true), so both give the same codes. Rounded by comparing the exact fraction q - floor(q),
// not by floor(q + 0.5), whose addition can itself round (0.49999997f + 0.5f == 1.0f). The clamp's
// order sends NaN to 0, so the conversion to int is always defined. step 0 (a constant channel)
// codes every value as 0.
template <typename C>
FRUGAL_HOST_DEVICE inline std::uint8_t encode_value(C x, float low, float step) {
  const C q = (x - static_cast<C>(low)) / static_cast<C>(step);
  const C raised = q > C(0) ? q : C(0);                                    // NaN -> 0
  const C clamped = raised < C(kMaxCode) ? raised : static_cast<C>(kMaxCode);
  const int whole = static_cast<int>(clamped);  // floor, as clamped >= 0
  const int code = whole + (clamped - static_cast<C>(whole) >= C(0.5) ? 1 : 0);
  return static_cast<std::uint8_t>(step == 0.0f ? 0 : code);
}

// low + code * step, rounded once to T. The product has at most 8 + 24 significant bits, so it is
// exact in double, and a fused multiply-add rounds the sum exactly as a multiply and an add do.
template <typename T>
FRUGAL_HOST_DEVICE inline T decode_value(std::uint8_t code, float low, float step) {
  return convert<T>(static_cast<double>(low) + static_cast<double>(code) * static_cast<double>(step));
}

}  // namespace frugal
