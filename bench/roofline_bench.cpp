// `frugal bench roofline`: where MobileNetV2's training step spends its time, layer kind by layer
// kind, beside the least time this machine could take for the same work. For each layer of the
// model (models/registry.h: 10 classes, one input channel, a batch of 64 1x32x32 images; the
// standard stem and the CIFAR stem) the kernels a training step runs are timed on their own, with
// the layer's real shapes, and summed per kind and direction:
//   case                                 impls              unit
//   {standard,cifar}_{KIND}_{DIRECTION}  frugal, roofline   ms per batch
//   {standard,cifar}_layers              frugal, roofline   ms: every row above added up
//   copy_bandwidth                       frugal             GB/s: bytes read + written by a memcpy of
//                                                           8 MiB split over the threads (the size of
//                                                           this model's larger activations at batch 64)
//   gemm_rate                            frugal             GFLOP/s: a 512 x 512 x 512 f32 GEMM
// KIND is stem (the first convolution: with one input channel a depthwise kernel with 32 filters),
// depthwise (3x3), pointwise (1x1), batch_norm (the projections' BatchNorm), batch_norm_relu6 (a
// BatchNorm and the in-place ReLU6 after it, run as one pass as MobileNetV2 runs them: every
// ReLU6 of the model follows a BatchNorm); DIRECTION is forward,
// backward_input, backward_weight (convolutions), backward, or eval_forward (BatchNorm in eval mode).
//
// The roofline of one kernel is max(bytes / copy_bandwidth, flops / gemm_rate): bytes are the
// tensors it must read and write at least once (inputs, weights and outputs, 4 bytes each), flops
// two per multiply-add. Both rates are measured in the same run with the same threads, so a ratio
// frugal / roofline says how far a kind of layer is from this machine's limits, and the rows show
// which kind to work on next. The layers are read off the model in registration order, which for
// MobileNetV2 is the order they run in.
// Not here: whole steps beside PyTorch (bench/train_bench.cpp), the speed targets (docs/benchmarks.md).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "core/cpu/parallel.h"
#include "core/random.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "models/registry.h"
#include "nn/layers.h"

namespace frugal::bench {

namespace {

struct Sizes {
  std::int64_t batch;
  int min_runs;        // timed runs of each kernel of each layer
  double min_seconds;  // and runs until this long has passed
};
constexpr Sizes kFullSizes{64, 5, 0.02};  // about a minute for both stems on 2 cores
constexpr Sizes kQuickSizes{4, 1, 0.0};
constexpr std::int64_t kSide = 32, kClasses = 10;
constexpr double kBytesPerValue = 4.0;  // f32

// One timed kernel of one layer: its seconds and what it must move and compute.
struct Measured {
  double seconds = 0.0, bytes = 0.0, flops = 0.0;
};

struct Machine {
  double bytes_per_second = 0.0, flops_per_second = 0.0;
  double roofline(const Measured& m) const { return std::max(m.bytes / bytes_per_second, m.flops / flops_per_second); }
};

class Timer {
 public:
  Timer(const Options& options, const Sizes& sizes) : options_(options), sizes_(sizes) {}
  double seconds(const std::function<void()>& fn) const {
    return device_median_seconds(options_.device, fn, sizes_.min_runs, sizes_.min_seconds);
  }

