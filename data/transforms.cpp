// Per-sample transforms (see transforms.h).
#include "data/transforms.h"

#include <cstddef>
#include <cstring>

namespace frugal::data {

namespace {

void check_cpu(const Tensor& input, const char* op) {
  FRUGAL_CHECK_DEVICE(input.device().is_cpu(), op, ": transforms run on CPU samples, got one on ", input.device());
}

void check_image(const Tensor& input, const char* op) {
  check_cpu(input, op);
  FRUGAL_CHECK_SHAPE(input.dim() == 3, op, ": expects a [C, H, W] image, got shape ", shape_str(input.shape()));
}

}  // namespace

// ---- Compose

Tensor Compose::apply(const Tensor& input, RandomStream& random) const {
  Tensor out = input;
  for (const TransformPtr& transform : transforms_) out = transform->apply(out, random);
  return out;
}

Tensor Compose::operator()(const Tensor& input, std::uint64_t seed, std::int64_t epoch, std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0, "Compose: sample index ", index, " is negative");
  RandomStream random(seed, epoch, static_cast<std::uint64_t>(index));
  return apply(input, random);
}

// ---- ToFloat

Tensor ToFloat::apply(const Tensor& input, RandomStream&) const {
  check_cpu(input, "ToFloat");
  const Tensor in = input.contiguous();
  Tensor out = empty(in.shape(), {.dtype = DType::f32});
  float* dst = out.data<float>();
  const std::int64_t n = in.numel();
  // Scaled in double and rounded once, so u8 * (1/255) gives the float nearest to v/255.
  visit_dtype(in.dtype(), [&]<typename T>() {
    const T* src = static_cast<const T*>(in.data_ptr());
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(convert<double>(src[i]) * scale_);
  });
  return out;
}

// ---- Normalize

Normalize::Normalize(std::vector<double> mean, std::vector<double> stddev)
    : mean_(std::move(mean)), stddev_(std::move(stddev)) {
  FRUGAL_CHECK_VALUE(!mean_.empty() && mean_.size() == stddev_.size(),
                     "Normalize: needs one mean and one std per channel, got ", mean_.size(), " means and ",
                     stddev_.size(), " stds");
  for (double s : stddev_) FRUGAL_CHECK_VALUE(s > 0.0, "Normalize: every std must be positive, got ", s);
}

Tensor Normalize::apply(const Tensor& input, RandomStream&) const {
  check_cpu(input, "Normalize");
  FRUGAL_CHECK_DTYPE(is_floating(input.dtype()), "Normalize: needs a floating input (apply ToFloat first), got ",
                     input.dtype());
  const auto channels = static_cast<std::int64_t>(mean_.size());
  FRUGAL_CHECK_SHAPE(input.dim() >= 1 && input.size(0) == channels, "Normalize: has ", channels,
                     " channel(s) of mean/std, input has shape ", shape_str(input.shape()));
  const Tensor in = input.contiguous();
  Tensor out = empty(in.shape(), {.dtype = in.dtype()});
  const std::int64_t per_channel = in.numel() / channels;
  visit_dtype(in.dtype(), [&]<typename T>() {
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t i = c * per_channel; i < (c + 1) * per_channel; ++i)
        dst[i] = convert<T>((convert<double>(src[i]) - mean_[c]) / stddev_[c]);
  });
  return out;
}

// ---- Pad

Pad::Pad(std::int64_t amount, double value) : amount_(amount), value_(value) {
  FRUGAL_CHECK_VALUE(amount >= 0, "Pad: amount must be >= 0, got ", amount);
}

Tensor Pad::apply(const Tensor& input, RandomStream&) const {
  check_image(input, "Pad");
  if (amount_ == 0) return input;
  const std::int64_t h = input.size(1), w = input.size(2);
  Tensor out = full({input.size(0), h + 2 * amount_, w + 2 * amount_}, value_, {.dtype = input.dtype()});
  out.slice(1, amount_, amount_ + h).slice(2, amount_, amount_ + w).copy_(input);
  return out;
}

// ---- RandomCrop

RandomCrop::RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding)
    : height_(height), width_(width), pad_(padding) {
  FRUGAL_CHECK_VALUE(height > 0 && width > 0, "RandomCrop: size must be positive, got ", height, " x ", width);
}

Tensor RandomCrop::apply(const Tensor& input, RandomStream& random) const {
  check_image(input, "RandomCrop");
  const Tensor padded = pad_.apply(input, random);
  const std::int64_t h = padded.size(1), w = padded.size(2);
  FRUGAL_CHECK_SHAPE(height_ <= h && width_ <= w, "RandomCrop: a ", height_, " x ", width_,
                     " window does not fit the padded image of shape ", shape_str(padded.shape()));
  const std::int64_t top = random.randint(0, h - height_ + 1);
  const std::int64_t left = random.randint(0, w - width_ + 1);
  return padded.slice(1, top, top + height_).slice(2, left, left + width_).contiguous();
}

// ---- RandomHorizontalFlip

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  FRUGAL_CHECK_VALUE(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::apply(const Tensor& input, RandomStream& random) const {
  check_image(input, "RandomHorizontalFlip");
  if (random.uniform() >= p_) return input;
  const Tensor in = input.contiguous();
  Tensor out = empty(in.shape(), {.dtype = in.dtype()});
  // Byte copies of whole elements: one loop for every dtype. Row r of the [C*H, W] view is reversed.
  const std::size_t element = in.element_size();
  const std::int64_t rows = in.size(0) * in.size(1), w = in.size(2);
  const auto* src = static_cast<const std::byte*>(in.data_ptr());
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t x = 0; x < w; ++x)
      std::memcpy(dst + (r * w + x) * element, src + (r * w + (w - 1 - x)) * element, element);
  return out;
}

}  // namespace frugal::data
