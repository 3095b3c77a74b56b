// `frugal bench ops`: what the kernels cost, frugal's hand-written implementations beside the
// libraries, in one run.
//   gemm_1024   C = A B for 1024 x 1024 f32 matrices, GFLOP/s   CPU: blocked vs openblas;  GPU: naive, tiled,
//               register_blocked vs cublas
//   relu_16M    relu of 16M f32 elements, GB/s read + written
//   sum_16M     sum of 16M f32 elements, GB/s read
//   cross_entropy_4096x1000   fused cross-entropy forward + backward of f32 logits, GB/s of logits read
//   max_pool_3x3s2   max pool 3x3 stride 2 of [32, 64, 112, 112] f32, GB/s read + written
//   conv3x3_64ch_56x56, depthwise3x3_144ch_56x56   convolutions, GFLOP/s and GB/s   CPU: native;
//               GPU: native vs cudnn, and the depthwise kernel's fraction of DRAM bandwidth
//   pointwise_weight_grad_144to24_32x32   the weight gradient of a 1x1 convolution, the CIFAR-stem
//               MobileNetV2's 144 -> 24 projection at batch 64 on 32x32 maps, GFLOP/s
//               CPU: native (dot products along the pixels) vs openblas_gathered (one GEMM over
//               operands already laid out as matrices, their copies not timed); GPU: native, cudnn
//   dropout_64x1280   dropout (p 0.2) of MobileNetV2's classifier input, f32, GB/s read + written
//               CPU: frugal (Philox in vector lanes where the CPU has AVX-512) vs one_block (the
//               reference loop, a block of four elements at a time); GPU: frugal
//   batch_norm   training forward of [32, 96, 56, 56] f32, GB/s of x read twice + y written   CPU: frugal;
//               GPU: native vs cudnn
// Targets (docs/benchmarks.md): blocked >= 0.5x openblas on 2 threads; the best hand-written CUDA
// kernel (register_blocked) >= 0.6x cublas.
#include "bench/bench.h"
#include "core/cpu/parallel.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/dropout.h"
#include "kernels/dropout_backends.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/loss.h"
#include "kernels/pool.h"
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
  return device_median_seconds(options.device, fn, sizes.min_runs, sizes.min_seconds);
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
                              : std::vector<std::pair<GemmImpl, const char*>>{{GemmImpl::register_blocked, "register_blocked"},
                                                                               {GemmImpl::tiled, "tiled"},
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

// Fused cross-entropy, forward then backward, on ImageNet-sized logits (4096 rows of 1000 classes,
// f32): GB/s of logits read, counting one read per direction (the backward reads them twice and
// writes the gradient, so the memory traffic is higher than reported). On a GPU each direction
// also waits once for its bad-target flag (kernels/cuda/loss.cu).
void softmax_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const std::int64_t rows = options.quick ? 64 : 4096, classes = options.quick ? 100 : 1000;
  const TensorOptions on{.device = options.device};
  const Tensor logits = uniform({rows, classes}, -4.0, 4.0, on);
  const Tensor targets = randint(0, classes, {rows}, {.dtype = DType::i64, .device = options.device});
  const Tensor grad = ones({}, on);
  const double bytes = 2.0 * static_cast<double>(rows * classes) * sizeof(float);
  const double s = seconds(options, sizes, [&] {
    cross_entropy(logits, targets);
    cross_entropy_backward(grad, logits, targets);
  });
  results.push_back({"cross_entropy_" + std::to_string(rows) + "x" + std::to_string(classes), "frugal", bytes / s / 1e9, "GB/s", true});
}

