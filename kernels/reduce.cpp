// Reductions (see reduce.h): which dims, the [outer, inner] view, the result's shape, and the one
// switch that picks the device's kernel.
#include "kernels/reduce.h"

#include <algorithm>
#include <numeric>

#include "core/dispatch.h"
#include "kernels/reduce_backends.h"

namespace frugal {

namespace {

struct Plan {
  Tensor view;       // kept dims first, reduced dims last
  Shape out_shape;   // with or without the reduced dims
  std::int64_t outer = 1, inner = 1;
};

Plan plan(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, const char* op) {
  FRUGAL_CHECK_VALUE(x.defined(), op, ": the input is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(x.dtype()), op, ": needs a floating dtype, got ", x.dtype(), " (shape ",
                     shape_str(x.shape()), ")");
  if (dims.empty()) {
    dims.resize(x.dim());
    std::iota(dims.begin(), dims.end(), 0);
  }
  std::vector<bool> reduced(x.dim(), false);
  for (std::int64_t& d : dims) {
    d = wrap_dim(d, x.dim());
    FRUGAL_CHECK_INDEX(!reduced[d], op, ": dim ", d, " appears twice in ", shape_str(dims));
    reduced[d] = true;
  }
  Plan p;
  Shape order;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (reduced[d]) {
      if (keepdim) p.out_shape.push_back(1);
      continue;
    }
    order.push_back(d);
    p.out_shape.push_back(x.shape()[d]);
    p.outer *= x.shape()[d];
  }
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) {
      order.push_back(d);
      p.inner *= x.shape()[d];
    }
  p.view = x.permute(order);
  return p;
}

// Runs `op` into `out` (and `indices`), both contiguous with p.outer elements.
void run(Reduction op, const Plan& p, std::int64_t correction, const Tensor& out, const Tensor* indices, const char* name) {
  if (p.outer == 0) return;
  std::int64_t* index_data = indices ? indices->data<std::int64_t>() : nullptr;
  switch (out.device().type()) {
    case DeviceType::CPU:
      return cpu::reduce(op, p.view.dtype(), p.view.data_ptr(), p.view.layout(), p.outer, p.inner, correction,
                         out.data_ptr(), index_data);
    case DeviceType::Meta: return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      return cuda::reduce(op, p.view.dtype(), p.view.data_ptr(), p.view.layout(), p.outer, p.inner, correction,
                          out.data_ptr(), index_data);
#else
      throw_no_cuda(name);
#endif
  }
  (void)name;
}

Tensor reduce_values(Reduction op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, std::int64_t correction,
                     const char* name) {
  const Plan p = plan(x, std::move(dims), keepdim, name);
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  run(op, p, correction, out, nullptr, name);
  return out;
}

MaxResult reduce_max(Reduction op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, const char* name) {
  const Plan p = plan(x, std::move(dims), keepdim, name);
  FRUGAL_CHECK_SHAPE(p.inner > 0, name, ": cannot take the maximum of no elements (shape ", shape_str(x.shape()), ")");
  MaxResult r{empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()}),
              empty(p.out_shape, {.dtype = DType::i64, .device = x.device()})};
  run(op, p, 0, r.values, &r.indices, name);
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return reduce_values(Reduction::sum, x, std::move(dims), keepdim, 0, "sum");
}

Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return reduce_values(Reduction::mean, x, std::move(dims), keepdim, 0, "mean");
}

Tensor var(const Tensor& x, std::vector<std::int64_t> dims, std::int64_t correction, bool keepdim) {
  FRUGAL_CHECK_VALUE(correction >= 0, "var: correction must be >= 0, got ", correction);
  return reduce_values(Reduction::var, x, std::move(dims), keepdim, correction, "var");
}

MaxResult max(const Tensor& x, std::int64_t dim, bool keepdim) {
  FRUGAL_CHECK_INDEX(x.dim() > 0, "max: a 0-dim tensor has no dim ", dim, "; use max(x)");
  return reduce_max(Reduction::max, x, {dim}, keepdim, "max");
}

Tensor max(const Tensor& x) { return reduce_max(Reduction::max, x, {}, false, "max").values; }

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  FRUGAL_CHECK_INDEX(x.dim() > 0, "argmax: a 0-dim tensor has no dim ", dim);
  return reduce_max(Reduction::argmax, x, {dim}, keepdim, "argmax").indices;
}

}  // namespace frugal
