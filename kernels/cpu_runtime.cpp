// blas_core, better_blas_core, use_best_blas_core: see Note [OpenBLAS core fallback] in blas_core.h.
#include "kernels/cpu_runtime.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "core/error.h"

#if FRUGAL_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace frugal {

std::string blas_core() {
#if FRUGAL_WITH_OPENBLAS
  const char* name = openblas_get_corename();
  return name ? name : "";
#else
  return "";
#endif
}

namespace {
std::atomic<int> g_blas_threads{0};  // read by kernels/cpu/gemm.cpp at every call
}

int blas_threads() { return g_blas_threads.load(std::memory_order_relaxed); }

void set_blas_threads(int threads) {
  FRUGAL_CHECK_VALUE(threads >= 0, "set_blas_threads: ", threads, " threads (0 for OpenMP's count, or at least 1)");
  g_blas_threads.store(threads, std::memory_order_relaxed);
}

std::optional<std::string> better_blas_core() {
  if (blas_core() != "Prescott") return std::nullopt;  // OpenBLAS knew the CPU, or runs no x86 kernels
  // The instruction sets each OpenBLAS core's kernels use.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return std::nullopt;
}

void configure_cpu_runtime(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {  // Note [OpenMP threads wait passively]
    changed = ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
  }
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {  // Note [OpenBLAS core fallback]
    const std::optional<std::string> core = better_blas_core();
    if (core && ::setenv("OPENBLAS_CORETYPE", core->c_str(), 1) == 0) changed = true;
  }
  // The re-executed process finds both variables set and goes on; exec returns only on failure.
  if (changed) ::execv("/proc/self/exe", argv);
}

}  // namespace frugal
