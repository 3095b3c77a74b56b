// The timing helpers and the registry of benchmarks (see bench.h).
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

#include "bench/bench.h"
#include "core/cuda_status.h"
#include "core/error.h"

namespace frugal::bench {

std::vector<Result> tensor_benchmark(const Options& options);  // bench/tensor_bench.cpp
std::vector<Result> ops_benchmark(const Options& options);     // bench/ops_bench.cpp
std::vector<Result> alloc_benchmark(const Options& options);   // bench/alloc_bench.cpp
std::vector<Result> loader_benchmark(const Options& options);  // bench/loader_bench.cpp
Report train_benchmark(const Options& options);                // bench/train_bench.cpp
Report allreduce_benchmark(const Options& options);            // bench/allreduce_bench.cpp
Report roofline_benchmark(const Options& options);             // bench/roofline_bench.cpp
Report saving_benchmark(const Options& options);               // bench/saving_bench.cpp

const std::vector<Benchmark>& all_benchmarks() {
  static const std::vector<Benchmark> benchmarks = {
      {"ops",
       "kernels, hand-written beside the libraries: a 1024x1024 GEMM (blocked against OpenBLAS; naive, tiled and "
       "register-blocked against cuBLAS), relu and sum of 16M floats, fused cross-entropy forward and backward, "
       "a 3x3 stride-2 max pool, dense and depthwise 3x3 convolutions and batch norm's training forward (native, "
       "against cuDNN on a GPU)",
       ops_benchmark},
      {"tensor",
       "copies (contiguous, transposed, f32->f16 cast) and Philox random fill, against memcpy, naive loops and "
       "std::mt19937",
       tensor_benchmark},
      {"alloc",
       "allocation and free cost on a MobileNetV2 training trace and a random size mix (caching, direct, jemalloc, "
       "mimalloc), and peak reserved over peak live for frugal's policy and PyTorch's rules",
       alloc_benchmark},
      {"loader",
       "the DataLoader streaming a generated multi-GB shard against raw read(), Fashion-MNIST samples/s, and peak "
       "RSS streaming against InMemoryDataset",
       loader_benchmark},
      {"train",
       "MobileNetV2 training steps and eval forwards on a batch of 64 1x32x32 images (standard and CIFAR stem): "
       "images/s, peak memory and saved activations per sample, beside PyTorch when /usr/bin/python3 has it",
       train_benchmark},
      {"roofline",
       "MobileNetV2's layers by kind (stem, depthwise, pointwise, batch norm, ReLU6) and direction, timed with "
       "their shapes in a batch of 64 (standard and CIFAR stem), beside the time the bytes moved and the FLOPs "
       "would take at this machine's measured copy bandwidth and GEMM rate",
       roofline_benchmark},
      {"saving",
       "MobileNetV2 training steps on a batch of 64 1x32x32 images (standard and CIFAR stem) with each way of saving "
       "fewer activation bytes (the standard graph, BatchNorm from its output, and that with bf16 or 8-bit saved "
       "feature maps): images/s and saved activations per sample",
       saving_benchmark},
      {"allreduce",
       "all-reduce algorithm and bus bandwidth (nccl-tests' algbw, busbw) per message size, 4 KiB to 64 MiB, over MPI "
       "on CPU ranks (run under mpirun -np N; rank 0 reports), beside a local memcpy of each message",
       allreduce_benchmark},
  };
  return benchmarks;
}

double median_seconds(const std::function<void()>& fn, const std::function<void()>& sync, int min_runs, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up: first-touch page faults and lazy initialisation are not what we measure
  sync();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < min_runs ||
         std::chrono::duration<double>(Clock::now() - start).count() < min_seconds) {
    const auto begin = Clock::now();
    fn();
    sync();
    times.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return median(std::move(times));
}

double device_median_seconds(const Device& device, const std::function<void()>& fn, int min_runs, double min_seconds) {
  const bool gpu = device.is_cuda();
  const int index = device.index();
  return median_seconds(fn, [&] { if (gpu) cuda_synchronize(index); }, min_runs, min_seconds);
}

double median(std::vector<double> values) {
  FRUGAL_CHECK(!values.empty(), "median of no values");
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

// Note [A timed run follows one of its own]
// When the runs of different processes take turns (frugal and its PyTorch peers in `frugal bench
// train`), the first run after another process had both cores for a while is not the steady state
// the benchmark means to measure. A process's OpenMP threads sleep while the others run; Linux then
// wakes a thread on its waker's core when its own core has been busy (wake-affine), both threads of
// the team share one core, and the load balancer moves one away only milliseconds later. Measured
// 2026-12-05 on the development machine (2 cores of an AMD EPYC), frugal's eval forward of
// MobileNetV2 (standard stem, batch 64, 2 threads): 9.8 ms one after another; 28.4 ms right after
// another process kept both cores busy for 100 ms; 12.3 ms there with the threads bound to cores
// (OMP_PROC_BIND=true), or with an untimed forward first. In `frugal bench train` frugal's timed
// eval forwards, each right after the peers' turns, took 14-36 ms (median 19), at 2 threads no
// faster than at one, while the peers' eager and compiled settings, which run one after another
// in one process, were spared. With Warm::every_run each timed run, frugal's and every peer's
// alike, follows an untimed run of its own.
AlternatingTimes alternating_seconds(const std::vector<std::function<double()>>& runs, int min_runs, double min_seconds,
                                     Warm warm) {
  using Clock = std::chrono::steady_clock;
  for (const auto& run : runs) run();  // warm-up, as in median_seconds
  AlternatingTimes times{std::vector<std::vector<double>>(runs.size())};
  const auto start = Clock::now();
  double untimed = 0.0;  // seconds spent in Warm::every_run's untimed runs, not measuring
  const auto measuring = [&] { return std::chrono::duration<double>(Clock::now() - start).count() - untimed; };
  for (int round = 0; round < min_runs || measuring() < min_seconds; ++round)
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (warm == Warm::every_run) {
        const auto before = Clock::now();
        runs[i]();
        untimed += std::chrono::duration<double>(Clock::now() - before).count();
      }
      times.seconds[i].push_back(runs[i]());
    }
  return times;
}

std::vector<double> AlternatingTimes::medians() const {
  std::vector<double> result;
  for (const auto& t : seconds) result.push_back(median(t));
  return result;
}

double AlternatingTimes::median_ratio(std::size_t run, std::size_t baseline) const {
  FRUGAL_CHECK(run < seconds.size() && baseline < seconds.size(), "median_ratio: runs ", run, " and ", baseline,
               " among ", seconds.size());
  std::vector<double> ratios;
  for (std::size_t r = 0; r < seconds[run].size(); ++r) ratios.push_back(seconds[run][r] / seconds[baseline][r]);
  return median(std::move(ratios));
}

std::vector<double> AlternatingTimes::median_ratios(std::size_t baseline) const {
  std::vector<double> result;
  for (std::size_t run = 0; run < seconds.size(); ++run) result.push_back(median_ratio(run, baseline));
  return result;
}

std::vector<double> alternating_median_seconds(const std::vector<std::function<double()>>& runs, int min_runs,
                                               double min_seconds, Warm warm) {
  return alternating_seconds(runs, min_runs, min_seconds, warm).medians();
}

TempDir::TempDir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();  // mkdtemp fills in the X
  FRUGAL_CHECK(::mkdtemp(pattern.data()) != nullptr, "bench: cannot create a folder in ",
               std::filesystem::temp_directory_path().string(), ": ", std::strerror(errno));
  path = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

}  // namespace frugal::bench
