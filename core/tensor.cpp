// Tensor: shape bookkeeping, views, copies and creation (see tensor.h). Data movement is delegated
// to core/copy.h; printing lives in core/print.cpp.
#include "core/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/copy.h"

namespace frugal {

// ---- shapes

std::string shape_str(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::int64_t shape_numel(std::span<const std::int64_t> shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

Shape contiguous_strides(std::span<const std::int64_t> shape) {
  Shape strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = running;
    running *= std::max<std::int64_t>(shape[d], 1);
  }
  return strides;
}

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim) {
  FRUGAL_CHECK_INDEX(dim >= -ndim && dim < ndim, "dim ", dim, " is out of range for a tensor with ", ndim,
                     " dims (expected ", -ndim, " to ", ndim - 1, ")");
  return dim < 0 ? dim + ndim : dim;
}

namespace {
void check_shape_values(const Shape& shape, const char* op) {
  for (std::size_t d = 0; d < shape.size(); ++d)
    FRUGAL_CHECK_SHAPE(shape[d] >= 0, op, ": negative size ", shape[d], " in dim ", d, " of shape ", shape_str(shape));
  // The element count, the contiguous strides (sizes of 0 count as 1 there) and the byte count (up
  // to 8 bytes an element) must fit 64 bits: a product that wrapped would allocate a few bytes for
  // a huge tensor, or call a huge one empty.
  constexpr std::int64_t kMaxElements = INT64_MAX / 8;
  std::int64_t product = 1;
  for (const std::int64_t size : shape)
    FRUGAL_CHECK_SHAPE(!__builtin_mul_overflow(product, std::max<std::int64_t>(size, 1), &product) &&
                           product <= kMaxElements,
                       op, ": shape ", shape_str(shape), " has more than 2^60 elements");
}

// Replaces a single -1 in `shape` by whatever makes the element count `numel`.
Shape infer_size(Shape shape, std::int64_t numel, const Shape& from) {
  std::optional<std::size_t> infer;
  std::int64_t known = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      FRUGAL_CHECK_SHAPE(!infer, "view: only one dim may be -1, got ", shape_str(shape));
      infer = d;
    } else {
      FRUGAL_CHECK_SHAPE(shape[d] >= 0, "view: invalid size ", shape[d], " in shape ", shape_str(shape));
      known *= shape[d];
    }
  }
  if (infer) {
    FRUGAL_CHECK_SHAPE(known != 0 && numel % known == 0, "view: shape ", shape_str(shape), " cannot hold the ", numel,
                       " elements of shape ", shape_str(from));
    shape[*infer] = numel / known;
  }
  FRUGAL_CHECK_SHAPE(shape_numel(shape) == numel, "view: shape ", shape_str(shape), " has ", shape_numel(shape),
                     " elements but the tensor of shape ", shape_str(from), " has ", numel);
  return shape;
}

// Strides that let `new_shape` view memory laid out as (old_shape, old_strides) without a copy, or
// nothing when that is impossible. PyTorch's rule: the new dims must split or merge runs of old dims
// that are contiguous with each other ("chunks").
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size());
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    const bool chunk_ends = tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                                              old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}
}  // namespace

