// Tensor: a view (shape, strides, offset, dtype) onto a reference-counted Storage on a Device.
// Tensor is a cheap handle: copying it shares the same TensorImpl, as in PyTorch. Views (view,
// permute, slice, expand, ...) make a new TensorImpl over the same Storage and copy no bytes.
// Only copy_/contiguous/clone/to move data; they are the only kernels core/ owns (core/copy.h).
// Not here: math (kernels/), autograd (nn/), which hangs its metadata in the opaque slot below.
//
// Glossary: shape = sizes per dim; strides = elements to skip per step in each dim; offset =
// elements from the storage's start to element [0, ..., 0]. Element [i0, i1, ...] lives at
// offset + i0*stride0 + i1*stride1 + ...
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"
#include "core/strided.h"

namespace frugal {

using Shape = std::vector<std::int64_t>;
std::string shape_str(std::span<const std::int64_t> shape);  // "[2, 3]"
std::int64_t shape_numel(std::span<const std::int64_t> shape);
Shape contiguous_strides(std::span<const std::int64_t> shape);  // row-major

// Options for creating tensors, written with designated initializers:
//   zeros({2, 3}, {.dtype = DType::f64, .device = Device::cuda()})
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = default_device();  // the CPU unless a DefaultDeviceScope says otherwise (core/device.h)
  // The stream that first uses the memory (a side stream's copy, say): the caching allocator serves
  // it from that stream's pool. Work on other streams must be declared with record_stream
  // (core/stream.h). {} = the default stream, where frugal's kernels run.
  Stream stream{};
  // Page-locked host memory from pinned_host_allocator() (core/allocator_registry.h) rather than the
  // device's allocator: a CPU tensor that a GPU copies to and from by DMA, asynchronously, and whose
  // bytes the device's books do not count (torch's pin_memory=True). The CPU only.
  bool pinned = false;
};

// While one lives, every CPU tensor this thread makes is pinned, as if TensorOptions::pinned were
// set: how an ordinary optimizer run by the offloaded one (nn/optimizer_offload.h) keeps its state and
// temporaries in page-locked host memory without knowing it. Scopes nest.
class PinnedHostScope {
 public:
  PinnedHostScope();
  ~PinnedHostScope();
  PinnedHostScope(const PinnedHostScope&) = delete;
  PinnedHostScope& operator=(const PinnedHostScope&) = delete;

 private:
  bool previous_;
};

// Autograd attaches its per-tensor state here (requires_grad, grad, grad_fn, hooks). core/ knows
// only that the slot exists, so core never depends on nn/.
class AutogradMeta {
 public:
  virtual ~AutogradMeta() = default;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  std::int64_t offset = 0;
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false, every accessor throws
  explicit Tensor(std::shared_ptr<TensorImpl> impl);

  // ---- what it is
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  std::int64_t dim() const { return static_cast<std::int64_t>(impl().shape.size()); }
  std::int64_t size(std::int64_t dim) const;    // negative dims count from the end
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t offset() const { return impl().offset; }
  std::int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  std::size_t element_size() const { return dtype_size(dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage_with(const Tensor& other) const { return storage() == other.storage(); }
  StridedLayout layout() const;  // for kernels; throws if dim() > kMaxDims

  // Address of element [0, ..., 0] (device memory for CUDA tensors).
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    FRUGAL_CHECK_DTYPE(dtype_of_v<T> == dtype(), "data<", dtype_of_v<T>, ">() called on a ", dtype(), " tensor");
    return static_cast<T*>(data_ptr());
  }

  // ---- views: share storage, copy nothing
  Tensor view(Shape shape) const;     // one dim may be -1; throws ShapeError if strides do not allow it
  Tensor reshape(Shape shape) const;  // view when possible, otherwise a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor permute(std::span<const std::int64_t> dims) const;
  Tensor permute(std::initializer_list<std::int64_t> dims) const { return permute(std::span(dims.begin(), dims.size())); }
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;  // Python's [start:end:step], clamped
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;  // exact bounds, no clamping
  Tensor select(std::int64_t dim, std::int64_t index) const;  // removes `dim`
  Tensor expand(Shape shape) const;  // broadcast size-1 dims (stride 0); -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor as_strided(Shape shape, Shape strides, std::int64_t offset) const;  // checked against the storage's bounds

  // ---- copies
  Tensor contiguous() const;  // itself if already contiguous
  Tensor clone() const;       // always a new contiguous storage
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape; any dtype, any device
  Tensor& fill_(double value);
  // Points this tensor, and so every handle sharing it, at `data`'s storage, shape, strides, offset
  // and dtype; its autograd slot (requires_grad, hooks, .grad) stays. PyTorch's `t.data = data`: how a
  // module moves a parameter to another device, dtype or memory tag without changing its identity.
  // The only way to rewrite a tensor's layout in place: `data` was made, and bounds-checked, by the
  // ordinary constructors and views.
  void set_data(const Tensor& data) const;

  // ---- element access (tests, printing, scalars)
  template <typename T>
  T item() const;  // the one element of a numel()==1 tensor, converted to T
  template <typename T>
  T at(std::initializer_list<std::int64_t> index) const;  // one element of a CPU tensor
  template <typename T>
  std::vector<T> to_vector() const;  // every element in row-major order, converted, from any device

  std::string str() const;  // nested brackets plus shape, dtype and device

  // ---- autograd slot (see AutogradMeta)
  AutogradMeta* autograd_meta() const { return impl().autograd.get(); }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta) const;

