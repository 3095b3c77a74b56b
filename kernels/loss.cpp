// Cross-entropy (see loss.h): the checks, the scratch memory, the one switch that picks the device's
// fused kernel (kernels/loss_backends.h), and the IndexError for a bad target every backend reports.
#include "kernels/loss.h"

#include "core/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/loss_backends.h"
#include "kernels/reduce.h"
#include "kernels/workspace.h"

namespace frugal {

namespace {

void check_inputs(const Tensor& logits, const Tensor& targets, const char* op) {
  FRUGAL_CHECK_VALUE(logits.defined() && targets.defined(), op, ": logits or targets are undefined");
  FRUGAL_CHECK_DTYPE(is_floating(logits.dtype()), op, ": logits need a floating dtype, got ", logits.dtype(), " (shape ",
                     shape_str(logits.shape()), ")");
  FRUGAL_CHECK_DTYPE(targets.dtype() == DType::i64, op, ": targets must be i64 class indices, got ", targets.dtype(),
                     " (shape ", shape_str(targets.shape()), ")");
  FRUGAL_CHECK_SHAPE(logits.dim() == 2, op, ": logits must be [N, C], got ", shape_str(logits.shape()));
  FRUGAL_CHECK_SHAPE(logits.size(1) > 0, op, ": logits ", shape_str(logits.shape()), " have no classes");
  FRUGAL_CHECK_SHAPE(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets must be [N] = [",
                     logits.size(0), "] for logits ", shape_str(logits.shape()), ", got ", shape_str(targets.shape()));
  check_same_device(logits, targets, op);
}

void check_options(const CrossEntropyOptions& options, const char* op) {
  FRUGAL_CHECK_VALUE(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, op,
                     ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
}

// `logits` must be row-major already; the workspace must outlive the kernels, which it does, since
// every backend has finished when it returns (the CUDA one reads its error flag back).
CrossEntropyArgs args_for(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options,
                          const DataPtr& workspace) {
  return {.logits = logits.data_ptr(),
          .targets = targets.data<std::int64_t>(),
          .target_stride = targets.stride(0),
          .rows = logits.size(0),
          .cols = logits.size(1),
          .options = options,
          .workspace = carve_cross_entropy_workspace(workspace.get())};
}

void check_targets(std::int64_t bad_row, const Tensor& targets, const CrossEntropyArgs& args, const char* op) {
  FRUGAL_CHECK_INDEX(bad_row < 0, op, ": target ", targets.select(0, bad_row).item<std::int64_t>(), " of row ", bad_row,
                     " is neither a class in [0, ", args.cols, ") nor ignore_index ", args.options.ignore_index);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  check_inputs(logits, targets, op);
  check_options(options, op);
  const Tensor x = logits.contiguous();
  const DataPtr workspace = allocate_workspace(x.device(), cross_entropy_workspace_bytes(x.size(0)));
  const CrossEntropyArgs args = args_for(x, targets, options, workspace);
  const Shape out_shape = options.reduction == LossReduction::none ? Shape{x.size(0)} : Shape{};
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  std::int64_t bad_row = -1;
  switch (x.device().type()) {
    case DeviceType::CPU: bad_row = cpu::cross_entropy_rows(x.dtype(), args, out.data_ptr()); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      bad_row = cuda::cross_entropy_rows(x.dtype(), args, out.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  check_targets(bad_row, targets, args, op);
  return out;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                              const CrossEntropyOptions& options) {
  const char* op = "cross_entropy_backward";
  check_inputs(logits, targets, op);
  check_options(options, op);
  FRUGAL_CHECK_VALUE(grad_loss.defined(), op, ": grad_loss is undefined");
  const bool per_row = options.reduction == LossReduction::none;
  FRUGAL_CHECK_SHAPE(per_row ? grad_loss.shape() == Shape{logits.size(0)} : grad_loss.dim() == 0, op, ": grad_loss must be ",
                     per_row ? shape_str(Shape{logits.size(0)}) : std::string("0-dim"), " like the loss, got ",
                     shape_str(grad_loss.shape()));
  check_same_dtype(grad_loss, logits, op);
  check_same_device(grad_loss, logits, op);
  const Tensor x = logits.contiguous();
  const DataPtr workspace = allocate_workspace(x.device(), cross_entropy_workspace_bytes(x.size(0)));
  const CrossEntropyArgs args = args_for(x, targets, options, workspace);
  const std::int64_t grad_stride = per_row ? grad_loss.stride(0) : 0;
  Tensor grad_logits = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  std::int64_t bad_row = -1;
  switch (x.device().type()) {
    case DeviceType::CPU:
      bad_row = cpu::cross_entropy_backward_rows(x.dtype(), args, grad_loss.data_ptr(), grad_stride, grad_logits.data_ptr());
      break;
    case DeviceType::Meta:
      break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      bad_row = cuda::cross_entropy_backward_rows(x.dtype(), args, grad_loss.data_ptr(), grad_stride, grad_logits.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  check_targets(bad_row, targets, args, op);
  return grad_logits;
}

Tensor count_correct(const Tensor& logits, const Tensor& targets) {
  check_inputs(logits, targets, "count_correct");
  const Tensor predicted = argmax(logits, 1).to(DType::f64), wanted = targets.to(DType::f64);  // exact below 2^53
  // Two integers' difference is 0 or at least 1 in size, so 1 - |difference| is 1 or at most 0.
  const Tensor agree = relu(add(neg(abs(sub(predicted, wanted))), 1.0));
  return sum(agree).to(DType::i64);
}

}  // namespace frugal
