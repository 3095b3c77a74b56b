// Activation codecs (see activation_codec.h): the checks, the outputs each op allocates (the same on
// every device, meta included, so the memory planner predicts them), and one switch per kernel that
// picks the device's backend (kernels/activation_codec_backends.h).
#include "kernels/activation_codec.h"

#include <cmath>

#include "core/dispatch.h"
#include "kernels/activation_codec_backends.h"

namespace frugal {

namespace {

void check_floating(const Tensor& t, const char* what, const char* op) {
  FRUGAL_CHECK_VALUE(t.defined(), op, ": ", what, " is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(t.dtype()), op, ": needs a floating ", what, ", got ", t.dtype());
}

// x as the codes see it, [N, C, S]; ShapeError for fewer than 2 dims.
BatchNormShape channel_shape(const Tensor& x, const char* op) {
  FRUGAL_CHECK_SHAPE(x.dim() >= 2, op, ": expects a tensor of shape [N, C] or [N, C, *], got ", shape_str(x.shape()));
  BatchNormShape shape{x.size(0), x.size(1), 1};
  for (std::int64_t d = 2; d < x.dim(); ++d) shape.spatial *= x.size(d);
  return shape;
}

// After channel_ranges: ValueError for the first channel finish_channel marked (ops.h) as uncodable.
// The steps are [C] floats; on CUDA reading them waits for the range kernel.
void check_codable(const Tensor& step, const char* op) {
  if (step.device().is_meta()) return;  // no values: a shape-only run codes anything
  const std::vector<float> steps = step.to_vector<float>();
  for (std::size_t c = 0; c < steps.size(); ++c) {
    FRUGAL_CHECK_VALUE(!std::isnan(steps[c]), op, ": channel ", c,
                       " holds a non-finite value (NaN or infinity); 8-bit codes need a finite range");
    FRUGAL_CHECK_VALUE(!std::isinf(steps[c]), op, ": channel ", c,
                       " holds values beyond f32's range; the codes' low and step are f32");
  }
}

}  // namespace

Tensor pack_mask_between(const Tensor& x, double low, double high) {
  const char* op = "pack_mask_between";
  check_floating(x, "input", op);
  FRUGAL_CHECK_VALUE(!std::isnan(low) && !std::isnan(high), op, ": the bounds must not be NaN, got (", low, ", ",
                     high, ")");
  const Tensor in = x.contiguous();  // itself when already contiguous
  const Tensor mask = empty({packed_mask_bytes(in.numel())}, {.dtype = DType::u8, .device = in.device()});
  if (in.numel() == 0) return mask;
  switch (in.device().type()) {
    case DeviceType::CPU: cpu::pack_mask(in.dtype(), in.data_ptr(), in.numel(), low, high, mask.data<std::uint8_t>()); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::pack_mask(in.dtype(), in.data_ptr(), in.numel(), low, high, mask.data<std::uint8_t>());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return mask;
}

Tensor apply_packed_mask(const Tensor& grad, const Tensor& mask) {
  const char* op = "apply_packed_mask";
  check_floating(grad, "gradient", op);
  FRUGAL_CHECK_VALUE(mask.defined(), op, ": the mask is undefined");
  FRUGAL_CHECK_VALUE(mask.dtype() == DType::u8, op, ": the mask must be u8 (8 bits per byte), got ", mask.dtype());
  FRUGAL_CHECK_VALUE(mask.numel() == packed_mask_bytes(grad.numel()), op, ": a mask of ", mask.numel(),
                     " bytes does not fit a gradient of shape ", shape_str(grad.shape()), " (needs ",
                     packed_mask_bytes(grad.numel()), ")");
  check_same_device(grad, mask, op);
  const Tensor g = grad.contiguous(), bits = mask.contiguous();
  const Tensor out = empty(g.shape(), {.dtype = g.dtype(), .device = g.device()});
  if (g.numel() == 0) return out;
  switch (g.device().type()) {
    case DeviceType::CPU: cpu::apply_mask(g.dtype(), g.data_ptr(), bits.data<std::uint8_t>(), g.numel(), out.data_ptr()); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::apply_mask(g.dtype(), g.data_ptr(), bits.data<std::uint8_t>(), g.numel(), out.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return out;
}

ChannelCodes encode_per_channel_u8(const Tensor& x) {
  const char* op = "encode_per_channel_u8";
  check_floating(x, "input", op);
  const BatchNormShape shape = channel_shape(x, op);
  const Tensor in = x.contiguous();
  const TensorOptions per_channel{.dtype = DType::f32, .device = in.device()};
  ChannelCodes out{empty(in.shape(), {.dtype = DType::u8, .device = in.device()}), empty({shape.channels}, per_channel),
                   empty({shape.channels}, per_channel), in.dtype()};
  if (shape.channels == 0) return out;  // no channel: nothing to launch over
  float *low = out.low.data<float>(), *step = out.step.data<float>();
  switch (in.device().type()) {
    case DeviceType::CPU: cpu::channel_ranges(in.dtype(), in.data_ptr(), shape, low, step); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::channel_ranges(in.dtype(), in.data_ptr(), shape, low, step);
      break;
#else
      throw_no_cuda(op);
#endif
  }
  check_codable(out.step, op);
  if (in.numel() == 0) return out;
  std::uint8_t* codes = out.codes.data<std::uint8_t>();
  switch (in.device().type()) {
    case DeviceType::CPU: cpu::encode_channels(in.dtype(), in.data_ptr(), shape, low, step, codes); break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::encode_channels(in.dtype(), in.data_ptr(), shape, low, step, codes);
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return out;
}

Tensor decode_per_channel_u8(const ChannelCodes& codes) {
  const char* op = "decode_per_channel_u8";
  FRUGAL_CHECK_VALUE(codes.codes.defined() && codes.low.defined() && codes.step.defined(), op,
                     ": codes, low and step must be defined");
  FRUGAL_CHECK_DTYPE(codes.codes.dtype() == DType::u8, op, ": codes must be u8, got ", codes.codes.dtype());
  FRUGAL_CHECK_DTYPE(is_floating(codes.dtype), op, ": decodes to a floating dtype, got ", codes.dtype);
  const BatchNormShape shape = channel_shape(codes.codes, op);
  for (const Tensor* t : {&codes.low, &codes.step}) {
    FRUGAL_CHECK_DTYPE(t->dtype() == DType::f32, op, ": low and step must be f32, got ", t->dtype());
    FRUGAL_CHECK_SHAPE(t->dim() == 1 && t->size(0) == shape.channels, op, ": low and step must be [",
                       shape.channels, "] for codes of shape ", shape_str(codes.codes.shape()), ", got ",
                       shape_str(t->shape()));
    check_same_device(*t, codes.codes, op);
  }
  const Tensor in = codes.codes.contiguous(), low = codes.low.contiguous(), step = codes.step.contiguous();
  const Tensor out = empty(in.shape(), {.dtype = codes.dtype, .device = in.device()});
  if (in.numel() == 0) return out;
  switch (in.device().type()) {
    case DeviceType::CPU:
      cpu::decode_channels(codes.dtype, in.data<std::uint8_t>(), shape, low.data<float>(), step.data<float>(),
                           out.data_ptr());
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::decode_channels(codes.dtype, in.data<std::uint8_t>(), shape, low.data<float>(), step.data<float>(),
                            out.data_ptr());
      break;
#else
      throw_no_cuda(op);
#endif
  }
  return out;
}

}  // namespace frugal