// The convolutions that dominate MobileNetV2 and ResNet: a dense 3x3 (compute-bound, GFLOP/s) and a
// depthwise 3x3 (memory-bound, GB/s of input read + output written), by each implementation of the
// device. On a GPU the depthwise case also reports the native kernel's fraction of the device's
// theoretical DRAM bandwidth (target: >= 0.6).
void conv_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const std::int64_t batch = options.quick ? 2 : 32, side = options.quick ? 8 : 56;
  const std::int64_t dense_channels = options.quick ? 8 : 64, depthwise_channels = options.quick ? 8 : 144;
  const TensorOptions on{.device = options.device};
  const DeviceType type = options.device.type();
  const std::vector<ConvImpl> impls =
      type == DeviceType::CPU ? std::vector<ConvImpl>{ConvImpl::native} : std::vector<ConvImpl>{ConvImpl::native, ConvImpl::cudnn};
  const ConvImpl previous = conv_impl(type);
  const std::string px = std::to_string(side) + "x" + std::to_string(side);

  const Tensor x = uniform({batch, dense_channels, side, side}, -1.0, 1.0, on);
  const Tensor w = uniform({dense_channels, dense_channels, 3, 3}, -1.0, 1.0, on);
  const double flops = 2.0 * static_cast<double>(batch * dense_channels * side * side * dense_channels * 9);
  const Tensor xd = uniform({batch, depthwise_channels, side, side}, -1.0, 1.0, on);
  const Tensor wd = uniform({depthwise_channels, 1, 3, 3}, -1.0, 1.0, on);
  const double bytes = 2.0 * static_cast<double>(xd.nbytes());
  const Conv2dOptions same{.padding = {1, 1}};
  const Conv2dOptions depthwise{.padding = {1, 1}, .groups = depthwise_channels};
  double native_bytes_per_s = 0.0;
  for (ConvImpl impl : impls) {
    set_conv_impl(type, impl);
    const std::string name(conv_impl_name(impl));
    const double dense_s = seconds(options, sizes, [&] { conv2d(x, w, Tensor(), same); });
    results.push_back({"conv3x3_" + std::to_string(dense_channels) + "ch_" + px, name, flops / dense_s / 1e9, "GFLOP/s", true});
    const double depthwise_s = seconds(options, sizes, [&] { conv2d(xd, wd, Tensor(), depthwise); });
    if (impl == ConvImpl::native) native_bytes_per_s = bytes / depthwise_s;
    results.push_back({"depthwise3x3_" + std::to_string(depthwise_channels) + "ch_" + px, name, bytes / depthwise_s / 1e9,
                       "GB/s", true});
  }
  set_conv_impl(type, previous);
  if (options.device.is_cuda()) {
    const double peak = cuda_device_info(options.device.index()).peak_bandwidth_bytes_per_s;
    results.push_back({"depthwise3x3_" + std::to_string(depthwise_channels) + "ch_" + px, "native_fraction_of_peak",
                       native_bytes_per_s / peak, "fraction", true});
  }
}

// ResNet's stem pooling: max pool 3x3, stride 2, padding 1 over [32, 64, 112, 112] f32, GB/s of
// input read + output written (the i64 indices it also writes, twice the output's bytes, are not counted).
void pool_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const Shape shape = options.quick ? Shape{2, 4, 16, 16} : Shape{32, 64, 112, 112};
  const Tensor x = uniform(shape, -1.0, 1.0, {.device = options.device});
  const Pool2dOptions stem{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const double bytes = static_cast<double>(x.nbytes() + max_pool2d(x, stem).output.nbytes());
  const double s = seconds(options, sizes, [&] { max_pool2d(x, stem); });
  results.push_back({"max_pool_3x3s2", "frugal", bytes / s / 1e9, "GB/s", true});
}

// The weight gradient of a 1x1 convolution where MobileNetV2's CIFAR stem spends most on it: the
// 144 -> 24 projection on 32x32 maps, batch 64 (X 36 MiB), dW = sum over samples of dY[n] X[n]^T.
// GFLOP/s of conv2d_backward_weight by each implementation of the device (on the CPU the dot
// products along the pixels, Note [The 1x1 weight gradient as dot products] in
// kernels/cpu/pointwise_weight_grad.cpp) and, on the CPU, of the one GEMM a library would need, dY
// [24, N * P] times X^T [N * P, 144] (a transposed view of X gathered as [144, N * P]), on operands
// gathered beforehand: the GEMM's time alone, without the copies that gather them. Quick: 8x8 maps,
// the smallest that take the dot products (kDotPlane in kernels/conv.cpp).
void pointwise_weight_grad_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const std::int64_t batch = options.quick ? 2 : 64, side = options.quick ? 8 : 32;
  const std::int64_t in_channels = options.quick ? 24 : 144, out_channels = options.quick ? 16 : 24;
  const std::string name = "pointwise_weight_grad_" + std::to_string(in_channels) + "to" +
                           std::to_string(out_channels) + "_" + std::to_string(side) + "x" + std::to_string(side);
  const TensorOptions on{.device = options.device};
  const Tensor x = uniform({batch, in_channels, side, side}, -1.0, 1.0, on);
  const Tensor grad_y = uniform({batch, out_channels, side, side}, -1.0, 1.0, on);
  const Shape weight_shape{out_channels, in_channels, 1, 1};
  const double flops = 2.0 * static_cast<double>(batch * side * side * in_channels * out_channels);
  const DeviceType type = options.device.type();
  const ConvImpl previous_conv = conv_impl(type);
  for (ConvImpl impl : type == DeviceType::CPU ? std::vector<ConvImpl>{ConvImpl::native}
                                               : std::vector<ConvImpl>{ConvImpl::native, ConvImpl::cudnn}) {
    set_conv_impl(type, impl);
    const double s = seconds(options, sizes, [&] { conv2d_backward_weight(grad_y, x, weight_shape); });
    results.push_back({name, std::string(conv_impl_name(impl)), flops / s / 1e9, "GFLOP/s", true});
  }
  set_conv_impl(type, previous_conv);
  if (type != DeviceType::CPU) return;
  const auto as_matrix = [&](const Tensor& t, std::int64_t channels) {  // [N, C, P] -> [C, N * P]
    return t.view({batch, channels, side * side}).permute({1, 0, 2}).contiguous().view({channels, batch * side * side});
  };
  const Tensor dy_matrix = as_matrix(grad_y, out_channels), x_matrix = as_matrix(x, in_channels);
  const GemmImpl previous_gemm = gemm_impl(DeviceType::CPU);
  set_gemm_impl(DeviceType::CPU, GemmImpl::library);
  const double gemm = seconds(options, sizes, [&] { matmul(dy_matrix, x_matrix.t()); });
  set_gemm_impl(DeviceType::CPU, previous_gemm);
  results.push_back({name, "openblas_gathered", flops / gemm / 1e9, "GFLOP/s", true});
}

