// Scopes that set a process-wide choice for one test case and restore the run's own after, however
// the case ends: OpenMP's thread count (omp_set_num_threads), OpenBLAS's cap (set_blas_threads,
// kernels/cpu_runtime.h) and the CPU's GEMM (set_gemm_impl, kernels/gemm.h). Not here: anything a
// test asserts; the suites' runner (tests/skip.h).
#pragma once

#include <omp.h>

#include "kernels/cpu_runtime.h"
#include "kernels/gemm.h"

namespace frugal::test {

// OpenMP's thread count set to `threads` while the scope lives.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) { omp_set_num_threads(threads); }
  ~OmpThreadsScope() { omp_set_num_threads(saved_); }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_ = omp_get_max_threads();
};

// set_blas_threads(threads) for one case, whatever FRUGAL_BLAS_THREADS set for the run.
class BlasThreadsScope {
 public:
  explicit BlasThreadsScope(int threads) { set_blas_threads(threads); }
  ~BlasThreadsScope() { set_blas_threads(saved_); }
  BlasThreadsScope(const BlasThreadsScope&) = delete;
  BlasThreadsScope& operator=(const BlasThreadsScope&) = delete;

 private:
  int saved_ = blas_threads();
};

// set_gemm_impl(DeviceType::CPU, impl) for one case.
class CpuGemmScope {
 public:
  explicit CpuGemmScope(GemmImpl impl) { set_gemm_impl(DeviceType::CPU, impl); }
  ~CpuGemmScope() { set_gemm_impl(DeviceType::CPU, saved_); }
  CpuGemmScope(const CpuGemmScope&) = delete;
  CpuGemmScope& operator=(const CpuGemmScope&) = delete;

 private:
  GemmImpl saved_ = gemm_impl(DeviceType::CPU);
};

}  // namespace frugal::test
