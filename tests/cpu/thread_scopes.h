// Scopes that set a thread count for one test case and restore the run's own after, however the
// case ends: OpenMP's (omp_set_num_threads) and OpenBLAS's cap (set_blas_threads,
// kernels/cpu_runtime.h). Not here: anything a test asserts; the suites' runner (tests/skip.h).
#pragma once

#include <omp.h>

#include "kernels/cpu_runtime.h"

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

}  // namespace frugal::test
