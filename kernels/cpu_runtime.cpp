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

namespace {
// Names the variables configure_cpu_runtime set (comma-separated), for the re-executed process and
// for user_environment: frugal's own choices, not the user's.
constexpr const char* kSetByFrugal = "FRUGAL_RUNTIME_SET";

bool set_for_frugal(const char* name, const std::string& value, std::string& names) {
  if (::setenv(name, value.c_str(), 1) != 0) return false;
  names += (names.empty() ? "" : ",") + std::string(name);
  return true;
}
}  // namespace

void configure_cpu_runtime(char** argv) {
  std::string names = std::getenv(kSetByFrugal) ? std::getenv(kSetByFrugal) : "";
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr)  // Note [OpenMP threads wait passively]
    changed = set_for_frugal("OMP_WAIT_POLICY", "passive", names);
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {  // Note [OpenBLAS core fallback]
    const std::optional<std::string> core = better_blas_core();
    if (core && set_for_frugal("OPENBLAS_CORETYPE", *core, names)) changed = true;
  }
  // The re-executed process finds both variables set and goes on; exec returns only on failure.
  if (changed && ::setenv(kSetByFrugal, names.c_str(), 1) == 0) ::execv("/proc/self/exe", argv);
}

std::vector<std::string> user_environment() {
  std::string set_by_frugal = std::string(",") + (std::getenv(kSetByFrugal) ? std::getenv(kSetByFrugal) : "") + ",";
  set_by_frugal += std::string(kSetByFrugal) + ",";
  std::vector<std::string> variables;
  for (char** entry = environ; *entry; ++entry) {
    const std::string variable = *entry;
    const std::string name = variable.substr(0, variable.find('='));
    if (set_by_frugal.find("," + name + ",") == std::string::npos) variables.push_back(variable);
  }
  return variables;
}

}  // namespace frugal
