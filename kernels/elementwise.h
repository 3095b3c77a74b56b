// Elementwise ops on tensors: unary math and activations, binary arithmetic with NumPy/PyTorch
// broadcasting, where, and the backward of the activations whose gradient needs a mask. Every
// op allocates a new contiguous result, except the in-place ones (trailing underscore).
// Operands must share one floating dtype and one device; shapes are broadcast from the right
// (sizes equal, or 1). Kernels: kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu.
// Not here: reductions, and the reduction of gradients over broadcast dims (autograd's job).
#pragma once

#include "core/tensor.h"
#include "kernels/elementwise_ops.h"

namespace frugal {

// The shape two operands broadcast to; ShapeError naming `op` and both shapes if they do not.
Shape broadcast_shapes(std::span<const std::int64_t> a, std::span<const std::int64_t> b, const char* op);

Tensor unary(UnaryOp op, const Tensor& x, double a = 0.0, double b = 0.0);
Tensor& unary_(UnaryOp op, Tensor& x, double a = 0.0, double b = 0.0);  // in place (x must not be an expanded view)
Tensor binary(BinaryOp op, const Tensor& x, const Tensor& y);
Tensor& binary_(BinaryOp op, Tensor& x, const Tensor& y);  // x = x op y in place; y broadcasts to x's shape
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y);  // condition: bool

// ---- by name
inline Tensor add(const Tensor& x, const Tensor& y) { return binary(BinaryOp::add, x, y); }
inline Tensor sub(const Tensor& x, const Tensor& y) { return binary(BinaryOp::sub, x, y); }
inline Tensor mul(const Tensor& x, const Tensor& y) { return binary(BinaryOp::mul, x, y); }
inline Tensor div(const Tensor& x, const Tensor& y) { return binary(BinaryOp::div, x, y); }
inline Tensor maximum(const Tensor& x, const Tensor& y) { return binary(BinaryOp::maximum, x, y); }
inline Tensor minimum(const Tensor& x, const Tensor& y) { return binary(BinaryOp::minimum, x, y); }
inline Tensor add(const Tensor& x, double s) { return unary(UnaryOp::add_scalar, x, s); }
inline Tensor sub(const Tensor& x, double s) { return unary(UnaryOp::add_scalar, x, -s); }
inline Tensor mul(const Tensor& x, double s) { return unary(UnaryOp::mul_scalar, x, s); }
inline Tensor div(const Tensor& x, double s) { return unary(UnaryOp::div_scalar, x, s); }
inline Tensor pow(const Tensor& x, double p) { return unary(UnaryOp::pow_scalar, x, p); }
inline Tensor clamp(const Tensor& x, double low, double high) { return unary(UnaryOp::clamp, x, low, high); }
inline Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x); }
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x); }
inline Tensor log(const Tensor& x) { return unary(UnaryOp::log, x); }
inline Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x); }
inline Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::rsqrt, x); }
inline Tensor abs(const Tensor& x) { return unary(UnaryOp::abs, x); }
inline Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x); }
inline Tensor relu6(const Tensor& x) { return unary(UnaryOp::relu6, x); }
inline Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x); }
inline Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x); }
inline Tensor& add_(Tensor& x, const Tensor& y) { return binary_(BinaryOp::add, x, y); }
inline Tensor& mul_(Tensor& x, const Tensor& y) { return binary_(BinaryOp::mul, x, y); }
inline Tensor& relu_(Tensor& x) { return unary_(UnaryOp::relu, x); }
inline Tensor& relu6_(Tensor& x) { return unary_(UnaryOp::relu6, x); }

// ---- backward of the activations (grad first; x the forward input, y the forward output)
inline Tensor relu_backward(const Tensor& grad, const Tensor& x) { return binary(BinaryOp::relu_backward, grad, x); }
inline Tensor relu6_backward(const Tensor& grad, const Tensor& x) { return binary(BinaryOp::relu6_backward, grad, x); }
inline Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) { return binary(BinaryOp::sigmoid_backward, grad, y); }
inline Tensor tanh_backward(const Tensor& grad, const Tensor& y) { return binary(BinaryOp::tanh_backward, grad, y); }

}  // namespace frugal
