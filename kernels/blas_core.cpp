// blas_core, better_blas_core, use_best_blas_core: see Note [OpenBLAS core fallback] in blas_core.h.
#include "kernels/blas_core.h"

#include <unistd.h>

#include <cstdlib>

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

std::optional<std::string> better_blas_core() {
  if (blas_core() != "Prescott") return std::nullopt;  // OpenBLAS knew the CPU, or runs no x86 kernels
  // The instruction sets each OpenBLAS core's kernels use.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return std::nullopt;
}

void use_best_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // chosen by the user, or by our first run
  const std::optional<std::string> core = better_blas_core();
  if (!core) return;
  if (::setenv("OPENBLAS_CORETYPE", core->c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the kernels we have
}

}  // namespace frugal
