// The per-channel and per-element arithmetic of batch norm, written once as FRUGAL_HOST_DEVICE code
// that the CPU loops and the CUDA kernels both call, so the CPU suite checks what the GPU runs.
// Not here: loops, launches, checks (kernels/batch_norm.cpp), or cuDNN.
//
// Glossary: the input is viewed as contiguous [N, C, S]: N the batch, C the channels, S the product
// of the dims after C (H * W for images, 1 for [N, C]). A channel's statistics run over its
// M = N * S elements. xhat = (x - mean) * invstd is the normalised input; invstd = 1 / sqrt(var + eps).
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/host_device.h"
#include "kernels/elementwise_ops.h"
#include "kernels/reduce_ops.h"

namespace frugal {

struct BatchNormShape {
  std::int64_t batch = 0, channels = 0, spatial = 1;  // N, C, S
  FRUGAL_HOST_DEVICE std::int64_t per_channel() const { return batch * spatial; }  // M
  FRUGAL_HOST_DEVICE std::int64_t offset(std::int64_t n, std::int64_t c, std::int64_t s) const {
    return (n * channels + c) * spatial + s;
  }
};

// Visits one channel's elements r = first, first + step, first + 2 step, ... (r = n * S + s) as
// (n, s) pairs, kept up to date with additions: one division at the start instead of two per
// element, which matters on a GPU, where 64-bit division takes dozens of instructions.
//   for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) ... shape.offset(w.n, c, w.s)
struct ChannelWalk {
  std::int64_t spatial, n, s, dn, ds;
  FRUGAL_HOST_DEVICE ChannelWalk(const BatchNormShape& shape, std::int64_t first, std::int64_t step)
      : spatial(shape.spatial), n(first / spatial), s(first % spatial), dn(step / spatial), ds(step % spatial) {}
  FRUGAL_HOST_DEVICE void advance() {
    n += dn;
    s += ds;
    if (s >= spatial) {  // ds < spatial, so one carry is enough
      s -= spatial;
      ++n;
    }
  }
};

namespace batch_norm {

// The end of a channel's statistics pass: the batch mean and invstd (from the biased variance,
// which the forward normalises with) for the backward, and the running statistics moved towards
// the batch's, the variance's unbiased (M / (M - 1)), as PyTorch and cuDNN do. The running
// pointers are both null or both set. C is float or double (the statistics dtype).
template <typename C>
FRUGAL_HOST_DEVICE inline void finish_statistics(const Welford& stats, std::int64_t c, double momentum, double eps,
                                                 C* save_mean, C* save_invstd, C* running_mean, C* running_var) {
  save_mean[c] = static_cast<C>(stats.mean);
  save_invstd[c] = static_cast<C>(1.0 / elementwise::sqrt_of(stats.variance(0) + eps));
  if (running_mean) {
    running_mean[c] = static_cast<C>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * stats.mean);
    running_var[c] = static_cast<C>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * stats.variance(1));
  }
}

// One channel's forward as y = (x - mean) * scale + bias with scale = invstd * weight: the
// subtraction first, so a large mean cancels exactly before anything is scaled. Null weight and
// bias mean 1 and 0 (affine = false).
template <typename C>
struct ChannelAffine {
  C mean, scale, bias;
};

template <typename C>
FRUGAL_HOST_DEVICE inline ChannelAffine<C> channel_affine(const C* mean, const C* invstd, const C* weight, const C* bias,
                                                         std::int64_t c) {
  return {mean[c], invstd[c] * (weight ? weight[c] : C(1)), bias ? bias[c] : C(0)};
}

// The fused ReLU6 is the elementwise op itself, so the two agree to the bit.
template <typename C>
FRUGAL_HOST_DEVICE inline C normalize(C x, const ChannelAffine<C>& a, bool relu6) {
  const C y = (x - a.mean) * a.scale + a.bias;
  return relu6 ? elementwise::unary(UnaryOp::relu6, y, C(0), C(0)) : y;
}

// The gradient reaching the batch norm: with a fused ReLU6, only where 0 < output < 6 (PyTorch's
// rule, the elementwise relu6_backward); `fused_output` is null otherwise.
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline C incoming_grad(const T* grad, const T* fused_output, std::int64_t i) {
  const C g = convert<C>(grad[i]);
  return fused_output ? elementwise::binary(BinaryOp::relu6_backward, g, convert<C>(fused_output[i])) : g;
}

// The same gate without reading the output: the output recomputed from x by normalize, the forward's
// own arithmetic with the forward's affine (the same mean, invstd, weight and bias), so the same bits
// and the same mask as incoming_grad's (Note [The ReLU6 mask from the input], kernels/cpu/batch_norm_fast.cpp).
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline C incoming_grad_from_input(const T* grad, const T* x, const ChannelAffine<C>& a,
                                                     std::int64_t i) {
  const C g = convert<C>(grad[i]);
  const T output = convert<T>(normalize(convert<C>(x[i]), a, true));
  return elementwise::binary(BinaryOp::relu6_backward, g, convert<C>(output));
}

