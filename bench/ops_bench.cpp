// `frugal bench ops`: what the kernels cost, frugal's hand-written implementations beside the
// libraries, in one run.
//   gemm_1024   C = A B for 1024 x 1024 f32 matrices, GFLOP/s   CPU: blocked vs openblas;  GPU: naive, tiled vs cublas
//   relu_16M    relu of 16M f32 elements, GB/s read + written
//   sum_16M     sum of 16M f32 elements, GB/s read
// Targets (docs/benchmarks.md): blocked >= 0.5x openblas on 2 threads; tiled >= 0.6x cublas.
#include "bench/bench.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"

namespace frugal::bench {

namespace {

struct Sizes {
  std::int64_t side;      // of the square GEMM
  std::int64_t elements;  // of the elementwise and reduction cases
  int min_runs;
  double min_seconds;
};
constexpr Sizes kFullSizes{1024, 16 << 20, 3, 0.5};
constexpr Sizes kQuickSizes{128, 1 << 16, 1, 0.0};

double seconds(const Options& options, const Sizes& sizes, const std::function<void()>& fn) {
  const bool gpu = options.device.is_cuda();
  const int index = options.device.index();
  return median_seconds(fn, [&] { if (gpu) cuda_synchronize(index); }, sizes.min_runs, sizes.min_seconds);
}

void gemm_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const std::int64_t n = sizes.side;
  const TensorOptions on{.device = options.device};
  const Tensor a = uniform({n, n}, -1.0, 1.0, on), b = uniform({n, n}, -1.0, 1.0, on);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const DeviceType type = options.device.type();
  const GemmImpl previous = gemm_impl(type);
  const std::vector<std::pair<GemmImpl, const char*>> impls =
      type == DeviceType::CPU ? std::vector<std::pair<GemmImpl, const char*>>{{GemmImpl::blocked, "blocked"},
                                                                               {GemmImpl::library, "openblas"}}
                              : std::vector<std::pair<GemmImpl, const char*>>{{GemmImpl::tiled, "tiled"},
                                                                               {GemmImpl::naive, "naive"},
                                                                               {GemmImpl::library, "cublas"}};
  const std::string name = "gemm_" + std::to_string(n);
  for (const auto& [impl, label] : impls) {
    set_gemm_impl(type, impl);
    const double s = seconds(options, sizes, [&] { matmul(a, b); });
    results.push_back({name, label, flops / s / 1e9, "GFLOP/s", true});
  }
  set_gemm_impl(type, previous);
}

void memory_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const std::int64_t n = sizes.elements;
  const Tensor x = uniform({n}, -1.0, 1.0, {.device = options.device});
  const double bytes = static_cast<double>(n) * sizeof(float);
  const std::string suffix = n >= (1 << 20) ? std::to_string(n >> 20) + "M" : std::to_string(n >> 10) + "K";
  results.push_back({"relu_" + suffix, "frugal", 2 * bytes / seconds(options, sizes, [&] { relu(x); }) / 1e9, "GB/s", true});
  results.push_back({"sum_" + suffix, "frugal", bytes / seconds(options, sizes, [&] { sum(x); }) / 1e9, "GB/s", true});
}

}  // namespace

std::vector<Result> ops_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  std::vector<Result> results;
  gemm_cases(options, sizes, results);
  memory_cases(options, sizes, results);
  return results;
}

}  // namespace frugal::bench