// True when two tensors' elements may share addresses: same storage and intersecting element
// ranges [first, last]. Disjoint views of one storage (two halves of a buffer) do not overlap.
bool memory_overlaps(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage_with(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto last_element = [](const Tensor& t) {
    std::int64_t last = t.offset();
    for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
    return last;
  };
  return a.offset() <= last_element(b) && b.offset() <= last_element(a);
}

// ---- Tensor basics

Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

const TensorImpl& Tensor::impl() const {
  FRUGAL_CHECK_VALUE(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

void Tensor::set_autograd_meta(std::shared_ptr<AutogradMeta> meta) const {
  FRUGAL_CHECK_VALUE(impl_ != nullptr, "use of an undefined tensor");
  impl_->autograd = std::move(meta);
}

void Tensor::set_data(const Tensor& data) const {
  FRUGAL_CHECK_VALUE(impl_ != nullptr, "set_data on an undefined tensor");
  FRUGAL_CHECK_VALUE(data.defined(), "set_data with an undefined tensor as the data");
  if (is_same(data)) return;
  const TensorImpl& source = data.impl();
  impl_->storage = source.storage;
  impl_->shape = source.shape;
  impl_->strides = source.strides;
  impl_->offset = source.offset;
  impl_->dtype = source.dtype;
}

std::int64_t Tensor::size(std::int64_t d) const { return shape()[wrap_dim(d, dim())]; }
std::int64_t Tensor::stride(std::int64_t d) const { return strides()[wrap_dim(d, dim())]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place
  std::int64_t expected = 1;
  for (std::int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;  // a size-1 dim's stride never matters
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

StridedLayout Tensor::layout() const {
  FRUGAL_CHECK_SHAPE(dim() <= kMaxDims, "kernels take at most ", kMaxDims, " dims, got shape ", shape_str(shape()));
  StridedLayout layout;
  layout.ndim = static_cast<int>(dim());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.sizes[d] = shape()[d];
    layout.strides[d] = strides()[d];
  }
  return layout;
}

void* Tensor::data_ptr() const {
  // A ZeRO-3 parameter between its uses (core/storage.h): reading it would read address 0.
  FRUGAL_CHECK_VALUE(storage()->resident(), "a tensor of shape ", shape_str(shape()), " has its memory released (a ",
                     "parameter sharded by ZeRO-3, read outside its layer: gather the model's parameters first, ",
                     "DistributedDataParallel::full_parameters())");
  return static_cast<char*>(storage()->data()) + offset() * static_cast<std::int64_t>(element_size());
}

// ---- views

Tensor Tensor::make_view(Shape new_shape, Shape new_strides, std::int64_t new_offset) const {
  auto view = std::make_shared<TensorImpl>();
  view->storage = storage();
  view->shape = std::move(new_shape);
  view->strides = std::move(new_strides);
  view->offset = new_offset;
  view->dtype = dtype();
  return Tensor(std::move(view));
}

Tensor Tensor::view(Shape new_shape) const {
  new_shape = infer_size(std::move(new_shape), numel(), shape());
  auto new_strides = view_strides(shape(), strides(), new_shape);
  FRUGAL_CHECK_SHAPE(new_strides.has_value(), "view: shape ", shape_str(new_shape), " is not compatible with shape ",
                     shape_str(shape()), " and strides ", shape_str(strides()), "; use reshape() to copy");
  return make_view(std::move(new_shape), std::move(*new_strides), offset());
}

Tensor Tensor::reshape(Shape new_shape) const {
  new_shape = infer_size(std::move(new_shape), numel(), shape());
  if (auto new_strides = view_strides(shape(), strides(), new_shape))
    return make_view(std::move(new_shape), std::move(*new_strides), offset());
  return contiguous().view(std::move(new_shape));
}

Tensor Tensor::permute(std::span<const std::int64_t> dims) const {
  FRUGAL_CHECK_SHAPE(static_cast<std::int64_t>(dims.size()) == dim(), "permute: got ", dims.size(),
                     " dims for a tensor of shape ", shape_str(shape()));
  Shape new_shape(dims.size()), new_strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = wrap_dim(dims[i], dim());
    FRUGAL_CHECK_INDEX(!seen[d], "permute: dim ", d, " appears twice in ", shape_str(dims));
    seen[d] = true;
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
  }
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  Shape dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, dim())], dims[wrap_dim(dim1, dim())]);
  return permute(dims);
}

Tensor Tensor::t() const {
  FRUGAL_CHECK_SHAPE(dim() == 2, "t() expects a 2-D tensor, got shape ", shape_str(shape()));
  return transpose(0, 1);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  d = wrap_dim(d, dim());
  FRUGAL_CHECK_VALUE(step > 0, "slice: step must be positive, got ", step);
  const std::int64_t n = shape()[d];
  auto clamp_index = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp_index(start);
  end = std::max(start, clamp_index(end));
  Shape new_shape = shape(), new_strides = strides();
  new_shape[d] = end > start ? (end - start - 1) / step + 1 : 0;  // ceil((end - start) / step) without overflow
  new_strides[d] *= step;
  return make_view(std::move(new_shape), std::move(new_strides), offset() + start * strides()[d]);
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  d = wrap_dim(d, dim());
  FRUGAL_CHECK_INDEX(start >= 0 && length >= 0 && start <= shape()[d] && length <= shape()[d] - start,
                     "narrow: range of ", length, " from ", start, " is outside dim ", d, " of size ", shape()[d]);
  return slice(d, start, start + length);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d, dim());
  const std::int64_t n = shape()[d];
  FRUGAL_CHECK_INDEX(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape new_shape = shape(), new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  return make_view(std::move(new_shape), std::move(new_strides), offset() + index * strides()[d]);
}