  // Read-only: a tensor's layout changes only through set_data and the autograd slot only through
  // set_autograd_meta, so no caller can put it past the bounds checks of the views.
  const TensorImpl& impl() const;
  // The shared handle itself: autograd keeps weak references to leaves through it, and checks
  // whether a gradient is referenced elsewhere before adopting it without a copy.
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  Tensor make_view(Shape shape, Shape strides, std::int64_t offset) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// ---- creation

Tensor empty(Shape shape, TensorOptions options = {});  // uninitialised bytes
Tensor zeros(Shape shape, TensorOptions options = {});
Tensor ones(Shape shape, TensorOptions options = {});
Tensor full(Shape shape, double value, TensorOptions options = {});
Tensor arange(double end, TensorOptions options = {});  // 0, 1, ..., end-1
Tensor arange(double start, double end, double step, TensorOptions options = {});

// A tensor holding `values` (numel must match shape; an empty shape means 1-D of values.size()).
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, Device device = Device::cpu());

// ---- checks with messages that name both operands

void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
// Whether two tensors may have elements at the same address (same storage, intersecting ranges).
bool memory_overlaps(const Tensor& a, const Tensor& b);
// Normalises a possibly negative dim for a tensor of `ndim` dims; IndexError if out of range.
std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim);

// ---- templates

template <typename T>
T Tensor::item() const {
  FRUGAL_CHECK_SHAPE(numel() == 1, "item() needs exactly one element, got shape ", shape_str(shape()));
  return to_vector<T>()[0];
}

template <typename T>
T Tensor::at(std::initializer_list<std::int64_t> index) const {
  FRUGAL_CHECK_DEVICE(device().is_cpu(), "at() reads CPU tensors; this one is on ", device(), " (use to(Device::cpu()))");
  FRUGAL_CHECK_INDEX(static_cast<std::int64_t>(index.size()) == dim(), "at() got ", index.size(),
                     " indices for a tensor of shape ", shape_str(shape()));
  std::int64_t element = 0, d = 0;
  for (std::int64_t i : index) {
    FRUGAL_CHECK_INDEX(i >= 0 && i < shape()[d], "index ", i, " is out of range for dim ", d, " of size ", shape()[d]);
    element += i * strides()[d++];
  }
  return visit_dtype(dtype(), [&]<typename S>() { return convert<T>(static_cast<const S*>(data_ptr())[element]); });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const Tensor cpu = to(Device::cpu(), dtype_of_v<T>).contiguous();
  const T* first = cpu.data<T>();
  return std::vector<T>(first, first + cpu.numel());
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(values.size())};
  FRUGAL_CHECK_SHAPE(shape_numel(shape) == static_cast<std::int64_t>(values.size()), "from_vector: ", values.size(),
                     " values do not fill shape ", shape_str(shape));
  Tensor cpu = empty(shape, {.dtype = dtype_of_v<T>});
  std::copy(values.begin(), values.end(), cpu.data<T>());
  return cpu.to(device);
}

}  // namespace frugal
