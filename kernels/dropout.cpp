// Dropout (see dropout.h): the checks, and the one switch that picks the device's kernel
// (kernels/dropout_backends.h). Forward and backward both run dropout_apply with the same draw.
#include "kernels/dropout.h"

#include "core/dispatch.h"
#include "kernels/dropout_backends.h"

namespace frugal {

namespace {
void check_p(double p) { FRUGAL_CHECK_VALUE(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p); }

// in * mask / (1 - p) into a fresh contiguous tensor: the forward's output or the backward's gradient.
Tensor apply(const Tensor& input, GeneratorState draw, double p, const char* op) {
  FRUGAL_CHECK_DTYPE(is_floating(input.dtype()), op, ": needs a floating dtype, got ", input.dtype());
  const Tensor in = input.contiguous();  // itself when already contiguous
  const Tensor out = empty(in.shape(), {.dtype = in.dtype(), .device = in.device()});
  const DropoutSpec spec{
      .keep = {.distribution = Distribution::bernoulli, .a = 1.0 - p, .seed = draw.seed, .offset = draw.offset},
      .scale = 1.0 / (1.0 - p)};
  if (in.numel() == 0) return out;
  switch (in.device().type()) {
    case DeviceType::CPU: cpu::dropout_apply(in.dtype(), in.data_ptr(), out.data_ptr(), in.numel(), spec); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::dropout_apply(in.dtype(), in.data_ptr(), out.data_ptr(), in.numel(), spec);
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return out;
}
}  // namespace

DropoutResult dropout(const Tensor& x, double p, bool training, Generator* generator) {
  check_p(p);
  FRUGAL_CHECK_VALUE(x.defined(), "dropout: the input is undefined");
  if (!training || p == 0.0) return {x, std::nullopt};
  const GeneratorState draw = (generator ? *generator : default_generator()).next_draw();
  return {apply(x, draw, p, "dropout"), draw};
}

Tensor dropout_backward(const Tensor& grad, const std::optional<GeneratorState>& draw, double p) {
  check_p(p);
  FRUGAL_CHECK_VALUE(grad.defined(), "dropout_backward: the gradient is undefined");
  if (!draw) return grad;  // evaluation, or p == 0: the identity
  return apply(grad, *draw, p, "dropout_backward");
}

}  // namespace frugal
