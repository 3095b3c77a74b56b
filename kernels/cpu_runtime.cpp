// blas_core, better_blas_core, blas_threads, configure_cpu_runtime: see the notes in cpu_runtime.h.
#include "kernels/cpu_runtime.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
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
// 0, or FRUGAL_BLAS_THREADS for the whole run.
int default_blas_threads() {
  const char* text = std::getenv("FRUGAL_BLAS_THREADS");
  if (text == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long threads = std::strtol(text, &end, 10);
  FRUGAL_CHECK_VALUE(end != text && *end == '\0' && errno == 0 && threads >= 0 && threads <= 65536, "FRUGAL_BLAS_THREADS='",
                     text, "' is not a number of threads (0 for OpenMP's count, or 1 to 65536)");
  return static_cast<int>(threads);
}
// Read by kernels/cpu/gemm.cpp at every call. A function-local static, so the environment is read at
// the first call, where a bad value can be thrown to a caller, rather than during static initialisation.
std::atomic<int>& blas_thread_cap() {
  static std::atomic<int> threads{default_blas_threads()};
  return threads;
}
}  // namespace

int blas_threads() { return blas_thread_cap().load(std::memory_order_relaxed); }

void set_blas_threads(int threads) {
  FRUGAL_CHECK_VALUE(threads >= 0, "set_blas_threads: ", threads, " threads (0 for OpenMP's count, or at least 1)");
  blas_thread_cap().store(threads, std::memory_order_relaxed);
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
