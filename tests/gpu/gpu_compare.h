// How the GPU suite compares a CUDA result with the CPU reference: |gpu - cpu| <= atol + rtol*|cpu|
// element by element (NaN matches NaN), reporting the worst element on failure. Shared by every
// tests/gpu/test_gpu_*.cpp. Not here: exact comparisons (compare to_vector<double>() directly).
#pragma once

#include <algorithm>
#include <vector>

#include "core/cuda_status.h"
#include "core/tensor.h"

namespace frugal::test {

inline const Device kGpu = Device::cuda(0);

struct Tolerance {
  double rtol, atol;
};

// For results computed elementwise, so only the last rounding and the libm differ: CUDA's
// expf/logf/tanhf/powf are within 2 ulp of the correctly rounded value and the host's libm is
// too. In f32 that is a few 1e-7 relative; the tolerances leave room for both plus a rounding of
// f16/bf16 results that lands on the other side of a tie.
Tolerance elementwise_tolerance(DType dtype);

// For sums of many products (GEMM, convolution, batch norm statistics): the GPU adds in another
// order (and cuBLAS/cuDNN may use TF32-free but differently blocked f32 sums), so f32 gets the
// rounding room of about a thousand terms; 16-bit types round once at the end as on the CPU.
Tolerance accumulation_tolerance(DType dtype);

void check_close(const Tensor& gpu, const Tensor& cpu, Tolerance tolerance, const char* what);

// Says (doctest MESSAGE) that the running case leaves out `library_name`'s part: no such library here.
void skipped_part(const char* library_name);

// The implementations of a library-backed op (GEMM, convolution, batch norm) this build can run:
// frugal's kernels always, NVIDIA's library (the last of `all`) only where the build links it. The
// emulated CUDA build has none, and the case says on stderr which one it leaves out and why.
template <typename Impl>
std::vector<Impl> runnable_impls(std::vector<Impl> all, Impl library, const char* library_name) {
  if (kCudaLibraries) return all;
  std::erase(all, library);
  skipped_part(library_name);
  return all;
}
inline void check_close(const Tensor& gpu, const Tensor& cpu, DType dtype, const char* what) {
  check_close(gpu, cpu, elementwise_tolerance(dtype), what);
}

}  // namespace frugal::test
