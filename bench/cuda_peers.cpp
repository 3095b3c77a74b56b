// cuBLAS and cuRAND peers for the GPU benchmark cases (see cuda_peers.h). Handles are created once
// and kept for the process: creating them is not what the benchmarks measure.
#include "bench/cuda_peers.h"

#include <curand.h>

#include "kernels/cuda/library_check.h"

namespace frugal::bench::cuda_peers {

namespace {
const char* curand_status_name(curandStatus_t status) {
  return status == CURAND_STATUS_SUCCESS ? "success" : "cuRAND call failed (see curand.h for the status code)";
}
}  // namespace

#define FRUGAL_CURAND_CHECK(call) FRUGAL_LIBRARY_CHECK("cuRAND", call, CURAND_STATUS_SUCCESS, curand_status_name)

void cublas_transpose(float* dst, const float* src, int n) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    FRUGAL_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  const float one = 1.0f, zero = 0.0f;
  // Row-major n x n is column-major transposed, so a column-major transpose is a row-major one.
  // With beta = 0, B is not read; cuBLAS allows B == C for the in-place form.
  FRUGAL_CUBLAS_CHECK(cublasSgeam(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, &one, src, n, &zero, dst, n, dst, n));
}

void curand_uniform(float* dst, std::size_t n, std::uint64_t seed) {
  static curandGenerator_t generator = [] {
    curandGenerator_t g = nullptr;
    FRUGAL_CURAND_CHECK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    return g;
  }();
  FRUGAL_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(generator, seed));
  FRUGAL_CURAND_CHECK(curandGenerateUniform(generator, dst, n));
}

}  // namespace frugal::bench::cuda_peers
