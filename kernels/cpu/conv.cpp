// CPU kernels of the native convolution (kernels/conv_backends.h), parallel (core/cpu/parallel.h) over
// independent rows or planes. They walk rows rather than elements: for each kernel tap,
// outputs_inside() (kernels/conv_ops.h) gives the run of outputs whose input lies inside the image,
// so the inner loops have no bounds test and vectorise. Every element still receives its terms in
// the order of the per-element definitions in conv_ops.h (tap by tap: j, then kh, then kw) and in
// the same type, so im2col, col2im and the depthwise forward and input gradient reference loops
// (depthwise_*_reference) give the same bits as the CUDA kernels, which use those definitions
// directly. The depthwise weight gradient sums a whole batch of pixels per tap, in double here and as
// a tree on the GPU: close, not identical. depthwise_forward and its two gradients send f32 3x3
// convolutions with padding 1 and stride 1 or 2 (MobileNetV2's; the input gradient with multiplier 1
// only) to a fast path (kernels/cpu/depthwise_3x3.h) that matches the reference loops up to f32
// rounding, with the same bits for any thread count; every other shape and dtype to the reference.
// Not here: the GEMMs (kernels/gemm.h) and the per-sample orchestration (kernels/conv.cpp).
#include <algorithm>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "kernels/conv_backends.h"
#include "kernels/cpu/depthwise_3x3.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {
// The input column read by output ow of tap kw is ow * stride + shift.
std::int64_t column_shift(const ConvGeometry& g, std::int64_t kw) { return kw * g.dilation_w - g.pad_w; }
OutputRange columns_inside(const ConvGeometry& g, std::int64_t kw) {
  return outputs_inside(kw, g.width, g.stride_w, g.pad_w, g.dilation_w, g.out_width);
}
}  // namespace

void im2col(DType dtype, const ConvGeometry& g, const void* x, void* col) {
  visit_floating(dtype, "conv2d", [&]<typename T, typename>() {
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(col);
    const T zero = convert<T>(0.0f);
    parallel_for(g.channels * g.taps(), g.channels * g.taps() * g.out_plane(), [&](std::int64_t r) {  // one (channel, tap) row of the column matrix
      const std::int64_t c = r / g.taps(), kh = r % g.taps() / g.kernel_w, kw = r % g.kernel_w;
      const OutputRange inside = columns_inside(g, kw);
      const std::int64_t shift = column_shift(g, kw);
      for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
        T* dst = out + r * g.out_plane() + oh * g.out_width;
        const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
        if (h < 0 || h >= g.height || inside.first >= inside.last) {
          std::fill(dst, dst + g.out_width, zero);
          continue;
        }
        const T* src = in + (c * g.height + h) * g.width;
        std::fill(dst, dst + inside.first, zero);
        for (std::int64_t ow = inside.first; ow < inside.last; ++ow) dst[ow] = src[ow * g.stride_w + shift];
        std::fill(dst + inside.last, dst + g.out_width, zero);
      }
    });
  });
}

void col2im(DType dtype, const ConvGeometry& g, const void* col, void* x) {
  visit_floating(dtype, "conv2d_backward_input", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(col);
    T* out = static_cast<T*>(x);
    parallel_for(g.channels, g.channels * g.taps() * g.out_plane(), [&](std::int64_t c) {  // each thread owns a channel plane: no races
      std::vector<C> plane(static_cast<std::size_t>(g.plane()), C(0));
      for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
        for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
          const T* row = in + ((c * g.kernel_h + kh) * g.kernel_w + kw) * g.out_plane();
          const OutputRange inside = columns_inside(g, kw);
          const std::int64_t shift = column_shift(g, kw);
          for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
            const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
            if (h < 0 || h >= g.height) continue;
            C* dst = plane.data() + h * g.width;
            for (std::int64_t ow = inside.first; ow < inside.last; ++ow)
              dst[ow * g.stride_w + shift] += convert<C>(row[oh * g.out_width + ow]);
          }
        }
      for (std::int64_t i = 0; i < g.plane(); ++i) out[c * g.plane() + i] = convert<T>(plane[i]);
    });
  });
}

void depthwise_forward_reference(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const void* x,
                       const void* weight, const void* bias, void* y, bool relu6) {
  visit_floating(dtype, "conv2d", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    const T* filters = static_cast<const T*>(weight);
    const T* shift_by = static_cast<const T*>(bias);
    T* out = static_cast<T*>(y);
    const std::int64_t out_channels = g.channels * multiplier;
    parallel_for(batch * out_channels, batch * out_channels * g.taps() * g.out_plane(), [&](std::int64_t plane) {  // one (sample, output channel)
      const std::int64_t n = plane / out_channels, oc = plane % out_channels;
      const T* x_plane = in + (n * g.channels + oc / multiplier) * g.plane();
      const T* filter = filters + oc * g.taps();
      const C offset = shift_by ? convert<C>(shift_by[oc]) : C(0);
      std::vector<C> row(static_cast<std::size_t>(g.out_width));
      for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
        std::fill(row.begin(), row.end(), C(0));
        for (std::int64_t kh = 0; kh < g.kernel_h; ++kh) {
          const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
          if (h < 0 || h >= g.height) continue;
          const T* src = x_plane + h * g.width;
          for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
            const C f = convert<C>(filter[kh * g.kernel_w + kw]);
            const OutputRange inside = columns_inside(g, kw);
            const std::int64_t shift = column_shift(g, kw);
            for (std::int64_t ow = inside.first; ow < inside.last; ++ow)
              row[ow] += convert<C>(src[ow * g.stride_w + shift]) * f;
          }
        }
        T* dst = out + plane * g.out_plane() + oh * g.out_width;
        for (std::int64_t ow = 0; ow < g.out_width; ++ow)
          dst[ow] = convert<T>(relu6 ? clamp_relu6(row[ow] + offset) : row[ow] + offset);
      }
    });
  });
}

