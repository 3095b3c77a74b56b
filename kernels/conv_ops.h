// The index math of the native convolution, once, for the CPU and CUDA kernels alike
// (FRUGAL_HOST_DEVICE): where a kernel tap lands in the input, which output a tap of an input pixel
// belongs to, which outputs of a tap stay inside the image, the im2col mapping, and the per-element
// sums that define col2im and the depthwise kernels. The CUDA kernels compute one element each with
// these sums; the CPU kernels walk rows in the same term order (kernels/cpu/conv.cpp), and the
// emulator tests hold the two to the same bits.
// Not here: loops over elements and threads (kernels/cpu/conv.cpp, kernels/cuda/conv.cu).
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/host_device.h"
#include "kernels/elementwise_ops.h"

namespace frugal {

// One image plane's convolution geometry. For im2col it describes one group of one sample
// (`channels` = C_in / groups); for depthwise, one sample (`channels` = C_in).
struct ConvGeometry {
  std::int64_t channels = 0, height = 0, width = 0;  // input
  std::int64_t out_height = 0, out_width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;

  FRUGAL_HOST_DEVICE std::int64_t taps() const { return kernel_h * kernel_w; }
  FRUGAL_HOST_DEVICE std::int64_t plane() const { return height * width; }
  FRUGAL_HOST_DEVICE std::int64_t out_plane() const { return out_height * out_width; }
};

// conv2d's ReLU6 epilogue (kernels/conv.h): the clamp of UnaryOp::relu6, so the same values as
// relu6_ after the convolution.
template <typename C>
FRUGAL_HOST_DEVICE inline C clamp_relu6(C v) {
  return elementwise::clamp_nan(v, C(0), C(6));
}

// Output size along one dim; the caller has checked that the dilated kernel fits the padded input.
FRUGAL_HOST_DEVICE inline std::int64_t conv_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                                                        std::int64_t pad, std::int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// The input coordinate that tap k of output o reads (may fall in the padding: < 0 or >= size).
FRUGAL_HOST_DEVICE inline std::int64_t input_for_tap(std::int64_t o, std::int64_t k, std::int64_t stride, std::int64_t pad,
                                                     std::int64_t dilation) {
  return o * stride - pad + k * dilation;
}

// The output coordinate whose tap k reads input coordinate i, or -1 when no output does. The
// inverse of input_for_tap, for kernels that gather into an input gradient instead of scattering.
FRUGAL_HOST_DEVICE inline std::int64_t output_for_tap(std::int64_t i, std::int64_t k, std::int64_t stride, std::int64_t pad,
                                                      std::int64_t dilation, std::int64_t out_size) {
  const std::int64_t shifted = i + pad - k * dilation;
  if (shifted < 0 || shifted % stride != 0) return -1;
  const std::int64_t o = shifted / stride;
  return o < out_size ? o : -1;
}

// The outputs o in [first, last) whose tap k reads inside an input of `size` (first >= last: none).
// Loops over them need no bounds test per element, so the CPU kernels vectorise.
struct OutputRange {
  std::int64_t first, last;
};
FRUGAL_HOST_DEVICE inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0, a of any sign
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}
FRUGAL_HOST_DEVICE inline OutputRange outputs_inside(std::int64_t k, std::int64_t size, std::int64_t stride, std::int64_t pad,
                                                     std::int64_t dilation, std::int64_t out_size) {
  // input_for_tap(o) = o * stride + shift lies in [0, size) exactly for o in
  // [ceil(-shift / stride), ceil((size - shift) / stride)).
  const std::int64_t shift = k * dilation - pad;
  const std::int64_t first = ceil_div(-shift, stride), last = ceil_div(size - shift, stride);
  return {first < 0 ? 0 : first, last > out_size ? out_size : last};
}

// im2col: the column matrix has one row per (channel, tap) and one column per output pixel,
//   col[(c * KH + kh) * KW + kw][oh * OW + ow] = x[c][oh*s - p + kh*d][ow*s - p + kw*d]  (0 in the padding),
// so that a convolution is weight [C_out, C_in * KH * KW] x col. Returns the offset of that input
// element in a contiguous [channels, H, W] plane, or -1 for padding.
FRUGAL_HOST_DEVICE inline std::int64_t im2col_source(const ConvGeometry& g, std::int64_t row, std::int64_t column) {
  const std::int64_t kw = row % g.kernel_w, kh = row / g.kernel_w % g.kernel_h, c = row / g.taps();
  const std::int64_t h = input_for_tap(column / g.out_width, kh, g.stride_h, g.pad_h, g.dilation_h);
  const std::int64_t w = input_for_tap(column % g.out_width, kw, g.stride_w, g.pad_w, g.dilation_w);
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return -1;
  return (c * g.height + h) * g.width + w;
}