 private:
  const Options& options_;
  const Sizes& sizes_;
};

// Copies `from` into `to`: on the CPU a memcpy per thread over equal slices (frugal's own copy of
// a contiguous tensor is one memcpy, on one thread), elsewhere the device's copy.
void copy_in_parallel(Tensor& to, const Tensor& from) {
  if (!to.device().is_cpu()) {
    to.copy_(from);
    return;
  }
  const auto* src = static_cast<const char*>(from.data_ptr());
  auto* dst = static_cast<char*>(to.data_ptr());
  const auto bytes = static_cast<std::int64_t>(to.nbytes());
  constexpr std::int64_t kSlice = 256 * 1024;  // 32 slices of an 8 MiB copy: work for up to 32 threads
  cpu::parallel_for_chunks(bytes, kSlice, bytes, [&](std::int64_t begin, std::int64_t end) {
    std::memcpy(dst + begin, src + begin, static_cast<std::size_t>(end - begin));
  });
}

// The copy bandwidth (bytes read + written) and OpenBLAS's (cuBLAS's) GEMM rate.
Machine measure_machine(const Options& options, const Timer& timer, bool quick) {
  const std::int64_t values = quick ? (1 << 16) : (2 << 20), side = quick ? 128 : 512;
  const TensorOptions on{.device = options.device};
  const Tensor from = uniform({values}, -1.0, 1.0, on);
  Tensor to = empty({values}, on);
  const double copy = timer.seconds([&] { copy_in_parallel(to, from); });
  const Tensor a = uniform({side, side}, -1.0, 1.0, on), b = uniform({side, side}, -1.0, 1.0, on);
  const Tensor c = empty({side, side}, on);
  const double gemm = timer.seconds([&] { matmul_into(c, a, b); });
  const double flops = 2.0 * static_cast<double>(side * side * side);
  return {2.0 * kBytesPerValue * static_cast<double>(values) / copy, flops / gemm};
}

double values(const Shape& shape) { return static_cast<double>(shape_numel(shape)); }

// The kernels of a convolution's training step (the stem's two), with its multiply-adds.
void time_conv(const nn::Conv2d& conv, const Shape& x_shape, const Timer& timer, const std::string& kind,
               std::map<std::string, Measured>& rows) {
  const Conv2dOptions& o = conv.options();
  const Tensor& w = conv.weight();
  const TensorOptions on{.device = w.device()};
  const Tensor x = uniform(x_shape, -1.0, 1.0, on);
  const Shape y_shape = conv2d_output_shape(x_shape, w.shape(), o);
  const Tensor dy = uniform(y_shape, -1.0, 1.0, on);
  const double macs = values(y_shape) * static_cast<double>(w.size(1) * w.size(2) * w.size(3));
  const double bytes_w = values(w.shape()) * kBytesPerValue, bytes_x = values(x_shape) * kBytesPerValue,
               bytes_y = values(y_shape) * kBytesPerValue;
  auto add = [&](const std::string& direction, double seconds, double bytes) {
    Measured& m = rows[kind + "_" + direction];
    m.seconds += seconds;
    m.bytes += bytes;
    m.flops += 2.0 * macs;
  };
  add("forward", timer.seconds([&] { conv2d(x, w, Tensor(), o); }), bytes_x + bytes_w + bytes_y);
  if (kind != "stem")  // the stem reads the images, which need no gradient: training never runs this
    add("backward_input", timer.seconds([&] { conv2d_backward_input(dy, w, x_shape, o); }), bytes_y + bytes_w + bytes_x);
  add("backward_weight", timer.seconds([&] { conv2d_backward_weight(dy, x, w.shape(), o); }), bytes_y + bytes_x + bytes_w);
}

void add_row(std::map<std::string, Measured>& rows, const std::string& name, double seconds, double bytes) {
  Measured& m = rows[name];
  m.seconds += seconds;
  m.bytes += bytes;
}

// Batch norm's training forward and backward and its eval forward, all bandwidth-bound: the
// least they move is x read and y written (forward), dy and x read and dx written (backward).
// `with_relu6`: the ReLU6 after it runs in the same pass, as MobileNetV2's in-place ReLU6 does
// (models/mobilenet_v2.h), and its backward is given the forward's bias, as nn::functional's is, so
// on the CPU it recomputes the clamp's mask from x rather than read the output where that pays
// (Note [The ReLU6 mask from the input]); the bytes counted are the least: dy and x read, dx written.
void time_batch_norm(const nn::BatchNorm2d& bn, const Shape& shape, bool with_relu6, const Timer& timer,
                     std::map<std::string, Measured>& rows) {
  const TensorOptions on{.device = bn.weight().device()};
  const Tensor x = uniform(shape, -1.0, 1.0, on), dy = uniform(shape, -1.0, 1.0, on);
  const Tensor mean = bn.running_mean().clone(), var = bn.running_var().clone();
  const double bytes = values(shape) * kBytesPerValue;
  const std::string kind = with_relu6 ? "batch_norm_relu6" : "batch_norm";
  BatchNormOutput out;
  add_row(rows, kind + "_forward", timer.seconds([&] {
            out = batch_norm_train(x, bn.weight(), bn.bias(), mean, var, 0.1, 1e-5, with_relu6);
          }),
          2 * bytes);
  const Tensor fused = with_relu6 ? out.output : Tensor();
  add_row(rows, kind + "_backward", timer.seconds([&] {
            batch_norm_backward(dy, x, bn.weight(), out.save_mean, out.save_invstd, true, fused, batch_norm_backend(),
                                bn.bias());
          }),
          3 * bytes);
  add_row(rows, kind + "_eval_forward",
          timer.seconds([&] { batch_norm_eval(x, bn.weight(), bn.bias(), mean, var, 1e-5, with_relu6); }), 2 * bytes);
}

// Every conv and batch norm (with its ReLU6) of one MobileNetV2, timed with its shapes; rows by kind.
std::map<std::string, Measured> time_model(bool cifar_stem, const Options& options, const Sizes& sizes) {
  const auto model = models::make_model("mobilenet_v2", {.num_classes = kClasses, .in_channels = 1, .cifar_stem = cifar_stem});
  model->to(options.device);
  const Timer timer(options, sizes);
  std::map<std::string, Measured> rows;
  Shape shape{sizes.batch, 1, kSide, kSide};  // what the next layer reads
  bool stem = true;
  const auto modules = model->named_modules();
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const nn::Module* module = modules[i].second;
    if (const auto* conv = dynamic_cast<const nn::Conv2d*>(module)) {
      const Shape x_shape{sizes.batch, conv->weight().size(1) * conv->options().groups, shape[2], shape[3]};
      const bool depthwise = conv->options().groups > 1 && conv->weight().size(1) == 1;
      const bool pointwise = conv->weight().size(2) == 1 && conv->weight().size(3) == 1;
      time_conv(*conv, x_shape, timer, stem ? "stem" : depthwise ? "depthwise" : pointwise ? "pointwise" : "conv", rows);
      shape = conv2d_output_shape(x_shape, conv->weight().shape(), conv->options());
      stem = false;
    } else if (const auto* bn = dynamic_cast<const nn::BatchNorm2d*>(module)) {
      // MobileNetV2 runs a BatchNorm2d's ReLU6 in its pass when the ReLU6 is in place, its default.
      const bool relu6_next = i + 1 < modules.size() && dynamic_cast<const nn::ReLU6*>(modules[i + 1].second);
      time_batch_norm(*bn, shape, relu6_next, timer, rows);
      if (relu6_next) ++i;
    }
  }
  return rows;
}

void report_model(const std::string& stem, const std::map<std::string, Measured>& rows, const Machine& machine,
                  std::vector<Result>& results) {
  constexpr double kMs = 1e3;
  double total = 0.0, bound = 0.0;
  for (const auto& [kind, m] : rows) {
    results.push_back({stem + "_" + kind, "frugal", m.seconds * kMs, "ms", false});
    results.push_back({stem + "_" + kind, "roofline", machine.roofline(m) * kMs, "ms", false});
    total += m.seconds;
    bound += machine.roofline(m);
  }
  results.push_back({stem + "_layers", "frugal", total * kMs, "ms", false});
  results.push_back({stem + "_layers", "roofline", bound * kMs, "ms", false});
}

}  // namespace

Report roofline_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  const Timer timer(options, sizes);
  const Machine machine = measure_machine(options, timer, options.quick);
  std::vector<Result> results = {{"copy_bandwidth", "frugal", machine.bytes_per_second / 1e9, "GB/s", true},
                                 {"gemm_rate", "frugal", machine.flops_per_second / 1e9, "GFLOP/s", true}};
  report_model("standard", time_model(false, options, sizes), machine, results);
  report_model("cifar", time_model(true, options, sizes), machine, results);
  return Report(std::move(results));
}

}  // namespace frugal::bench
