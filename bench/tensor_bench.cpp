// `frugal bench tensor`: what core's data-moving kernels cost, next to the simplest peer for each.
//   case             frugal                        CPU peer                       GPU peer
//   copy_contiguous  dst.copy_(src), f32           memcpy                         cudaMemcpy
//   copy_transpose   dst.copy_(src.t()), f32       a naive double loop            cublasSgeam
//   cast_f32_f16     f16 dst.copy_(f32 src)        a one-thread conversion loop   cudaMemcpy of the same bytes
//   uniform_f32      uniform_(dst), Philox         std::mt19937 (one thread)      cuRAND Philox4_32_10
//   fill_contiguous  dst.fill_(0), f32             std::fill_n (one thread)       (frugal alone)
//   fill_1280        the same on [1280]: a         std::fill_n                    (frugal alone)
//                    BatchNorm's per-channel sums
//   pad_28x28        one [1, 28, 28] sample copied  a one-thread loop, and the      (CPU only)
//                    into the middle of [1, 32, 32] same loop in an OpenMP region
//                    (what data::Pad does)          (what every copy did before core/cpu/parallel.h)
// Bandwidth counts bytes read plus bytes written. Every destination is allocated once, outside the
// timed region, so allocation cost is not measured here (that is `frugal bench alloc`'s job).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "bench/bench.h"
#include "bench/cuda_peers.h"
#include "core/copy.h"
#include "core/cuda_status.h"
#include "core/random.h"

namespace frugal::bench {

namespace {

struct Sizes {
  std::int64_t elements;  // for the 1-D cases
  std::int64_t side;      // for the square transpose
  int min_runs;
  double min_seconds;
};

// 16M floats = 64 MiB per tensor: far beyond any cache, so the copies measure memory bandwidth.
constexpr Sizes kFullSizes{16 << 20, 4096, 5, 0.5};
constexpr Sizes kQuickSizes{1 << 16, 256, 2, 0.0};

struct Timer {
  const Options& options;
  const Sizes& sizes;
  double seconds(const std::function<void()>& fn) const {
    const int index = options.device.index();
    const bool on_gpu = options.device.is_cuda();
    return median_seconds(fn, [&] { if (on_gpu) cuda_synchronize(index); }, sizes.min_runs, sizes.min_seconds);
  }
};

Result gbps(const std::string& case_name, const std::string& impl, double bytes, double seconds) {
  return {case_name, impl, bytes / seconds / 1e9, "GB/s", true};
}

void copy_cases(const Timer& timer, std::vector<Result>& results) {
  const TensorOptions on_device{.device = timer.options.device};
  const std::int64_t n = timer.sizes.elements;
  const Tensor src = uniform({n}, 0.0, 1.0, on_device);
  Tensor dst = empty({n}, on_device);
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);
  results.push_back(gbps("copy_contiguous", "frugal", bytes, timer.seconds([&] { dst.copy_(src); })));
  const char* peer = timer.options.device.is_cuda() ? "cudaMemcpy" : "memcpy";
  results.push_back(gbps("copy_contiguous", peer, bytes, timer.seconds([&] {
    copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), src.nbytes());
  })));

  Tensor half = empty({n}, {.dtype = DType::f16, .device = timer.options.device});
  const double cast_bytes = static_cast<double>(n) * (sizeof(float) + sizeof(Half));
  results.push_back(gbps("cast_f32_f16", "frugal", cast_bytes, timer.seconds([&] { half.copy_(src); })));
  if (timer.options.device.is_cpu()) {
    results.push_back(gbps("cast_f32_f16", "one-thread-loop", cast_bytes, timer.seconds([&] {
      const float* in = src.data<float>();
      Half* out = half.data<Half>();
      for (std::int64_t i = 0; i < n; ++i) out[i] = Half(in[i]);
    })));
  } else {
    // The speed of light for a cast: a plain device copy moving the same 6 bytes per element.
    const std::size_t same_bytes = static_cast<std::size_t>(cast_bytes / 2);
    results.push_back(gbps("cast_f32_f16", "cudaMemcpy-same-bytes", cast_bytes, timer.seconds([&] {
      copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), same_bytes);
    })));
  }
}

void transpose_cases(const Timer& timer, std::vector<Result>& results) {
  const std::int64_t side = timer.sizes.side;
  const TensorOptions on_device{.device = timer.options.device};
  const Tensor src = uniform({side, side}, 0.0, 1.0, on_device);
  Tensor dst = empty({side, side}, on_device);
  const double bytes = 2.0 * static_cast<double>(side * side) * sizeof(float);
  results.push_back(gbps("copy_transpose", "frugal", bytes, timer.seconds([&] { dst.copy_(src.t()); })));
  if (timer.options.device.is_cpu()) {
    results.push_back(gbps("copy_transpose", "naive-loop", bytes, timer.seconds([&] {
      const float* in = src.data<float>();
      float* out = dst.data<float>();
      for (std::int64_t i = 0; i < side; ++i)
        for (std::int64_t j = 0; j < side; ++j) out[i * side + j] = in[j * side + i];
    })));
  } else {
#if FRUGAL_CUDA_LIBRARIES
    results.push_back(gbps("copy_transpose", "cublasSgeam", bytes, timer.seconds([&] {
      cuda_peers::cublas_transpose(dst.data<float>(), src.data<float>(), static_cast<int>(side));
    })));
#endif
  }
}