// Dropout as MobileNetV2's classifier runs it (p 0.2 on [64, 1280] f32), forward only (the backward is
// the same kernel on the gradient): GB/s of input read + output written. On the CPU the kernel into
// a preallocated output, and beside it the reference loop, one Philox block of four elements at a
// time through dropout_block (Note [Philox in vector lanes], kernels/cpu/dropout.cpp), shared among
// the threads as the kernel shares its groups; on a GPU the op, dropout().
void dropout_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const Shape shape = options.quick ? Shape{4, 80} : Shape{64, 1280};
  const std::string name = "dropout_" + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
  constexpr double kP = 0.2;  // torchvision's MobileNetV2 classifier
  const Tensor x = uniform(shape, -1.0, 1.0, {.device = options.device});
  const double bytes = 2.0 * static_cast<double>(x.nbytes());
  if (!options.device.is_cpu()) {
    Generator generator(3);
    const double s = seconds(options, sizes, [&] { dropout(x, kP, true, &generator); });
    return results.push_back({name, "frugal", bytes / s / 1e9, "GB/s", true});
  }
  const DropoutSpec spec{.keep = {.distribution = Distribution::bernoulli, .a = 1.0 - kP, .seed = 3, .offset = 0},
                         .scale = 1.0 / (1.0 - kP)};
  const float* in = static_cast<const float*>(x.data_ptr());
  const Tensor out = empty(shape);
  float* to = static_cast<float*>(out.data_ptr());
  const std::int64_t numel = x.numel();
  const double kernel = seconds(options, sizes, [&] { cpu::dropout_apply(DType::f32, in, to, numel, spec); });
  results.push_back({name, "frugal", bytes / kernel / 1e9, "GB/s", true});
  const double reference = seconds(options, sizes, [&] {
    cpu::parallel_for(philox_blocks_for(numel), numel,
                      [&](std::int64_t block) { dropout_block<float, float>(in, to, numel, spec, block); });
  });
  results.push_back({name, "one_block", bytes / reference / 1e9, "GB/s", true});
}

// Batch norm's training forward, as a MobileNetV2 block runs it (f32, running statistics tracked):
// GB/s counting x read twice (statistics, then normalisation) and y written once, by each
// implementation of the device.
void batch_norm_cases(const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  const Shape shape = options.quick ? Shape{2, 3, 5, 5} : Shape{32, 96, 56, 56};
  const TensorOptions on{.device = options.device};
  const Tensor x = uniform(shape, -1.0, 1.0, on), weight = ones({shape[1]}, on), bias = zeros({shape[1]}, on);
  const Tensor running_mean = zeros({shape[1]}, on), running_var = ones({shape[1]}, on);
  const double bytes = 3.0 * static_cast<double>(x.numel()) * sizeof(float);
  const BatchNormImpl previous = batch_norm_impl();  // the CUDA choice; the CPU has one implementation
  const std::vector<std::pair<BatchNormImpl, const char*>> impls =
      options.device.is_cuda()
          ? std::vector<std::pair<BatchNormImpl, const char*>>{{BatchNormImpl::native, "native"}, {BatchNormImpl::cudnn, "cudnn"}}
          : std::vector<std::pair<BatchNormImpl, const char*>>{{previous, "frugal"}};
  for (const auto& [impl, label] : impls) {
    set_batch_norm_impl(impl);
    const double s = seconds(options, sizes, [&] { batch_norm_train(x, weight, bias, running_mean, running_var, 0.1, 1e-5); });
    results.push_back({"batch_norm", label, bytes / s / 1e9, "GB/s", true});
  }
  set_batch_norm_impl(previous);
}

}  // namespace

std::vector<Result> ops_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  std::vector<Result> results;
  gemm_cases(options, sizes, results);
  memory_cases(options, sizes, results);
  softmax_cases(options, sizes, results);
  conv_cases(options, sizes, results);
  pool_cases(options, sizes, results);
  pointwise_weight_grad_cases(options, sizes, results);
  dropout_cases(options, sizes, results);
  batch_norm_cases(options, sizes, results);
  return results;
}

}  // namespace frugal::bench