Tensor Tensor::expand(Shape target) const {
  const std::int64_t n = static_cast<std::int64_t>(target.size());
  FRUGAL_CHECK_SHAPE(n >= dim(), "expand: cannot expand shape ", shape_str(shape()), " to fewer dims ", shape_str(target));
  Shape new_strides(n);
  for (std::int64_t i = n - 1; i >= 0; --i) {
    const std::int64_t own = i - (n - dim());  // the matching dim of this tensor, aligned from the right
    if (own < 0) {
      FRUGAL_CHECK_SHAPE(target[i] >= 0, "expand: size -1 is not allowed for new leading dim ", i);
      new_strides[i] = 0;
      continue;
    }
    if (target[i] == -1) target[i] = shape()[own];
    FRUGAL_CHECK_SHAPE(target[i] >= 0, "expand: invalid size ", target[i], " in ", shape_str(target));
    FRUGAL_CHECK_SHAPE(target[i] == shape()[own] || shape()[own] == 1, "expand: cannot expand shape ", shape_str(shape()),
                       " to ", shape_str(target), " (dim ", own, " has size ", shape()[own], ", not 1)");
    new_strides[i] = target[i] == shape()[own] ? strides()[own] : 0;
  }
  return make_view(std::move(target), std::move(new_strides), offset());
}

