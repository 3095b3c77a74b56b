// Matrix multiply (see gemm.h): shapes, transposes read off the strides, batching, the chosen
// implementation per device, and linear forward/backward on top.
#include "kernels/gemm.h"

#include <array>
#include <cstdint>

#include "core/cuda_status.h"
#include "core/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/gemm_backends.h"
#include "kernels/reduce.h"

namespace frugal {

std::string_view gemm_impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::library: return "library";
    case GemmImpl::blocked: return "blocked";
    case GemmImpl::naive: return "naive";
    case GemmImpl::tiled: return "tiled";
    case GemmImpl::register_blocked: return "register_blocked";
  }
  return "?";
}

GemmImpl parse_gemm_impl(std::string_view name) {
  for (GemmImpl impl : {GemmImpl::library, GemmImpl::blocked, GemmImpl::naive, GemmImpl::tiled, GemmImpl::register_blocked})
    if (gemm_impl_name(impl) == name) return impl;
  FRUGAL_THROW(ValueError, "unknown gemm implementation '", name,
               "': expected library, blocked, naive, tiled or register_blocked");
}

namespace {
// By DeviceType. On CUDA cuBLAS, or where the build has no cuBLAS (the emulated CUDA build) the
// shared-memory tiled kernel, which takes any shape.
std::array<GemmImpl, kNumDeviceTypes> g_impl = {GemmImpl::library, kCudaLibraries ? GemmImpl::library : GemmImpl::tiled,
                                                GemmImpl::library};
}

void set_gemm_impl(DeviceType device, GemmImpl impl) {
  const bool cpu = device == DeviceType::CPU;
  FRUGAL_CHECK_VALUE(impl == GemmImpl::library || (cpu ? impl == GemmImpl::blocked : impl != GemmImpl::blocked),
                     "set_gemm_impl: ", gemm_impl_name(impl), " does not exist on ", cpu ? "the CPU" : "CUDA",
                     cpu ? " (library or blocked)" : " (library, naive, tiled or register_blocked)");
  g_impl[static_cast<int>(device)] = impl;
}

GemmImpl gemm_impl(DeviceType device) { return g_impl[static_cast<int>(device)]; }

namespace {

// A 2-D matrix as GEMM wants it: contiguous row-major, or the transpose of one (read with trans).
struct Operand {
  Tensor data;
  bool trans = false;
};
Operand as_operand(const Tensor& m) {
  if (m.is_contiguous()) return {m, false};
  if (m.t().is_contiguous()) return {m.t(), true};  // a transposed view: no copy, the GEMM transposes
  return {m.contiguous(), false};
}

// c = alpha * a b + beta * c for 2-D a [m, k], b [k, n] and a contiguous c [m, n].
void gemm_2d(const Tensor& a, const Tensor& b, double alpha, double beta, const Tensor& c) {
  const Operand oa = as_operand(a), ob = as_operand(b);
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: C = beta * C
    Tensor out = c;
    if (beta == 0.0)
      out.fill_(0.0);
    else
      out.copy_(mul(c, beta));
    return;
  }
  const GemmImpl impl = gemm_impl(c.device().type());
  // OpenBLAS and cuBLAS take 32-bit sizes and leading dimensions; the hand-written CUDA kernels put
  // row tiles on the grid's y axis, which stops at 65535 blocks. Past either, a clear error rather
  // than a size that silently wraps.
  constexpr std::int64_t kMaxLibraryDim = INT32_MAX, kMaxGridY = 65535;
  FRUGAL_CHECK_VALUE(m <= kMaxLibraryDim && n <= kMaxLibraryDim && k <= kMaxLibraryDim, "matmul: [", m, ", ", k,
                     "] x [", k, ", ", n, "] has a size above 2^31 - 1, more than BLAS libraries take");
  const std::int64_t row_tile = impl == GemmImpl::register_blocked ? 128 : 16;
  FRUGAL_CHECK_VALUE(!c.device().is_cuda() || impl == GemmImpl::library || (m + row_tile - 1) / row_tile <= kMaxGridY,
                     "matmul: ", m, " rows need more than 65535 row tiles of ", row_tile, " for the ",
                     gemm_impl_name(impl), " CUDA kernel; the library implementation (cuBLAS) takes them");
  switch (c.device().type()) {
    case DeviceType::CPU:
      return cpu::gemm(impl, c.dtype(), oa.trans, ob.trans, m, n, k, alpha, oa.data.data_ptr(), ob.data.data_ptr(), beta,
                       c.data_ptr());
    case DeviceType::Meta:
      return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      if (impl == GemmImpl::library)
        return cuda::cublas_gemm(c.dtype(), oa.trans, ob.trans, m, n, k, alpha, oa.data.data_ptr(), ob.data.data_ptr(),
                                 beta, c.data_ptr());
      return cuda::gemm(impl, c.dtype(), oa.trans, ob.trans, m, n, k, alpha, oa.data.data_ptr(), ob.data.data_ptr(), beta,
                        c.data_ptr());
#else
      throw_no_cuda("matmul");
#endif
  }
}