// col2im, as a gather: input element (c, h, w) is the sum of every column entry that im2col copied
// from it. Gathering (one writer per input element) needs no atomics and sums in a fixed order.
template <typename C, typename T>
FRUGAL_HOST_DEVICE C col2im_gather(const ConvGeometry& g, const T* col, std::int64_t c, std::int64_t h, std::int64_t w) {
  C total = 0;
  for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const std::int64_t oh = output_for_tap(h, kh, g.stride_h, g.pad_h, g.dilation_h, g.out_height);
    if (oh < 0) continue;
    for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const std::int64_t ow = output_for_tap(w, kw, g.stride_w, g.pad_w, g.dilation_w, g.out_width);
      if (ow < 0) continue;
      total += convert<C>(col[((c * g.kernel_h + kh) * g.kernel_w + kw) * g.out_plane() + oh * g.out_width + ow]);
    }
  }
  return total;
}

// Depthwise convolution: output channel oc reads input channel oc / multiplier alone (groups = C_in,
// C_out = multiplier * C_in). One output pixel: its taps over one input plane [H, W] and the
// channel's filter [KH, KW].
template <typename C, typename T>
FRUGAL_HOST_DEVICE C depthwise_output(const ConvGeometry& g, const T* x_plane, const T* filter, std::int64_t oh,
                                      std::int64_t ow) {
  C total = 0;
  for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
    if (h < 0 || h >= g.height) continue;
    for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const std::int64_t w = input_for_tap(ow, kw, g.stride_w, g.pad_w, g.dilation_w);
      if (w < 0 || w >= g.width) continue;
      total += convert<C>(x_plane[h * g.width + w]) * convert<C>(filter[kh * g.kernel_w + kw]);
    }
  }
  return total;
}

// The input gradient at (c, h, w) of one sample: the output gradients of the channel's
// `multiplier` output channels whose taps read that pixel, weighted by those taps.
// grad_y is the sample's [C_out, OH, OW]; weight is [C_out, KH, KW].
template <typename C, typename T>
FRUGAL_HOST_DEVICE C depthwise_input_grad(const ConvGeometry& g, std::int64_t multiplier, const T* grad_y, const T* weight,
                                          std::int64_t c, std::int64_t h, std::int64_t w) {
  C total = 0;
  for (std::int64_t j = 0; j < multiplier; ++j) {
    const std::int64_t oc = c * multiplier + j;
    for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
      const std::int64_t oh = output_for_tap(h, kh, g.stride_h, g.pad_h, g.dilation_h, g.out_height);
      if (oh < 0) continue;
      for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const std::int64_t ow = output_for_tap(w, kw, g.stride_w, g.pad_w, g.dilation_w, g.out_width);
        if (ow < 0) continue;
        total += convert<C>(grad_y[(oc * g.out_height + oh) * g.out_width + ow]) *
                 convert<C>(weight[oc * g.taps() + kh * g.kernel_w + kw]);
      }
    }
  }
  return total;
}

// One term of the weight gradient of tap (kh, kw): output pixel `pixel` (oh * OW + ow) of one
// sample's output-gradient plane times the input it read (0 when the tap fell in the padding).
template <typename C, typename T>
FRUGAL_HOST_DEVICE C depthwise_weight_term(const ConvGeometry& g, const T* x_plane, const T* grad_plane, std::int64_t kh,
                                           std::int64_t kw, std::int64_t pixel) {
  const std::int64_t h = input_for_tap(pixel / g.out_width, kh, g.stride_h, g.pad_h, g.dilation_h);
  const std::int64_t w = input_for_tap(pixel % g.out_width, kw, g.stride_w, g.pad_w, g.dilation_w);
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return C(0);
  return convert<C>(grad_plane[pixel]) * convert<C>(x_plane[h * g.width + w]);
}

}  // namespace frugal
