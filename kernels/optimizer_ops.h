// The per-element updates of frugal's optimizers, written once as FRUGAL_HOST_DEVICE functions for
// the CPU loop, the CUDA kernel and the emulated kernel. Each updates one parameter element (and its
// state) in place, in the compute type (float, or double for f64 parameters), following PyTorch's
// torch.optim.SGD and torch.optim.AdamW step by step.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace frugal {

struct SgdConfig {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer starts as the gradient itself (PyTorch)
};

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  std::int64_t step = 1;  // 1-based, for bias correction
};

namespace optimizer {

// SGD: g += wd * p; buf = first ? g : momentum * buf + (1 - dampening) * g;
//      g = nesterov ? g + momentum * buf : buf (when momentum != 0); p -= lr * g.
template <typename C>
FRUGAL_HOST_DEVICE inline void sgd(C& param, C grad, C& buffer, const SgdConfig& c) {
  if (c.weight_decay != 0.0) grad += static_cast<C>(c.weight_decay) * param;
  if (c.momentum != 0.0) {
    buffer = c.first_step ? grad : static_cast<C>(c.momentum) * buffer + static_cast<C>(1.0 - c.dampening) * grad;
    grad = c.nesterov ? grad + static_cast<C>(c.momentum) * buffer : buffer;
  }
  param -= static_cast<C>(c.lr) * grad;
}

// AdamW's bias corrections 1 - b1^t and 1 - b2^t: the same for every element of a step, so each
// loop computes them once (two pow calls per element were 16% of a MobileNetV2 training step).
struct AdamWCorrections {
  double correction1, correction2;
};
FRUGAL_HOST_DEVICE inline AdamWCorrections adamw_corrections(const AdamWConfig& c) {
  return {1.0 - ::pow(c.beta1, static_cast<double>(c.step)), 1.0 - ::pow(c.beta2, static_cast<double>(c.step))};
}

// AdamW: decoupled weight decay first (p *= 1 - lr * wd), then Adam with bias correction:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps).
template <typename C>
FRUGAL_HOST_DEVICE inline void adamw(C& param, C grad, C& m, C& v, const AdamWConfig& c, const AdamWCorrections& k) {
  param *= static_cast<C>(1.0 - c.lr * c.weight_decay);
  m = static_cast<C>(c.beta1) * m + static_cast<C>(1.0 - c.beta1) * grad;
  v = static_cast<C>(c.beta2) * v + static_cast<C>(1.0 - c.beta2) * grad * grad;
  const C denominator = static_cast<C>(::sqrt(static_cast<double>(v) / k.correction2)) + static_cast<C>(c.eps);
  param -= static_cast<C>(c.lr / k.correction1) * m / denominator;
}

// ---- 8-bit state (AdamW8bit)
// Note [8-bit moments]
// AdamW8bit keeps each moment as one byte per element plus one f32 scale per block of kQuantBlock
// elements: the block's largest magnitude (absmax), so each element is coded relative to its own
// block and one outlier costs only its block precision, as bitsandbytes' block-wise 8-bit
// optimizers do. A byte is a tiny float, not a linear step, because moments span many orders of
// magnitude within a block (bitsandbytes' "dynamic" codes have the same exponent-plus-fraction idea
// with another split of the bits):
//   first moment (signed):        sign, 4 exponent bits, 3 fraction bits: values down to 2^-17 of absmax;
//   second moment (non-negative): 6 exponent bits, 2 fraction bits: down to 2^-64. Its range must
//   be wider than the square of the first's: a second moment coded to 0 beside a first moment that is
//   not would make m / (sqrt(v) + eps) an enormous step. The update reads its square root, which
//   halves its relative error, so two fraction bits serve as well as the first moment's three.
// Rounding is to the nearest code (ties to an even fraction), at most half a code step away: 1/16 of
// the value's power of two for the first moment (at most 1/17, 5.9%, relative above the subnormal
// range), 1/8 for the second (1/9 relative, 5.4% in its square root). Every step works in f32: the codes are
// decoded, AdamW's own update runs on them (optimizer::adamw), the parameter moves by the f32 moments,
// and the new moments are coded against their block's new absmax. Coding is integer arithmetic on the
// float's bits (and rint for the subnormal codes), exact, so the CPU, the GPU and the emulator code
// the same moment to the same byte.
inline constexpr int kQuantBlock = 256;  // bitsandbytes' block for 8-bit optimizer state

template <bool Signed>
struct Code8 {
  static constexpr int kExponentBits = Signed ? 4 : 6;
  static constexpr int kBias = (1 << kExponentBits) - 1;  // the largest exponent field codes [1, 2)
  static constexpr int kFractionBits = Signed ? 3 : 2;
  static constexpr int kFractions = 1 << kFractionBits;
};

// A float's bits and back: a normal code's exponent and fraction are a float's exponent and top
// three fraction bits, rebiased, so coding needs no library call (it runs once per moment per step).
FRUGAL_HOST_DEVICE inline std::uint32_t float_bits(float x) {
  std::uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}
FRUGAL_HOST_DEVICE inline float bits_float(std::uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
inline constexpr int kFloatBias = 127, kFloatFractionBits = 23;

// The value of `code` relative to its block's absmax, in [-1, 1] (signed) or [0, 1].
template <bool Signed>
FRUGAL_HOST_DEVICE inline float decode8(std::uint8_t code) {
  using K = Code8<Signed>;
  const std::uint32_t fraction = code & (K::kFractions - 1);
  const int exponent = (code >> K::kFractionBits) & ((1 << K::kExponentBits) - 1);
  // A zero exponent field is subnormal: fraction x 2^(1 - bias - fraction bits), no implicit 1.
  const float magnitude =
      exponent == 0
          ? static_cast<float>(fraction) *
                bits_float(static_cast<std::uint32_t>(kFloatBias + 1 - K::kBias - K::kFractionBits) << kFloatFractionBits)
          : bits_float(static_cast<std::uint32_t>(exponent - K::kBias + kFloatBias) << kFloatFractionBits |
                       fraction << (kFloatFractionBits - K::kFractionBits));
  return Signed && (code & 0x80) ? -magnitude : magnitude;
}

// The nearest code to x, a value relative to its block's absmax (|x| <= 1; larger is clamped to 1).
template <bool Signed>
FRUGAL_HOST_DEVICE inline std::uint8_t encode8(float x) {
  using K = Code8<Signed>;
  constexpr int kDropped = kFloatFractionBits - K::kFractionBits;  // the float's fraction bits a code drops
  const bool negative = Signed && x < 0.0f;
  const float a = negative ? -x : (x > 0.0f ? x : 0.0f);
  const float smallest_normal = bits_float(static_cast<std::uint32_t>(kFloatBias + 1 - K::kBias) << kFloatFractionBits);
  int fraction = 0, exponent = 0;
  if (a >= 1.0f) {
    exponent = K::kBias;  // 1.0: the block's absmax itself
  } else if (a >= smallest_normal) {
    // Round the float's fraction to 3 bits, to nearest, ties to even: add just under half of the last
    // kept bit, plus that bit. A carry out of the fraction moves into the exponent, as it should.
    const std::uint32_t bits = float_bits(a);
    const std::uint32_t rounded = bits + ((1u << (kDropped - 1)) - 1) + ((bits >> kDropped) & 1);
    exponent = static_cast<int>(rounded >> kFloatFractionBits) - kFloatBias + K::kBias;
    fraction = static_cast<int>((rounded >> kDropped) & (K::kFractions - 1));
  } else if (a > 0.0f) {
    // Subnormal: a multiple of 2^(1 - bias - fraction bits), to nearest, ties to even (rint); kFractions
    // of them is the smallest normal.
    fraction = static_cast<int>(::rintf(a * bits_float(static_cast<std::uint32_t>(kFloatBias + K::kBias - 1 + K::kFractionBits)
                                                      << kFloatFractionBits)));
    if (fraction == K::kFractions) fraction = 0, exponent = 1;
  }
  return static_cast<std::uint8_t>((negative ? 0x80 : 0) | (exponent << K::kFractionBits) | fraction);
}

// One element of AdamW8bit: its moments decoded against their blocks' scales, AdamW's update in f32
// (the parameter moves by the f32 moments), the new moments left in m and v for the block to code.
FRUGAL_HOST_DEVICE inline void adamw8bit_element(float& param, float grad, std::uint8_t m_code, std::uint8_t v_code,
                                                 float m_scale, float v_scale, float& m, float& v, const AdamWConfig& c,
                                                 const AdamWCorrections& k) {
  m = decode8<true>(m_code) * m_scale;
  v = decode8<false>(v_code) * v_scale;
  adamw<float>(param, grad, m, v, c, k);
}

// The code of a new moment against its block's new absmax (0 codes an all-zero block).
template <bool Signed>
FRUGAL_HOST_DEVICE inline std::uint8_t code_in_block(float value, float absmax) {
  return absmax > 0.0f ? encode8<Signed>(value / absmax) : std::uint8_t{0};
}

}  // namespace optimizer
}  // namespace frugal
