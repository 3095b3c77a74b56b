// CPU batch norm (kernels/batch_norm_backends.h): the readable reference. The per-channel passes
// (statistics, backward sums) run in parallel over channels, each channel's elements folded in
// order; the elementwise passes run in parallel over (n, c) planes. The arithmetic is
// kernels/batch_norm_ops.h, the same as the CUDA kernels'. For f32 the dispatcher runs the fast loops
// of kernels/cpu/batch_norm_fast.cpp, which are tested against these; f64, f16 and bf16 run these.
#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

void batch_norm_statistics(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,
                           void* save_mean, void* save_invstd, void* running_mean, void* running_var) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    parallel_for(shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t c) {
      // Per plane (one sample's channel c) two passes, its sum and then the squared deviations from
      // its mean, merged into the channel's statistics with Chan's formula: as accurate as Welford's
      // element-by-element update, without its division per element (which made this loop 12% of a
      // MobileNetV2 training step).
      const auto count = static_cast<double>(shape.spatial);
      Welford stats;
      for (std::int64_t n = 0; n < shape.batch; ++n) {
        double sum = 0.0;
        for (std::int64_t s = 0; s < shape.spatial; ++s) sum += convert<double>(in[shape.offset(n, c, s)]);
        const double mean = sum / count;
        double m2 = 0.0;
        for (std::int64_t s = 0; s < shape.spatial; ++s) {
          const double deviation = convert<double>(in[shape.offset(n, c, s)]) - mean;
          m2 += deviation * deviation;
        }
        stats.merge(Welford{count, mean, m2});
      }
      batch_norm::finish_statistics(stats, c, momentum, eps, static_cast<C*>(save_mean), static_cast<C*>(save_invstd),
                                    static_cast<C*>(running_mean), static_cast<C*>(running_var));
    });
  });
}

void batch_norm_normalize(DType dtype, const void* x, const BatchNormShape& shape, const void* mean, const void* invstd,
                          const void* weight, const void* bias, bool relu6, void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t n = plane / shape.channels, c = plane % shape.channels;
      const auto affine = batch_norm::channel_affine(static_cast<const C*>(mean), static_cast<const C*>(invstd),
                                                     static_cast<const C*>(weight), static_cast<const C*>(bias), c);
      for (std::int64_t s = 0; s < shape.spatial; ++s) {
        const std::int64_t i = shape.offset(n, c, s);
        out[i] = convert<T>(batch_norm::normalize(convert<C>(in[i]), affine, relu6));
      }
    });
  });
}

void batch_norm_backward_sums(DType dtype, const void* grad, const void* x, const void* fused_output,
                              const BatchNormShape& shape, const void* mean, const void* invstd, void* sum_dy,
                              void* sum_dy_xhat) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T *g = static_cast<const T*>(grad), *in = static_cast<const T*>(x), *fused = static_cast<const T*>(fused_output);
    const C *m = static_cast<const C*>(mean), *is = static_cast<const C*>(invstd);
    parallel_for(shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t c) {
      batch_norm::GradSums sums;
      for (std::int64_t n = 0; n < shape.batch; ++n)
        for (std::int64_t s = 0; s < shape.spatial; ++s) {
          const std::int64_t i = shape.offset(n, c, s);
          sums.add(batch_norm::incoming_grad<C>(g, fused, i), batch_norm::xhat(convert<C>(in[i]), m[c], is[c]));
        }
      static_cast<C*>(sum_dy)[c] = static_cast<C>(sums.dy);
      static_cast<C*>(sum_dy_xhat)[c] = static_cast<C>(sums.dy_xhat);
    });
  });
}

void batch_norm_backward_input(DType dtype, const void* grad, const void* x, const void* fused_output,
                               const BatchNormShape& shape, const void* mean, const void* invstd, const void* weight,
                               const void* sum_dy, const void* sum_dy_xhat, bool training, void* grad_input) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T *g = static_cast<const T*>(grad), *in = static_cast<const T*>(x), *fused = static_cast<const T*>(fused_output);
    T* out = static_cast<T*>(grad_input);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t n = plane / shape.channels, c = plane % shape.channels;
      const auto coefficients = batch_norm::channel_backward(
          static_cast<const C*>(mean), static_cast<const C*>(invstd), static_cast<const C*>(weight),
          static_cast<const C*>(sum_dy), static_cast<const C*>(sum_dy_xhat), training, shape.per_channel(), c);
      for (std::int64_t s = 0; s < shape.spatial; ++s) {
        const std::int64_t i = shape.offset(n, c, s);
        const C dy = batch_norm::incoming_grad<C>(g, fused, i);
        out[i] = convert<T>(batch_norm::grad_input(dy, convert<C>(in[i]), coefficients));
      }
    });
  });
}

