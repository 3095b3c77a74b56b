// Batch norm (see batch_norm.h): checks, the operands every backend takes (contiguous data,
// per-channel tensors in the statistics dtype), and the one switch on the device, where CUDA picks
// between frugal's kernels and cuDNN.
#include "kernels/batch_norm.h"

#include "kernels/batch_norm_backends.h"
#include "core/dispatch.h"
#include "kernels/activation_codec.h"
#include "kernels/activation_codec_ops.h"  // packed_mask_bytes, kReLU6Top
#include "kernels/elementwise.h"

namespace frugal {

namespace {
BatchNormBackend g_backend;  // batch_norm_backend(): set by benchmarks and tests, passed by BatchNorm2d
}

std::string_view batch_norm_impl_name(BatchNormImpl impl) {
  switch (impl) {
    case BatchNormImpl::native: return "native";
    case BatchNormImpl::cudnn: return "cudnn";
  }
  return "?";
}

BatchNormBackend batch_norm_backend() { return g_backend; }

void set_batch_norm_impl(BatchNormImpl impl) { g_backend.cuda = impl; }

BatchNormImpl batch_norm_impl() { return g_backend.cuda; }

void set_batch_norm_cpu_reference(bool on) { g_backend.cpu_reference = on; }

bool batch_norm_cpu_reference() { return g_backend.cpu_reference; }

namespace {

DType statistics_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

BatchNormShape check_input(const Tensor& x, const char* op) {
  FRUGAL_CHECK_VALUE(x.defined(), op, ": the input is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(x.dtype()), op, ": needs a floating input, got ", x.dtype());
  FRUGAL_CHECK_SHAPE(x.dim() >= 2, op, ": expects an input of shape [N, C] or [N, C, *], got ", shape_str(x.shape()));
  BatchNormShape shape{x.size(0), x.size(1), 1};
  for (std::int64_t d = 2; d < x.dim(); ++d) shape.spatial *= x.size(d);
  return shape;
}

// A per-channel tensor (undefined is fine): [C], on x's device, in x's dtype or f32 for 16-bit x.
void check_per_channel(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  if (!t.defined()) return;
  FRUGAL_CHECK_SHAPE(t.dim() == 1 && t.size(0) == x.size(1), op, ": ", what, " of shape ", shape_str(t.shape()),
                     " does not match the ", x.size(1), " channels of an input of shape ", shape_str(x.shape()));
  check_same_device(t, x, op);
  const bool mixed = (x.dtype() == DType::f16 || x.dtype() == DType::bf16) && t.dtype() == DType::f32;
  FRUGAL_CHECK_DTYPE(t.dtype() == x.dtype() || mixed, op, ": ", what, " is ", t.dtype(), " but the input is ", x.dtype(),
                     " (per-channel tensors share the input's dtype, or are f32 for f16/bf16 input)");
}

void check_pair(const Tensor& a, const Tensor& b, const Tensor& x, const char* what_a, const char* what_b, const char* op) {
  FRUGAL_CHECK_VALUE(a.defined() == b.defined(), op, ": pass both ", what_a, " and ", what_b, " or neither");
  check_per_channel(a, x, what_a, op);
  check_per_channel(b, x, what_b, op);
}

// A per-channel tensor as the kernels read it: contiguous in the statistics dtype. No copy for the
// usual case (f32 parameters of an f32 or mixed-precision model); undefined stays undefined.
Tensor as_statistics(const Tensor& t, DType stats) { return t.defined() ? t.to(stats).contiguous() : t; }

// After a kernel updated `work` (from as_statistics(running)): the running statistic holds the
// new values and its version moved on, whether the kernel wrote it directly or through a copy.
void write_back(const Tensor& running, const Tensor& work) {
  if (!running.defined()) return;
  if (work.is_same(running))
    running.storage()->bump_version();
  else
    Tensor(running).copy_(work);  // copy_ bumps the version
}

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }  // null for an absent operand

// What both forwards start from.
struct Forward {
  BatchNormShape shape;
  DType stats;
  Tensor x;              // contiguous
  Tensor weight, bias;   // statistics dtype, or undefined
  Tensor output;         // contiguous, x's shape and dtype
};

Forward prepare_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const char* op) {
  Forward f;
  f.shape = check_input(x, op);
  check_pair(weight, bias, x, "weight", "bias", op);
  FRUGAL_CHECK_VALUE(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
  f.stats = statistics_dtype(x.dtype());
  f.x = x.contiguous();
  f.weight = as_statistics(weight, f.stats);
  f.bias = as_statistics(bias, f.stats);
  f.output = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  return f;
}

// The running statistics (optional) and the batch size a training forward needs.
void check_training(const Forward& f, const Tensor& running_mean, const Tensor& running_var, const char* op) {
  check_pair(running_mean, running_var, f.x, "running_mean", "running_var", op);
  FRUGAL_CHECK_VALUE(f.shape.per_channel() > 1, op,
                     ": expected more than 1 value per channel when training, got input of shape ", shape_str(f.x.shape()));
}

void check_eval(const Forward& f, const Tensor& running_mean, const Tensor& running_var, const char* op) {
  FRUGAL_CHECK_VALUE(running_mean.defined() && running_var.defined(), op,
                     ": eval mode normalises with the running statistics; both must be defined");
  check_pair(running_mean, running_var, f.x, "running_mean", "running_var", op);
}

// x's [N, C, S], after checking the backward's operands against it.
BatchNormShape check_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                              const Tensor& save_invstd, const Tensor& fused_output, const char* op) {
  const BatchNormShape shape = check_input(x, op);
  FRUGAL_CHECK_VALUE(grad_output.defined() && save_mean.defined() && save_invstd.defined(), op,
                     ": grad_output, save_mean and save_invstd must be defined");
  for (const Tensor& t : {grad_output, fused_output}) {
    if (!t.defined()) continue;  // fused_output is optional
    check_same_shape(t, x, op);
    check_same_dtype(t, x, op);
    check_same_device(t, x, op);
  }
  check_per_channel(weight, x, "weight", op);
  check_per_channel(save_mean, x, "save_mean", op);
  check_per_channel(save_invstd, x, "save_invstd", op);
  return shape;
}

#if FRUGAL_WITH_CUDA
// cuDNN always scales and shifts: ones and zeros stand in for an absent weight and bias, shaped and
// typed like the per-channel tensor `like`.
Tensor or_filled(const Tensor& t, double value, const Tensor& like) {
  return t.defined() ? t : full(like.shape(), value, {.dtype = like.dtype(), .device = like.device()});
}
#endif

}  // namespace