void random_cases(const Timer& timer, std::vector<Result>& results) {
  const std::int64_t n = timer.sizes.elements;
  const auto per_second = [n](double seconds) { return static_cast<double>(n) / seconds / 1e6; };
  Generator generator(42);
  Tensor out = empty({n}, {.device = timer.options.device});
  results.push_back({"uniform_f32", "frugal", per_second(timer.seconds([&] { uniform_(out, 0.0, 1.0, &generator); })),
                     "Melem/s", true});
  if (timer.options.device.is_cuda()) {
#if FRUGAL_CUDA_LIBRARIES
    results.push_back({"uniform_f32", "cuRAND-Philox",
                       per_second(timer.seconds([&] {
                         cuda_peers::curand_uniform(out.data<float>(), static_cast<std::size_t>(n), 42);
                       })),
                       "Melem/s", true});
#endif
  } else {
    std::vector<float> values(static_cast<std::size_t>(n));
    std::mt19937 engine(42);
    std::uniform_real_distribution<float> distribution(0.0f, 1.0f);
    results.push_back({"uniform_f32", "std::mt19937",
                       per_second(timer.seconds([&] {
                         for (float& v : values) v = distribution(engine);
                       })),
                       "Melem/s", true});
  }
}

// Filling with a constant, what zeros, ones and full do after allocating: a whole 16M f32 tensor
// (GB/s written), and a [1280] one (fills per second, kSmallFills per timed run, so that the clock's
// own cost does not swamp a fill of tens of nanoseconds), the size of the largest per-channel sums a
// MobileNetV2 BatchNorm backward zeroes.
constexpr std::int64_t kSmallFill = 1280, kSmallFills = 1000;

void fill_cases(const Timer& timer, std::vector<Result>& results) {
  const TensorOptions on_device{.device = timer.options.device};
  const std::int64_t n = timer.sizes.elements;
  Tensor large = empty({n}, on_device), small = empty({kSmallFill}, on_device);
  const double bytes = static_cast<double>(n) * sizeof(float);
  const auto fills_per_second = [&](const std::function<void()>& fill) {
    return static_cast<double>(kSmallFills) / timer.seconds([&] {
      for (std::int64_t i = 0; i < kSmallFills; ++i) fill();
    });
  };
  results.push_back(gbps("fill_contiguous", "frugal", bytes, timer.seconds([&] { large.fill_(0.0); })));
  results.push_back({"fill_1280", "frugal", fills_per_second([&] { small.fill_(0.0); }), "fill/s", true});
  if (!timer.options.device.is_cpu()) return;
  results.push_back(gbps("fill_contiguous", "one-thread-fill", bytes,
                         timer.seconds([&] { std::fill_n(large.data<float>(), n, 0.0f); })));
  results.push_back({"fill_1280", "one-thread-fill",
                     fills_per_second([&] { std::fill_n(small.data<float>(), kSmallFill, 0.0f); }), "fill/s", true});
}

// A small strided copy: its cost is all fixed costs, so it shows what a parallel region adds.
// Samples per second, higher is better.
void small_copy_cases(const Timer& timer, std::vector<Result>& results) {
  if (timer.options.device.is_cuda()) return;
  const Tensor sample = uniform({1, 28, 28}, 0.0, 1.0);
  Tensor padded = zeros({1, 32, 32});
  Tensor middle = padded.narrow(1, 2, 28).narrow(2, 2, 28);
  const auto per_second = [](double seconds) { return 1.0 / seconds; };
  results.push_back({"pad_28x28", "frugal", per_second(timer.seconds([&] { middle.copy_(sample); })), "sample/s", true});
  const float* in = sample.data<float>();
  float* out = padded.data<float>();
  const auto copy_row = [&](std::int64_t row) {
    std::memcpy(out + (row + 2) * 32 + 2, in + row * 28, 28 * sizeof(float));
  };
  results.push_back({"pad_28x28", "one-thread-loop", per_second(timer.seconds([&] {
                       for (std::int64_t row = 0; row < 28; ++row) copy_row(row);
                     })),
                     "sample/s", true});
  results.push_back({"pad_28x28", "openmp-region", per_second(timer.seconds([&] {
#pragma omp parallel for schedule(static)
                       for (std::int64_t row = 0; row < 28; ++row) copy_row(row);
                     })),
                     "sample/s", true});
}

}  // namespace

std::vector<Result> tensor_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  const Timer timer{options, sizes};
  std::vector<Result> results;
  copy_cases(timer, results);
  transpose_cases(timer, results);
  random_cases(timer, results);
  fill_cases(timer, results);
  small_copy_cases(timer, results);
  return results;
}

}  // namespace frugal::bench