void depthwise_backward_input_reference(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                              const void* grad_y, const void* weight, void* grad_x) {
  visit_floating(dtype, "conv2d_backward_input", [&]<typename T, typename C>() {
    const T* dy = static_cast<const T*>(grad_y);
    const T* filters = static_cast<const T*>(weight);
    T* dx = static_cast<T*>(grad_x);
    parallel_for(batch * g.channels, batch * g.channels * multiplier * g.taps() * g.out_plane(), [&](std::int64_t plane) {  // one (sample, input channel): no races
      const std::int64_t n = plane / g.channels, c = plane % g.channels;
      std::vector<C> sums(static_cast<std::size_t>(g.plane()), C(0));
      for (std::int64_t j = 0; j < multiplier; ++j) {
        const std::int64_t oc = c * multiplier + j;
        const T* grad_plane = dy + (n * g.channels * multiplier + oc) * g.out_plane();
        for (std::int64_t kh = 0; kh < g.kernel_h; ++kh)
          for (std::int64_t kw = 0; kw < g.kernel_w; ++kw) {
            const C f = convert<C>(filters[oc * g.taps() + kh * g.kernel_w + kw]);
            const OutputRange inside = columns_inside(g, kw);
            const std::int64_t shift = column_shift(g, kw);
            for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
              const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
              if (h < 0 || h >= g.height) continue;
              C* dst = sums.data() + h * g.width;
              const T* src = grad_plane + oh * g.out_width;
              for (std::int64_t ow = inside.first; ow < inside.last; ++ow)
                dst[ow * g.stride_w + shift] += convert<C>(src[ow]) * f;
            }
          }
      }
      for (std::int64_t i = 0; i < g.plane(); ++i) dx[plane * g.plane() + i] = convert<T>(sums[i]);
    });
  });
}

void depthwise_backward_weight_reference(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                               const void* grad_y, const void* x, void* grad_weight) {
  visit_floating(dtype, "conv2d_backward_weight", [&]<typename T, typename>() {
    const T* dy = static_cast<const T*>(grad_y);
    const T* in = static_cast<const T*>(x);
    T* dw = static_cast<T*>(grad_weight);
    const std::int64_t out_channels = g.channels * multiplier;
    parallel_for(out_channels * g.taps(), out_channels * g.taps() * batch * g.out_plane(), [&](std::int64_t job) {  // one (output channel, tap)
      const std::int64_t oc = job / g.taps(), kh = job % g.taps() / g.kernel_w, kw = job % g.kernel_w;
      const OutputRange inside = columns_inside(g, kw);
      const std::int64_t shift = column_shift(g, kw);
      double total = 0.0;
      for (std::int64_t n = 0; n < batch; ++n) {
        const T* x_plane = in + (n * g.channels + oc / multiplier) * g.plane();
        const T* grad_plane = dy + (n * out_channels + oc) * g.out_plane();
        for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
          const std::int64_t h = input_for_tap(oh, kh, g.stride_h, g.pad_h, g.dilation_h);
          if (h < 0 || h >= g.height) continue;
          for (std::int64_t ow = inside.first; ow < inside.last; ++ow)
            total += convert<double>(grad_plane[oh * g.out_width + ow]) *
                     convert<double>(x_plane[h * g.width + ow * g.stride_w + shift]);
        }
      }
      dw[job] = convert<T>(total);
    });
  });
}

void depthwise_forward(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const void* x,
                       const void* weight, const void* bias, void* y, bool relu6) {
  if (!depthwise_3x3_applies(dtype, g))
    return depthwise_forward_reference(dtype, g, batch, multiplier, x, weight, bias, y, relu6);
  depthwise_3x3_forward(g, batch, multiplier, static_cast<const float*>(x), static_cast<const float*>(weight),
                        static_cast<const float*>(bias), static_cast<float*>(y), relu6);
}

void depthwise_backward_input(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                              const void* grad_y, const void* weight, void* grad_x) {
  if (!depthwise_3x3_applies(dtype, g) || multiplier != 1)
    return depthwise_backward_input_reference(dtype, g, batch, multiplier, grad_y, weight, grad_x);
  depthwise_3x3_backward_input(g, batch, static_cast<const float*>(grad_y), static_cast<const float*>(weight),
                               static_cast<float*>(grad_x));
}

void depthwise_backward_weight(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                               const void* grad_y, const void* x, void* grad_weight) {
  if (!depthwise_3x3_applies(dtype, g))
    return depthwise_backward_weight_reference(dtype, g, batch, multiplier, grad_y, x, grad_weight);
  depthwise_3x3_backward_weight(g, batch, multiplier, static_cast<const float*>(grad_y), static_cast<const float*>(x),
                                static_cast<float*>(grad_weight));
}

}  // namespace frugal::cpu