BatchNormOutput batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                 const Tensor& running_var, double momentum, double eps, bool fuse_relu6,
                                 const BatchNormBackend& backend) {
  const char* op = "batch_norm_train";
  const Forward f = prepare_forward(x, weight, bias, eps, op);
  check_training(f, running_mean, running_var, op);
  const TensorOptions per_channel{.dtype = f.stats, .device = x.device()};
  BatchNormOutput out{f.output, empty({f.shape.channels}, per_channel), empty({f.shape.channels}, per_channel)};
  if (f.shape.channels == 0) return out;  // no channel, nothing to compute: no kernel for an empty grid
  const Tensor mean_work = as_statistics(running_mean, f.stats), var_work = as_statistics(running_var, f.stats);
  const DType dtype = x.dtype();
  switch (x.device().type()) {
    case DeviceType::CPU:
      if (backend.cpu_reference) {
        cpu::batch_norm_statistics(dtype, f.x.data_ptr(), f.shape, momentum, eps, out.save_mean.data_ptr(),
                                   out.save_invstd.data_ptr(), ptr(mean_work), ptr(var_work));
        cpu::batch_norm_normalize(dtype, f.x.data_ptr(), f.shape, out.save_mean.data_ptr(), out.save_invstd.data_ptr(),
                                  ptr(f.weight), ptr(f.bias), fuse_relu6, out.output.data_ptr());
      } else {
        cpu::fast::batch_norm_train_forward(dtype, f.x.data_ptr(), f.shape, momentum, eps, ptr(f.weight), ptr(f.bias),
                                            fuse_relu6, out.save_mean.data_ptr(), out.save_invstd.data_ptr(),
                                            ptr(mean_work), ptr(var_work), out.output.data_ptr());
      }
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      if (backend.cuda == BatchNormImpl::cudnn) {
        cuda::cudnn_batch_norm_train(dtype, f.x.data_ptr(), f.shape, or_filled(f.weight, 1.0, out.save_mean).data_ptr(),
                                     or_filled(f.bias, 0.0, out.save_mean).data_ptr(), momentum, eps,
                                     ptr(mean_work), ptr(var_work), out.output.data_ptr(),
                                     out.save_mean.data_ptr(), out.save_invstd.data_ptr());
        if (fuse_relu6) relu6_(out.output);  // the legacy cuDNN API cannot fuse ReLU6: frugal's clamp, a second pass
      } else {
        cuda::batch_norm_statistics(dtype, f.x.data_ptr(), f.shape, momentum, eps, out.save_mean.data_ptr(),
                                    out.save_invstd.data_ptr(), ptr(mean_work), ptr(var_work));
        cuda::batch_norm_normalize(dtype, f.x.data_ptr(), f.shape, out.save_mean.data_ptr(), out.save_invstd.data_ptr(),
                                   ptr(f.weight), ptr(f.bias), fuse_relu6, out.output.data_ptr());
      }
      break;
#else
      throw_no_cuda(op);
#endif
  }
  write_back(running_mean, mean_work);
  write_back(running_var, var_work);
  return out;
}