void check_matmul(const Tensor& a, const Tensor& b) {
  FRUGAL_CHECK_VALUE(a.defined() && b.defined(), "matmul: an operand is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(a.dtype()), "matmul: needs a floating dtype, got ", a.dtype());
  check_same_dtype(a, b, "matmul");
  check_same_device(a, b, "matmul");
  FRUGAL_CHECK_SHAPE((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3) && a.dim() >= b.dim(),
                     "matmul: expects [M, K] x [K, N] or [B, M, K] x [B or none, K, N], got ", shape_str(a.shape()), " and ",
                     shape_str(b.shape()));
  FRUGAL_CHECK_SHAPE(a.size(-1) == b.size(-2), "matmul: inner sizes differ: ", shape_str(a.shape()), " x ",
                     shape_str(b.shape()));
  if (a.dim() == 3 && b.dim() == 3)
    FRUGAL_CHECK_SHAPE(a.size(0) == b.size(0), "matmul: batch sizes differ: ", shape_str(a.shape()), " x ",
                       shape_str(b.shape()));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul(a, b);
  if (a.dim() == 2) {
    Tensor c = empty({a.size(0), b.size(1)}, {.dtype = a.dtype(), .device = a.device()});
    gemm_2d(a, b, 1.0, 0.0, c);
    return c;
  }
  const std::int64_t batch = a.size(0);
  Tensor c = empty({batch, a.size(1), b.size(-1)}, {.dtype = a.dtype(), .device = a.device()});
  for (std::int64_t i = 0; i < batch; ++i) gemm_2d(a.select(0, i), b.dim() == 3 ? b.select(0, i) : b, 1.0, 0.0, c.select(0, i));
  return c;
}

void matmul_into(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  check_matmul(a, b);
  FRUGAL_CHECK_SHAPE(a.dim() == 2 && c.defined() && c.dim() == 2 && c.size(0) == a.size(0) && c.size(1) == b.size(1),
                     "matmul_into: expects a 2-D [M, N] result for ", shape_str(a.shape()), " x ", shape_str(b.shape()),
                     ", got ", c.defined() ? shape_str(c.shape()) : std::string("undefined"));
  FRUGAL_CHECK_VALUE(c.is_contiguous(), "matmul_into: the result must be contiguous, got strides ", shape_str(c.strides()));
  check_same_dtype(a, c, "matmul_into");
  check_same_device(a, c, "matmul_into");
  gemm_2d(a, b, alpha, beta, c);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  FRUGAL_CHECK_SHAPE(x.defined() && weight.defined() && x.dim() == 2 && weight.dim() == 2,
                     "linear: expects x [N, in] and weight [out, in]");
  Tensor y = matmul(x, weight.t());
  if (!bias.defined()) return y;
  FRUGAL_CHECK_SHAPE(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias of shape ", shape_str(bias.shape()),
                     " does not match weight of shape ", shape_str(weight.shape()));
  return add(y, bias);
}

LinearGrads linear_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight, bool has_bias) {
  LinearGrads g;
  g.input = matmul(grad_output, weight);         // [N, out] x [out, in]
  g.weight = matmul(grad_output.t(), x);         // [out, N] x [N, in]
  if (has_bias) g.bias = sum(grad_output, {0});  // [out]
  return g;
}

}  // namespace frugal
