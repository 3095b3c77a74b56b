// The per-element work of frugal's elementwise ops, written once as FRUGAL_HOST_DEVICE functions
// that the CPU loop, the CUDA kernel and the emulated kernel all call, so the CPU suite checks the
// arithmetic the GPU runs. Values are computed in float (in double for f64) and stored back in the
// tensor's dtype, as PyTorch does for f16/bf16.
// Not here: loops, launches, broadcasting or checks (kernels/elementwise.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace frugal {

// One input (and up to two scalar parameters a, b).
enum class UnaryOp : std::uint8_t {
  neg, exp, log, sqrt, rsqrt, abs, relu, relu6, sigmoid, tanh,
  add_scalar,  // x + a
  mul_scalar,  // x * a
  div_scalar,  // x / a
  pow_scalar,  // x ^ a
  clamp,       // min(max(x, a), b)
};

// Two inputs, broadcast against each other. The *_backward ops take the incoming gradient first.
enum class BinaryOp : std::uint8_t {
  add, sub, mul, div, maximum, minimum,
  relu_backward,     // 0 where x <= 0, else g (NaN x: g)         (second input: the forward input x)
  relu6_backward,    // 0 where x <= 0 or x >= 6, else g (PyTorch)  (second input: x)
  sigmoid_backward,  // g * y * (1 - y)                            (second input: the forward output y)
  tanh_backward,     // g * (1 - y * y)                            (second input: y)
};

namespace elementwise {

// The math functions for float and double, with the names both the host and CUDA provide.
FRUGAL_HOST_DEVICE inline float exp_of(float x) { return expf(x); }
FRUGAL_HOST_DEVICE inline double exp_of(double x) { return ::exp(x); }
FRUGAL_HOST_DEVICE inline float log_of(float x) { return logf(x); }
FRUGAL_HOST_DEVICE inline double log_of(double x) { return ::log(x); }
FRUGAL_HOST_DEVICE inline float sqrt_of(float x) { return sqrtf(x); }
FRUGAL_HOST_DEVICE inline double sqrt_of(double x) { return ::sqrt(x); }
FRUGAL_HOST_DEVICE inline float tanh_of(float x) { return tanhf(x); }
FRUGAL_HOST_DEVICE inline double tanh_of(double x) { return ::tanh(x); }
FRUGAL_HOST_DEVICE inline float pow_of(float x, float p) { return powf(x, p); }
FRUGAL_HOST_DEVICE inline double pow_of(double x, double p) { return ::pow(x, p); }

// NaN passes through every comparison-based op, as in PyTorch: written so a NaN fails the test.
template <typename C>
// Two selects, each on a comparison made unconditionally: GCC does not speculate a floating-point
// comparison (it may trap) out of a nested ?:, so the nested form stayed a branch per element in
// the CPU loops instead of becoming vector blends. The results are the same.
FRUGAL_HOST_DEVICE inline C clamp_nan(C x, C low, C high) {
  const C raised = x < low ? low : x;
  return raised > high ? high : raised;
}

template <typename C>
FRUGAL_HOST_DEVICE inline C unary(UnaryOp op, C x, C a, C b) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return exp_of(x);
    case UnaryOp::log: return log_of(x);
    case UnaryOp::sqrt: return sqrt_of(x);
    case UnaryOp::rsqrt: return C(1) / sqrt_of(x);
    case UnaryOp::abs: return x < C(0) ? -x : x;
    case UnaryOp::relu: return x < C(0) ? C(0) : x;
    case UnaryOp::relu6: return clamp_nan(x, C(0), C(6));
    case UnaryOp::sigmoid: return C(1) / (C(1) + exp_of(-x));
    case UnaryOp::tanh: return tanh_of(x);
    case UnaryOp::add_scalar: return x + a;
    case UnaryOp::mul_scalar: return x * a;
    case UnaryOp::div_scalar: return x / a;
    case UnaryOp::pow_scalar: return pow_of(x, a);
    case UnaryOp::clamp: return clamp_nan(x, a, b);
  }
  return x;
}

template <typename C>
FRUGAL_HOST_DEVICE inline C binary(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::maximum: return (x != x || x > y) ? x : y;  // a NaN on either side wins
    case BinaryOp::minimum: return (x != x || x < y) ? x : y;
    // Written as "zero where outside" so a NaN input passes the gradient on, as PyTorch's
    // threshold_backward and hardtanh_backward do (a NaN compares false either way).
    case BinaryOp::relu_backward: return y <= C(0) ? C(0) : x;
    case BinaryOp::relu6_backward: return (y <= C(0) || y >= C(6)) ? C(0) : x;
    case BinaryOp::sigmoid_backward: return x * y * (C(1) - y);
    case BinaryOp::tanh_backward: return x * (C(1) - y * y);
  }
  return x;
}

}  // namespace elementwise
}  // namespace frugal
