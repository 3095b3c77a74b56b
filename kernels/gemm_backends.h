// The GEMM each backend implements under one name: cpu::, cuda:: and cuda_emulated:: (tests), plus
// cuBLAS on the GPU.
//   C = alpha * op(A) * op(B) + beta * C, all row-major and contiguous, C [m, n];
//   op(A) = A [m, k] or, when trans_a, the transpose of A stored as [k, m]; likewise B.
// `impl` picks among the device's implementations (kernels/gemm.h). No CUDA types here.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/gemm.h"

namespace frugal {

#define FRUGAL_GEMM_KERNELS                                                                                     \
  void gemm(GemmImpl impl, DType dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,            \
            std::int64_t k, double alpha, const void* a, const void* b, double beta, void* c);

namespace cpu { FRUGAL_GEMM_KERNELS }            // library (OpenBLAS) and blocked
namespace cuda { FRUGAL_GEMM_KERNELS }           // the hand-written kernels: naive, tiled, register_blocked
namespace cuda_emulated { FRUGAL_GEMM_KERNELS }  // the same, in the emulator

namespace cuda {
// The library implementation on a GPU: cuBLAS (kernels/cuda/cublas_gemm.cpp). It cannot run in the
// emulator, so it is declared apart from the hand-written kernels that can.
void cublas_gemm(DType dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 const void* a, const void* b, double beta, void* c);
}  // namespace cuda

#undef FRUGAL_GEMM_KERNELS

}  // namespace frugal
