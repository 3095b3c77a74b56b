// The library GEMM on a GPU: cuBLAS, through cublasGemmEx so every dtype takes one path (f16/bf16
// multiply with f32 accumulation, f64 in f64). One handle per device, created on first use and kept
// for the process (creating one costs milliseconds). Not emulated: this needs a GPU.
//
// cuBLAS is column-major; frugal is row-major. A row-major C [m, n] is a column-major C^T [n, m],
// and C^T = op(B)^T op(A)^T, so the call passes B before A with m and n swapped.
#include <map>
#include <mutex>

#include "kernels/cuda/library_check.h"
#include "core/cuda/runtime.h"
#include "kernels/gemm_backends.h"

namespace frugal::cuda {

namespace {
cublasHandle_t handle_for_current_device() {
  static std::mutex mutex;
  static std::map<int, cublasHandle_t> handles;  // never destroyed: destroying at exit races the runtime
  int device = 0;
  FRUGAL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  cublasHandle_t& handle = handles[device];
  if (!handle) FRUGAL_CUBLAS_CHECK(cublasCreate(&handle));
  return handle;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: FRUGAL_THROW(DTypeError, "gemm takes floating dtypes, got ", dtype);
  }
}
}  // namespace

void cublas_gemm(DType dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 const void* a, const void* b, double beta, void* c) {
  const cublasHandle_t handle = handle_for_current_device();
  const cudaDataType_t type = data_type(dtype);
  const bool f64 = dtype == DType::f64;
  const float alpha32 = static_cast<float>(alpha), beta32 = static_cast<float>(beta);
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta) : &beta32;
  const int lda = static_cast<int>(trans_a ? m : k), ldb = static_cast<int>(trans_b ? k : n);
  FRUGAL_CUBLAS_CHECK(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), alpha_ptr, b, type, ldb,
                                   a, type, lda, beta_ptr, c, type, static_cast<int>(n),
                                   f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace frugal::cuda