void batch_norm_normalize_saving(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,
                                 const void* invstd, const void* weight, const void* bias, bool relu6, void* xhat,
                                 void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    T *saved = static_cast<T*>(xhat), *out = static_cast<T*>(y);
    const C *m = static_cast<const C*>(mean), *is = static_cast<const C*>(invstd);
    parallel_for(shape.batch * shape.channels, 2 * shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t n = plane / shape.channels, c = plane % shape.channels;
      const auto a = batch_norm::channel_scale_shift(static_cast<const C*>(weight), static_cast<const C*>(bias), c);
      for (std::int64_t s = 0; s < shape.spatial; ++s) {
        const std::int64_t i = shape.offset(n, c, s);
        saved[i] = convert<T>(batch_norm::xhat(convert<C>(in[i]), m[c], is[c]));
        // y from xhat as stored, not as computed: what batch_norm_affine will recompute.
        out[i] = convert<T>(batch_norm::output_from_xhat(convert<C>(saved[i]), a, relu6));
      }
    });
  });
}

void batch_norm_affine(DType dtype, const void* xhat, const BatchNormShape& shape, const void* weight, const void* bias,
                       bool relu6, void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(xhat);
    T* out = static_cast<T*>(y);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t n = plane / shape.channels, c = plane % shape.channels;
      const auto a = batch_norm::channel_scale_shift(static_cast<const C*>(weight), static_cast<const C*>(bias), c);
      for (std::int64_t s = 0; s < shape.spatial; ++s) {
        const std::int64_t i = shape.offset(n, c, s);
        out[i] = convert<T>(batch_norm::output_from_xhat(convert<C>(in[i]), a, relu6));
      }
    });
  });
}

void batch_norm_backward_sums_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                        const void* weight, const void* bias, bool relu6, void* sum_dy,
                                        void* sum_dy_xhat) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T *g = static_cast<const T*>(grad), *in = static_cast<const T*>(xhat);
    parallel_for(shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t c) {
      const auto a = batch_norm::channel_scale_shift(static_cast<const C*>(weight), static_cast<const C*>(bias), c);
      batch_norm::GradSums sums;
      for (std::int64_t n = 0; n < shape.batch; ++n)
        for (std::int64_t s = 0; s < shape.spatial; ++s) {
          const std::int64_t i = shape.offset(n, c, s);
          sums.add(batch_norm::incoming_grad_from_xhat<C>(g, in, a, relu6, i), convert<C>(in[i]));
        }
      static_cast<C*>(sum_dy)[c] = static_cast<C>(sums.dy);
      static_cast<C*>(sum_dy_xhat)[c] = static_cast<C>(sums.dy_xhat);
    });
  });
}

void batch_norm_backward_input_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                         const void* invstd, const void* weight, const void* bias, bool relu6,
                                         const void* sum_dy, const void* sum_dy_xhat, bool training, void* grad_input) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const T *g = static_cast<const T*>(grad), *in = static_cast<const T*>(xhat);
    const C *w = static_cast<const C*>(weight), *b = static_cast<const C*>(bias);
    T* out = static_cast<T*>(grad_input);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t n = plane / shape.channels, c = plane % shape.channels;
      const auto a = batch_norm::channel_scale_shift(w, b, c);
      const auto coefficients = batch_norm::channel_backward<C>(nullptr, static_cast<const C*>(invstd), w,
          static_cast<const C*>(sum_dy), static_cast<const C*>(sum_dy_xhat), training, shape.per_channel(), c);
      for (std::int64_t s = 0; s < shape.spatial; ++s) {
        const std::int64_t i = shape.offset(n, c, s);
        const C dy = batch_norm::incoming_grad_from_xhat<C>(g, in, a, relu6, i);
        out[i] = convert<T>(batch_norm::grad_input_from_xhat(dy, convert<C>(in[i]), coefficients));
      }
    });
  });
}

}  // namespace frugal::cpu