// A channel's two backward sums, in double like the forward's statistics: sum(dy) is the bias's
// gradient and sum(dy * xhat) the weight's, and the training-mode input gradient needs both.
struct GradSums {
  double dy = 0.0, dy_xhat = 0.0;
  FRUGAL_HOST_DEVICE void add(double g, double xhat) {
    dy += g;
    dy_xhat += g * xhat;
  }
  FRUGAL_HOST_DEVICE void merge(const GradSums& other) {
    dy += other.dy;
    dy_xhat += other.dy_xhat;
  }
};

// One channel's input gradient, dx = scale * (dy - mean_dy - xhat * mean_dy_xhat) with
// scale = weight * invstd. Training: the batch statistics depend on every x, which gives the two
// mean terms (means over the channel's M elements). Eval: the running statistics are constants,
// the map is affine, and both terms are 0. A null mean (the backward from xhat, which reads no x)
// leaves it 0.
template <typename C>
struct ChannelBackward {
  C mean, invstd, scale, mean_dy, mean_dy_xhat;
};

template <typename C>
FRUGAL_HOST_DEVICE inline ChannelBackward<C> channel_backward(const C* mean, const C* invstd, const C* weight,
                                                             const C* sum_dy, const C* sum_dy_xhat, bool training,
                                                             std::int64_t per_channel, std::int64_t c) {
  const C m = static_cast<C>(per_channel);
  return {mean ? mean[c] : C(0), invstd[c], invstd[c] * (weight ? weight[c] : C(1)), training ? sum_dy[c] / m : C(0),
          training ? sum_dy_xhat[c] / m : C(0)};
}

template <typename C>
FRUGAL_HOST_DEVICE inline C xhat(C x, C mean, C invstd) {
  return (x - mean) * invstd;
}

template <typename C>
FRUGAL_HOST_DEVICE inline C grad_input_from_xhat(C g, C xhat, const ChannelBackward<C>& b) {
  return b.scale * (g - b.mean_dy - xhat * b.mean_dy_xhat);
}

template <typename C>
FRUGAL_HOST_DEVICE inline C grad_input(C g, C x, const ChannelBackward<C>& b) {
  return grad_input_from_xhat(g, xhat(x, b.mean, b.invstd), b);
}

// ---- From a saved xhat
//
// Note [One saved tensor per BN-ReLU6]
// A BN-ReLU6 block can keep xhat alone for its backward: y, the ReLU6 mask and the next layer's
// input relu6(y) are all recomputed from it. That is exact only if the forward's y is itself
// computed from xhat AS STORED (rounded to the input's dtype) by the same arithmetic the backward
// recomputes it with. output_from_xhat below is the one place y = xhat * weight + bias is written,
// and every kernel that computes y from xhat calls it (the forward, batch_norm_affine, the
// backward's mask). Its multiply-add is multiply_add_unfused (core/host_device.h): two roundings on
// every device, never an FMA that a compiler may or may not form at one call site and not another
// (nvcc contracts unless told not to). So y has the same bits in forward and backward, and on the
// CPU, the GPU and the emulator alike.

// A channel's weight and bias, 1 and 0 when not affine.
template <typename C>
struct ChannelScaleShift {
  C weight, bias;
};

template <typename C>
FRUGAL_HOST_DEVICE inline ChannelScaleShift<C> channel_scale_shift(const C* weight, const C* bias, std::int64_t c) {
  return {weight ? weight[c] : C(1), bias ? bias[c] : C(0)};
}

template <typename C>
FRUGAL_HOST_DEVICE inline C output_from_xhat(C xhat, const ChannelScaleShift<C>& a, bool relu6) {
  const C y = multiply_add_unfused(xhat, a.weight, a.bias);
  return relu6 ? elementwise::unary(UnaryOp::relu6, y, C(0), C(0)) : y;
}

// The gradient reaching the batch norm when only xhat was saved: with a fused ReLU6, gated by the
// output the forward stored (recomputed, then rounded to T as the forward rounded it), so the mask
// is incoming_grad's to the bit.
template <typename C, typename T>
FRUGAL_HOST_DEVICE inline C incoming_grad_from_xhat(const T* grad, const T* xhat, const ChannelScaleShift<C>& a,
                                                    bool relu6, std::int64_t i) {
  const C g = convert<C>(grad[i]);
  if (!relu6) return g;
  const T output = convert<T>(output_from_xhat(convert<C>(xhat[i]), a, true));
  return elementwise::binary(BinaryOp::relu6_backward, g, convert<C>(output));
}

}  // namespace batch_norm

}  // namespace frugal