Tensor Tensor::squeeze() const {
  Shape new_shape, new_strides;
  for (std::int64_t d = 0; d < dim(); ++d) {
    if (shape()[d] == 1) continue;
    new_shape.push_back(shape()[d]);
    new_strides.push_back(strides()[d]);
  }
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::squeeze(std::int64_t d) const {
  if (dim() == 0) {  // PyTorch: a 0-dim tensor accepts dim 0 or -1 and stays as it is
    wrap_dim(d, 1);
    return *this;
  }
  d = wrap_dim(d, dim());
  if (shape()[d] != 1) return *this;  // PyTorch: squeezing a dim that is not 1 is a no-op
  Shape new_shape = shape(), new_strides = strides();
  new_shape.erase(new_shape.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim(d, dim() + 1);
  Shape new_shape = shape(), new_strides = strides();
  const std::int64_t stride_here = d < dim() ? shape()[d] * strides()[d] : 1;
  new_shape.insert(new_shape.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride_here);
  return make_view(std::move(new_shape), std::move(new_strides), offset());
}

Tensor Tensor::as_strided(Shape new_shape, Shape new_strides, std::int64_t new_offset) const {
  FRUGAL_CHECK_SHAPE(new_shape.size() == new_strides.size(), "as_strided: shape ", shape_str(new_shape), " and strides ",
                     shape_str(new_strides), " differ in length");
  check_shape_values(new_shape, "as_strided");
  const auto capacity = static_cast<std::int64_t>(storage()->bytes() / element_size());
  std::int64_t last = new_offset;
  bool overflow = false;
  for (std::size_t d = 0; d < new_shape.size(); ++d) {
    FRUGAL_CHECK_SHAPE(new_strides[d] >= 0, "as_strided: negative stride ", new_strides[d], " in dim ", d);
    std::int64_t reach = 0;  // a product or sum that wraps would make a huge reach look small
    if (new_shape[d] > 0)
      overflow |= __builtin_mul_overflow(new_shape[d] - 1, new_strides[d], &reach) ||
                  __builtin_add_overflow(last, reach, &last);
  }
  FRUGAL_CHECK_INDEX(!overflow, "as_strided: shape ", shape_str(new_shape), " strides ", shape_str(new_strides),
                     " reach past 2^63 elements");
  FRUGAL_CHECK_INDEX(new_offset >= 0 && (shape_numel(new_shape) == 0 || last < capacity), "as_strided: shape ",
                     shape_str(new_shape), " strides ", shape_str(new_strides), " offset ", new_offset,
                     " reach element ", last, " but the storage holds ", capacity);
  return make_view(std::move(new_shape), std::move(new_strides), new_offset);
}

// ---- copies

Tensor& Tensor::copy_(const Tensor& src) {
  FRUGAL_CHECK_SHAPE(src.dim() <= dim(), "copy_: cannot broadcast source of shape ", shape_str(src.shape()),
                     " to destination of shape ", shape_str(shape()));
  for (std::int64_t d = 0; d < dim(); ++d)
    FRUGAL_CHECK_VALUE(strides()[d] != 0 || shape()[d] <= 1, "copy_: the destination of shape ", shape_str(shape()),
                       " has several elements at one address (an expanded view); clone() it first");
  Tensor source = src.shape() == shape() ? src : src.expand(shape());
  // A source overlapping the destination would be read after parts of it were overwritten.
  if (memory_overlaps(source, *this)) source = source.clone();
  if (source.device() == device()) {
    copy_elements(*this, source);
  } else {
    // Bytes cross devices only as one contiguous block in the source's dtype; any conversion or
    // striding then happens on the destination device.
    const Tensor packed = source.contiguous();
    const bool direct = is_contiguous() && dtype() == packed.dtype();
    const Tensor staged = direct ? *this : empty(shape(), {.dtype = packed.dtype(), .device = device()});
    copy_bytes(staged.data_ptr(), device(), packed.data_ptr(), packed.device(), packed.nbytes());
    if (!direct) copy_elements(*this, staged);
  }
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  fill_elements(*this, value);
  storage()->bump_version();
  return *this;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const { return empty(shape(), {.dtype = dtype(), .device = device()}).copy_(*this); }

Tensor Tensor::to(Device target) const { return to(target, dtype()); }
Tensor Tensor::to(DType target) const { return to(device(), target); }

Tensor Tensor::to(Device target_device, DType target_dtype) const {
  if (target_device == device() && target_dtype == dtype()) return *this;
  return empty(shape(), {.dtype = target_dtype, .device = target_device}).copy_(*this);
}

// ---- creation

namespace {
thread_local bool t_pinned_host = false;  // a PinnedHostScope lives on this thread
}  // namespace

PinnedHostScope::PinnedHostScope() : previous_(t_pinned_host) { t_pinned_host = true; }
PinnedHostScope::~PinnedHostScope() { t_pinned_host = previous_; }

Tensor empty(Shape shape, TensorOptions options) {
  check_shape_values(shape, "empty");
  auto impl = std::make_shared<TensorImpl>();
  const auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(options.dtype);
  const bool pinned = options.pinned || (t_pinned_host && options.device.is_cpu());
  impl->storage = std::make_shared<Storage>(bytes, options.device, options.stream, pinned);
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = options.dtype;
  return Tensor(std::move(impl));
}

Tensor full(Shape shape, double value, TensorOptions options) {
  Tensor out = empty(std::move(shape), options);
  out.fill_(value);
  return out;
}

Tensor zeros(Shape shape, TensorOptions options) { return full(std::move(shape), 0.0, options); }
Tensor ones(Shape shape, TensorOptions options) { return full(std::move(shape), 1.0, options); }

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  FRUGAL_CHECK_VALUE(step != 0.0, "arange: step must not be zero");
  FRUGAL_CHECK_VALUE(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
                     "arange: start, end and step must be finite");
  const double count = std::ceil((end - start) / step);
  std::vector<double> values(static_cast<std::size_t>(std::max(count, 0.0)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<double>(i) * step;
  return from_vector(values).to(options.device, options.dtype);
}

// ---- checks

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  FRUGAL_CHECK_SHAPE(a.shape() == b.shape(), op, ": shape mismatch: first operand is ", shape_str(a.shape()),
                     ", second is ", shape_str(b.shape()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  FRUGAL_CHECK_DTYPE(a.dtype() == b.dtype(), op, ": dtype mismatch: first operand (shape ", shape_str(a.shape()), ") is ",
                     a.dtype(), ", second (shape ", shape_str(b.shape()), ") is ", b.dtype());
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  FRUGAL_CHECK_DEVICE(a.device() == b.device(), op, ": device mismatch: first operand (shape ", shape_str(a.shape()),
                      ") is on ", a.device(), ", second (shape ", shape_str(b.shape()), ") is on ", b.device());
}

}  // namespace frugal