Tensor batch_norm_invstd(const Tensor& running_var, double eps) {
  FRUGAL_CHECK_VALUE(running_var.defined(), "batch_norm_invstd: running_var is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(running_var.dtype()), "batch_norm_invstd: needs a floating running_var, got ",
                     running_var.dtype());
  return rsqrt(add(running_var.to(statistics_dtype(running_var.dtype())), eps));
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double eps, bool fuse_relu6,
                       const BatchNormBackend& backend) {
  const char* op = "batch_norm_eval";
  Forward f = prepare_forward(x, weight, bias, eps, op);
  check_eval(f, running_mean, running_var, op);
  if (x.numel() == 0) return f.output;
  const Tensor mean = as_statistics(running_mean, f.stats);
  const DType dtype = x.dtype();
  switch (x.device().type()) {
    case DeviceType::CPU:
      (backend.cpu_reference ? cpu::batch_norm_normalize : cpu::fast::batch_norm_normalize)(
          dtype, f.x.data_ptr(), f.shape, mean.data_ptr(), batch_norm_invstd(running_var, eps).data_ptr(),
          ptr(f.weight), ptr(f.bias), fuse_relu6, f.output.data_ptr());
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      if (backend.cuda == BatchNormImpl::cudnn) {
        cuda::cudnn_batch_norm_eval(dtype, f.x.data_ptr(), f.shape, or_filled(f.weight, 1.0, mean).data_ptr(),
                                    or_filled(f.bias, 0.0, mean).data_ptr(), mean.data_ptr(),
                                    as_statistics(running_var, f.stats).data_ptr(), eps, f.output.data_ptr());
        if (fuse_relu6) relu6_(f.output);  // as in training: cuDNN's legacy API has no ReLU6
      } else {
        cuda::batch_norm_normalize(dtype, f.x.data_ptr(), f.shape, mean.data_ptr(),
                                   batch_norm_invstd(running_var, eps).data_ptr(), ptr(f.weight), ptr(f.bias), fuse_relu6,
                                   f.output.data_ptr());
      }
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return f.output;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                   const Tensor& fused_output, const BatchNormBackend& backend, const Tensor& bias) {
  const char* op = "batch_norm_backward";
  const BatchNormShape shape = check_backward(grad_output, x, weight, save_mean, save_invstd, fused_output, op);
  check_per_channel(bias, x, "bias", op);
  const DType dtype = x.dtype(), stats = statistics_dtype(dtype);
  const Tensor xc = x.contiguous(), grad = grad_output.contiguous();
  const Tensor fused = fused_output.defined() ? fused_output.contiguous() : fused_output;
  const Tensor mean = as_statistics(save_mean, stats), invstd = as_statistics(save_invstd, stats);
  const Tensor w = as_statistics(weight, stats);
  const bool affine = weight.defined();
  // sum(dy) and sum(dy * xhat): the bias's and weight's gradients, and the training-mode terms.
  const bool sums = training || affine;
  const TensorOptions per_channel{.dtype = stats, .device = x.device()};
  const Tensor sum_dy = sums ? zeros({shape.channels}, per_channel) : Tensor();
  const Tensor sum_dy_xhat = sums ? zeros({shape.channels}, per_channel) : Tensor();
  BatchNormGrads grads{empty(x.shape(), {.dtype = dtype, .device = x.device()}), Tensor(), Tensor()};
  if (x.numel() > 0) {
    switch (x.device().type()) {
      case DeviceType::CPU:
        if (!backend.cpu_reference) {
          // The ReLU6 mask recomputed from x where y would come from memory (Note [The ReLU6 mask from the input]).
          const bool mask_from_input =
              fused.defined() && bias.defined() && cpu::fast::relu6_mask_from_input_pays(shape);
          const Tensor b = mask_from_input ? as_statistics(bias, stats) : Tensor();
          cpu::fast::batch_norm_backward(dtype, grad.data_ptr(), xc.data_ptr(), ptr(fused), shape, mean.data_ptr(),
                                         invstd.data_ptr(), ptr(w), ptr(b), mask_from_input, training, ptr(sum_dy),
                                         ptr(sum_dy_xhat), grads.input.data_ptr());
          break;
        }
        if (sums)
          cpu::batch_norm_backward_sums(dtype, grad.data_ptr(), xc.data_ptr(), ptr(fused), shape, mean.data_ptr(),
                                        invstd.data_ptr(), sum_dy.data_ptr(), sum_dy_xhat.data_ptr());
        cpu::batch_norm_backward_input(dtype, grad.data_ptr(), xc.data_ptr(), ptr(fused), shape, mean.data_ptr(),
                                       invstd.data_ptr(), ptr(w), ptr(sum_dy), ptr(sum_dy_xhat), training,
                                       grads.input.data_ptr());
        break;
      case DeviceType::Meta: break;
      case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
        if (backend.cuda == BatchNormImpl::cudnn && training) {
          // The legacy cuDNN API has no ReLU6: the gradient goes back through it first, as its own op.
          const Tensor gated = fused.defined() ? relu6_backward(grad, fused) : grad;
          cuda::cudnn_batch_norm_backward(dtype, gated.data_ptr(), xc.data_ptr(), shape,
                                          or_filled(w, 1.0, mean).data_ptr(), mean.data_ptr(),
                                          invstd.data_ptr(), grads.input.data_ptr(), sum_dy_xhat.data_ptr(),
                                          sum_dy.data_ptr());
        } else {  // frugal's kernels, and for either impl in eval mode, which cuDNN's legacy API does not cover
          if (sums)
            cuda::batch_norm_backward_sums(dtype, grad.data_ptr(), xc.data_ptr(), ptr(fused), shape, mean.data_ptr(),
                                           invstd.data_ptr(), sum_dy.data_ptr(), sum_dy_xhat.data_ptr());
          cuda::batch_norm_backward_input(dtype, grad.data_ptr(), xc.data_ptr(), ptr(fused), shape, mean.data_ptr(),
                                          invstd.data_ptr(), ptr(w), ptr(sum_dy), ptr(sum_dy_xhat), training,
                                          grads.input.data_ptr());
        }
        break;
#else
        throw_no_cuda(op);
#endif
    }
  }
  if (affine) {
    grads.weight = sum_dy_xhat.to(weight.dtype());
    grads.bias = sum_dy.to(weight.dtype());
  }
  return grads;
}

// ---- From a saved xhat (Note [One saved tensor per BN-ReLU6], kernels/batch_norm_ops.h)

namespace {

// xhat and y from x with the given statistics, into `out`, on x's device.
void normalize_saving(const Forward& f, const Tensor& mean, const Tensor& invstd, bool relu6,
                      const BatchNormNormalizedOutput& out, bool cpu_reference, [[maybe_unused]] const char* op) {
  const DType dtype = f.x.dtype();
  switch (f.x.device().type()) {
    case DeviceType::CPU:
      (cpu_reference ? cpu::batch_norm_normalize_saving : cpu::fast::batch_norm_normalize_saving)(
          dtype, f.x.data_ptr(), f.shape, mean.data_ptr(), invstd.data_ptr(), ptr(f.weight), ptr(f.bias), relu6,
          out.normalized.data_ptr(), out.output.data_ptr());
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::batch_norm_normalize_saving(dtype, f.x.data_ptr(), f.shape, mean.data_ptr(), invstd.data_ptr(),
                                        ptr(f.weight), ptr(f.bias), relu6, out.normalized.data_ptr(), out.output.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
}

const float* f32_ptr(const Tensor& t) { return static_cast<const float*>(ptr(t)); }
float* f32_out(const Tensor& t) { return static_cast<float*>(ptr(t)); }

// Whether xhat (in bf16, with the mask as bits when `mask`) is kept compact by the forward's own pass
// and read so by the backward's: the CPU's fast loops for these shapes (Note [Compact xhat in the same
// pass]), and on the meta device whatever the CPU would do, so that the planner sees its bytes.
bool compact_in_one_pass(const Tensor& t, const BatchNormShape& shape, bool mask, bool cpu_reference) {
  const DeviceType device = t.device().type();
  return (device == DeviceType::CPU || device == DeviceType::Meta) && !cpu_reference &&
         cpu::fast::keeps_compact_xhat(DType::f32, shape, mask);
}

void check_form(const Tensor& x, NormalizedForm form, const char* op) {
  FRUGAL_CHECK_DTYPE(!form.bf16 || x.dtype() == DType::f32, op, ": keeps xhat in bf16 for f32 input only, got ",
                     x.dtype());
}

// The outputs; normalized and mask allocated as the form asks when `compact`, else normalized in x's
// dtype and no mask (make_compact's separate passes follow).
BatchNormNormalizedOutput normalized_output(const Forward& f, Tensor save_mean, Tensor save_invstd,
                                            NormalizedForm form = {}, bool relu6 = false, bool compact = false) {
  const Device device = f.x.device();
  const DType xhat_dtype = compact ? DType::bf16 : f.x.dtype();
  BatchNormNormalizedOutput out{f.output, empty(f.x.shape(), {.dtype = xhat_dtype, .device = device}),
                                std::move(save_mean), std::move(save_invstd), Tensor()};
  if (compact && form.relu6_mask && relu6)
    out.mask = empty({packed_mask_bytes(f.x.numel())}, {.dtype = DType::u8, .device = device});
  return out;
}

// The separate passes that keep xhat as `form` asks, after a forward that wrote it in x's dtype.
void make_compact(BatchNormNormalizedOutput& out, NormalizedForm form, bool relu6) {
  if (form.bf16) out.normalized = out.normalized.to(DType::bf16);
  if (form.relu6_mask && relu6) out.mask = pack_mask_between(out.output, 0.0, kReLU6Top);
}

}  // namespace

BatchNormNormalizedOutput batch_norm_train_normalized(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                      const Tensor& running_mean, const Tensor& running_var,
                                                      double momentum, double eps, bool fuse_relu6,
                                                      NormalizedForm form, const BatchNormBackend& backend) {
  const char* op = "batch_norm_train_normalized";
  const Forward f = prepare_forward(x, weight, bias, eps, op);
  check_training(f, running_mean, running_var, op);
  check_form(x, form, op);
  const bool compact = form.bf16 && f.shape.channels > 0 && compact_in_one_pass(x, f.shape, form.relu6_mask && fuse_relu6, backend.cpu_reference);
  const TensorOptions per_channel{.dtype = f.stats, .device = x.device()};
  BatchNormNormalizedOutput out = normalized_output(f, empty({f.shape.channels}, per_channel),
                                                    empty({f.shape.channels}, per_channel), form, fuse_relu6, compact);
  if (f.shape.channels == 0) {  // as batch_norm_train: no kernel for an empty grid
    make_compact(out, form, fuse_relu6);
    return out;
  }
  const Tensor mean_work = as_statistics(running_mean, f.stats), var_work = as_statistics(running_var, f.stats);
  // The batch statistics as batch_norm_train computes them (on the CPU the fast loops' sums for f32
  // unless the reference is asked for), so that both leave the same bits in the running statistics.
  switch (x.device().type()) {
    case DeviceType::CPU:
      if (compact) {
        cpu::fast::batch_norm_train_forward_compact(f32_ptr(f.x), f.shape, momentum, eps, f32_ptr(f.weight),
                                                    f32_ptr(f.bias), fuse_relu6, f32_out(out.save_mean),
                                                    f32_out(out.save_invstd), f32_out(mean_work), f32_out(var_work),
                                                    static_cast<BFloat16*>(out.normalized.data_ptr()),
                                                    static_cast<std::uint8_t*>(ptr(out.mask)), f32_out(out.output));
      } else if (backend.cpu_reference) {
        cpu::batch_norm_statistics(x.dtype(), f.x.data_ptr(), f.shape, momentum, eps, out.save_mean.data_ptr(),
                                   out.save_invstd.data_ptr(), ptr(mean_work), ptr(var_work));
        normalize_saving(f, out.save_mean, out.save_invstd, fuse_relu6, out, backend.cpu_reference, op);
      } else {
        cpu::fast::batch_norm_train_forward_saving(x.dtype(), f.x.data_ptr(), f.shape, momentum, eps, ptr(f.weight),
                                                   ptr(f.bias), fuse_relu6, out.save_mean.data_ptr(),
                                                   out.save_invstd.data_ptr(), ptr(mean_work), ptr(var_work),
                                                   out.normalized.data_ptr(), out.output.data_ptr());
      }
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::batch_norm_statistics(x.dtype(), f.x.data_ptr(), f.shape, momentum, eps, out.save_mean.data_ptr(),
                                  out.save_invstd.data_ptr(), ptr(mean_work), ptr(var_work));
      normalize_saving(f, out.save_mean, out.save_invstd, fuse_relu6, out, backend.cpu_reference, op);
      break;
#else
      throw_no_cuda(op);
#endif
  }
  write_back(running_mean, mean_work);
  write_back(running_var, var_work);
  if (!compact) make_compact(out, form, fuse_relu6);
  return out;
}

BatchNormNormalizedOutput batch_norm_eval_normalized(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                     const Tensor& running_mean, const Tensor& running_var, double eps,
                                                     bool fuse_relu6, NormalizedForm form, const BatchNormBackend& backend) {
  const char* op = "batch_norm_eval_normalized";
  const Forward f = prepare_forward(x, weight, bias, eps, op);
  check_eval(f, running_mean, running_var, op);
  check_form(x, form, op);
  const bool compact = form.bf16 && x.numel() > 0 && compact_in_one_pass(x, f.shape, form.relu6_mask && fuse_relu6, backend.cpu_reference);
  // A copy of running_mean, not an alias: a later training step must not change what was returned.
  BatchNormNormalizedOutput out = normalized_output(f, running_mean.to(f.stats).clone(),
                                                    batch_norm_invstd(running_var, eps), form, fuse_relu6, compact);
  if (compact && x.device().is_cpu())
    cpu::fast::batch_norm_normalize_compact(f32_ptr(f.x), f.shape, f32_ptr(out.save_mean), f32_ptr(out.save_invstd),
                                            f32_ptr(f.weight), f32_ptr(f.bias), fuse_relu6,
                                            static_cast<BFloat16*>(out.normalized.data_ptr()),
                                            static_cast<std::uint8_t*>(ptr(out.mask)), f32_out(out.output));
  else if (!compact && x.numel() > 0)
    normalize_saving(f, out.save_mean, out.save_invstd, fuse_relu6, out, backend.cpu_reference, op);
  if (!compact) make_compact(out, form, fuse_relu6);
  return out;
}

Tensor batch_norm_affine(const Tensor& normalized, const Tensor& weight, const Tensor& bias, bool fuse_relu6,
                         std::optional<DType> output_dtype, const BatchNormBackend& backend) {
  const char* op = "batch_norm_affine";
  const BatchNormShape shape = check_input(normalized, op);
  check_pair(weight, bias, normalized, "weight", "bias", op);
  const DType dtype = normalized.dtype(), stats = statistics_dtype(dtype);
  if (output_dtype && *output_dtype != dtype) {  // a compact xhat: widened a piece at a time, or all at once
    FRUGAL_CHECK_DTYPE(dtype == DType::bf16 && *output_dtype == DType::f32, op, ": gives an f32 output from a bf16 "
                       "xhat only, not ", *output_dtype, " from ", dtype);
    if (normalized.numel() == 0 || !compact_in_one_pass(normalized, shape, false, backend.cpu_reference))
      return batch_norm_affine(normalized.to(DType::f32), weight, bias, fuse_relu6, std::nullopt, backend);
  }
  const Tensor xhat = normalized.contiguous(), w = as_statistics(weight, stats), b = as_statistics(bias, stats);
  Tensor y = empty(normalized.shape(), {.dtype = output_dtype.value_or(dtype), .device = normalized.device()});
  if (normalized.numel() == 0) return y;
  switch (normalized.device().type()) {
    case DeviceType::CPU:
      if (y.dtype() != dtype) {
        cpu::fast::batch_norm_affine_compact(static_cast<const BFloat16*>(xhat.data_ptr()), shape, f32_ptr(w),
                                             f32_ptr(b), fuse_relu6, f32_out(y));
        break;
      }
      (backend.cpu_reference ? cpu::batch_norm_affine : cpu::fast::batch_norm_affine)(dtype, xhat.data_ptr(), shape, ptr(w),
                                                                                ptr(b), fuse_relu6, y.data_ptr());
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::batch_norm_affine(dtype, xhat.data_ptr(), shape, ptr(w), ptr(b), fuse_relu6, y.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return y;
}

namespace {

// The backward-from-xhat operands, checked against normalized; its [N, C, S].
BatchNormShape check_backward_normalized(const Tensor& grad_output, const Tensor& normalized, const Tensor& weight,
                                         const Tensor& bias, const Tensor& save_invstd, bool fuse_relu6,
                                         const Tensor& relu6_mask, const char* op) {
  const BatchNormShape shape = check_input(normalized, op);
  FRUGAL_CHECK_VALUE(grad_output.defined() && save_invstd.defined(), op,
                     ": grad_output and save_invstd must be defined");
  check_same_shape(grad_output, normalized, op);
  if (normalized.dtype() != grad_output.dtype())
    FRUGAL_CHECK_DTYPE(normalized.dtype() == DType::bf16 && grad_output.dtype() == DType::f32, op, ": xhat is ",
                       normalized.dtype(), " but grad_output is ", grad_output.dtype(),
                       " (the same dtype, or a bf16 xhat for an f32 gradient)");
  check_same_device(grad_output, normalized, op);
  check_pair(weight, bias, normalized, "weight", "bias", op);
  check_per_channel(save_invstd, normalized, "save_invstd", op);
  if (relu6_mask.defined()) {
    FRUGAL_CHECK_VALUE(fuse_relu6, op, ": a ReLU6 mask was given but no ReLU6 was fused");
    FRUGAL_CHECK_VALUE(relu6_mask.dtype() == DType::u8 && relu6_mask.dim() == 1 &&
                           relu6_mask.size(0) == packed_mask_bytes(normalized.numel()),
                       op, ": the ReLU6 mask must be u8 [", packed_mask_bytes(normalized.numel()),
                       "] (a bit per element), got ", relu6_mask.dtype(), " ", shape_str(relu6_mask.shape()));
    check_same_device(relu6_mask, normalized, op);
  }
  return shape;
}

}  // namespace

BatchNormGrads batch_norm_backward_normalized(const Tensor& grad_output, const Tensor& normalized, const Tensor& weight,
                                              const Tensor& bias, const Tensor& save_invstd, bool training,
                                              bool fuse_relu6, const Tensor& relu6_mask,
                                              const BatchNormBackend& backend) {
  const char* op = "batch_norm_backward_normalized";
  const BatchNormShape shape =
      check_backward_normalized(grad_output, normalized, weight, bias, save_invstd, fuse_relu6, relu6_mask, op);
  const bool widen = normalized.dtype() != grad_output.dtype(), masked = relu6_mask.defined();
  // A bf16 xhat, or an f32 one with bits: widened and gated in the backward's own loops where the
  // shapes allow, else by the separate passes (xhat widened, the gradient gated, then from xhat).
  const bool in_lanes = (widen || (masked && normalized.dtype() == DType::f32)) && normalized.numel() > 0 &&
                        compact_in_one_pass(normalized, shape, masked, backend.cpu_reference);
  if ((widen || masked) && !in_lanes)
    return batch_norm_backward_normalized(masked ? apply_packed_mask(grad_output, relu6_mask) : grad_output,
                                          normalized.to(grad_output.dtype()), weight, bias, save_invstd, training,
                                          fuse_relu6 && !masked);
  const DType dtype = grad_output.dtype(), stats = statistics_dtype(dtype);
  const Tensor xhat = normalized.contiguous(), grad = grad_output.contiguous();
  const Tensor bits = masked ? relu6_mask.contiguous() : Tensor();  // a strided view read as apply_packed_mask reads it
  const Tensor invstd = as_statistics(save_invstd, stats), w = as_statistics(weight, stats), b = as_statistics(bias, stats);
  const bool affine = weight.defined(), sums = training || affine;  // as batch_norm_backward
  const TensorOptions per_channel{.dtype = stats, .device = normalized.device()};
  const Tensor sum_dy = sums ? zeros({shape.channels}, per_channel) : Tensor();
  const Tensor sum_dy_xhat = sums ? zeros({shape.channels}, per_channel) : Tensor();
  BatchNormGrads grads{empty(normalized.shape(), {.dtype = dtype, .device = normalized.device()}), Tensor(), Tensor()};
  if (normalized.numel() > 0) {
    switch (normalized.device().type()) {
      case DeviceType::CPU:
        if (in_lanes && widen) {
          cpu::fast::batch_norm_backward_from_compact_xhat(
              f32_ptr(grad), static_cast<const BFloat16*>(xhat.data_ptr()),
              static_cast<const std::uint8_t*>(ptr(bits)), shape, f32_ptr(invstd), f32_ptr(w), f32_ptr(b),
              fuse_relu6, training, f32_out(sum_dy), f32_out(sum_dy_xhat), f32_out(grads.input));
          break;
        }
        if (in_lanes && masked) {
          cpu::fast::batch_norm_backward_from_xhat_bits(f32_ptr(grad), f32_ptr(xhat),
                                                        static_cast<const std::uint8_t*>(ptr(bits)), shape,
                                                        f32_ptr(invstd), f32_ptr(w), training, f32_out(sum_dy),
                                                        f32_out(sum_dy_xhat), f32_out(grads.input));
          break;
        }
        if (!backend.cpu_reference) {
          cpu::fast::batch_norm_backward_from_xhat(dtype, grad.data_ptr(), xhat.data_ptr(), shape, invstd.data_ptr(),
                                                   ptr(w), ptr(b), fuse_relu6, training, ptr(sum_dy), ptr(sum_dy_xhat),
                                                   grads.input.data_ptr());
          break;
        }
        if (sums)
          cpu::batch_norm_backward_sums_from_xhat(dtype, grad.data_ptr(), xhat.data_ptr(), shape, ptr(w), ptr(b),
                                                  fuse_relu6, sum_dy.data_ptr(), sum_dy_xhat.data_ptr());
        cpu::batch_norm_backward_input_from_xhat(dtype, grad.data_ptr(), xhat.data_ptr(), shape, invstd.data_ptr(),
                                                 ptr(w), ptr(b), fuse_relu6, ptr(sum_dy), ptr(sum_dy_xhat), training,
                                                 grads.input.data_ptr());
        break;
      case DeviceType::Meta: break;
      case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
        if (sums)
          cuda::batch_norm_backward_sums_from_xhat(dtype, grad.data_ptr(), xhat.data_ptr(), shape, ptr(w), ptr(b),
                                                   fuse_relu6, sum_dy.data_ptr(), sum_dy_xhat.data_ptr());
        cuda::batch_norm_backward_input_from_xhat(dtype, grad.data_ptr(), xhat.data_ptr(), shape, invstd.data_ptr(),
                                                  ptr(w), ptr(b), fuse_relu6, ptr(sum_dy), ptr(sum_dy_xhat), training,
                                                  grads.input.data_ptr());
        break;
#else
        throw_no_cuda(op);
#endif
    }
  }
  if (affine) {
    grads.weight = sum_dy_xhat.to(weight.dtype());
    grads.bias = sum_dy.to(bias.dtype());
  }
  return grads;
}

}  // namespace frugal
