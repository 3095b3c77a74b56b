// blas_core, better_blas_core, blas_threads, configure_cpu_runtime: see the notes in cpu_runtime.h.
#include "kernels/cpu_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
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

long long spin_count_for(double microseconds) {
  // GNU OpenMP's spin loop checks a flag and runs `pause` (x86) once per iteration; elsewhere its
  // relax instruction is not timed here and the count assumes 10 ns.
  constexpr int kTimedPauses = 2000, kRuns = 3;  // about 20-80 us each: short enough to run at every start
  constexpr long long kFewestSpins = 1000;
  double seconds_per_pause = 10e-9;
#if defined(__x86_64__) || defined(__i386__)
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kTimedPauses; ++i) __builtin_ia32_pause();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds_per_pause = run == 0 ? seconds / kTimedPauses : std::min(seconds_per_pause, seconds / kTimedPauses);
  }
#endif
  return std::max(kFewestSpins, static_cast<long long>(microseconds * 1e-6 / seconds_per_pause));
}

void configure_cpu_runtime(char** argv) {
  std::string names = std::getenv(kSetByFrugal) ? std::getenv(kSetByFrugal) : "";
  bool changed = false;
  // Note [OpenMP threads spin briefly, then sleep]
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr)
    changed = set_for_frugal("GOMP_SPINCOUNT", std::to_string(spin_count_for(kSpinMicroseconds)), names);
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
