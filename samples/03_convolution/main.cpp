// Sample 03: where a convolution's time and scratch memory go, measured.
//   1. The three native paths on MobileNetV2-style layers: a 1x1 convolution is a plain GEMM on the
//      input (no scratch), a depthwise one a direct kernel (no scratch), a dense 3x3 im2col + GEMM
//      with one sample's column matrix borrowed from the allocator.
//   2. The im2col lesson: that column matrix is KH*KW times the input; frugal builds it one sample
//      at a time, and the allocator's `workspace` tag shows what that saves against the whole batch.
//   3. Memory-bound against compute-bound: the depthwise layer does 1/28 of the dense layer's
//      arithmetic but is far from 1/28 of its time.
//   4. On a GPU: native kernels against cuDNN, and cuDNN's algorithm and workspace under a limit.
// Runs on cuda:0 when a GPU is usable, otherwise on the CPU (part 4 then says why it is skipped).
// Parts 1 to 3 check what they show (samples/checks.h): the native path each layer takes and the
// scratch it borrows (when the device runs the native convolution: cuDNN, a GPU's default, chooses
// its own), and that the depthwise layer computes at a lower rate than the dense one. The sample
// exits 1 when one is false.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/conv.h"
#include "kernels/cpu_runtime.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

// Median-free but honest: one warm-up call, then the mean of `runs` calls, waiting for the GPU.
double seconds(Device device, const std::function<void()>& fn, int runs = 3) {
  fn();
  if (device.is_cuda()) cuda_synchronize(device.index());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) fn();
  if (device.is_cuda()) cuda_synchronize(device.index());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / runs;
}

struct Layer {
  const char* name;
  Shape x, w;
  Conv2dOptions options;
  const char* native_path;  // the path frugal's native convolution must take
};

// The bytes of one sample's im2col matrix: one row per (input channel, tap), one column per output pixel.
std::size_t column_bytes(const Shape& x, const Shape& w, const Conv2dOptions& options) {
  const Shape y = conv2d_output_shape(x, w, options);
  return static_cast<std::size_t>(w[1] * w[2] * w[3] * y[2] * y[3]) * sizeof(float);
}

std::int64_t workspace_peak(Device device) {
  return allocator_for(device).stats().tag_bytes[static_cast<int>(MemoryTag::workspace)].peak;
}

void three_paths(Device device, std::int64_t batch, samples::Checks& checks) {
  std::printf("1. Three paths, batch %lld at 56x56 on %s\n", static_cast<long long>(batch), device.str().c_str());
  const Layer layers[] = {
      {"1x1 expand 24->144", {batch, 24, 56, 56}, {144, 24, 1, 1}, {}, "1x1 gemm"},
      {"3x3 depthwise 144", {batch, 144, 56, 56}, {144, 1, 3, 3}, {.padding = {1, 1}, .groups = 144}, "depthwise"},
      {"3x3 dense 64->64", {batch, 64, 56, 56}, {64, 64, 3, 3}, {.padding = {1, 1}}, "im2col+gemm"},
  };
  std::printf("   %-20s %-12s %10s %10s %12s\n", "layer", "path", "ms", "GFLOP/s", "workspace");
  for (const Layer& layer : layers) {
    const Tensor x = uniform(layer.x, -1.0, 1.0, {.device = device}), w = uniform(layer.w, -1.0, 1.0, {.device = device});
    const double s = seconds(device, [&] { conv2d(x, w, Tensor(), layer.options); });
    const ConvDecision decision = last_conv2d_decision();
    const Shape y = conv2d_output_shape(layer.x, layer.w, layer.options);
    const double flops = 2.0 * static_cast<double>(shape_numel(y) * layer.w[1] * layer.w[2] * layer.w[3]);
    std::printf("   %-20s %-12s %10.2f %10.1f %12s\n", layer.name, decision.algorithm.c_str(), s * 1e3, flops / s / 1e9,
                format_size(decision.workspace_bytes).c_str());
    if (decision.impl != ConvImpl::native) continue;  // cuDNN picks its own algorithm and workspace
    const bool columns = std::string_view(layer.native_path) == "im2col+gemm";
    checks.expect(decision.algorithm == layer.native_path, std::string(layer.name) + " takes the " + layer.native_path + " path");
    checks.expect(decision.workspace_bytes == (columns ? column_bytes(layer.x, layer.w, layer.options) : 0),
                  std::string(layer.name) + (columns ? " borrows one sample's column matrix" : " borrows no scratch"));
  }
  std::printf("\n");
}

void im2col_lesson(Device device, std::int64_t batch, samples::Checks& checks) {
  std::printf("2. im2col's scratch: one sample at a time, not the whole batch\n");
  const Shape xs{batch, 64, 56, 56}, ws{64, 64, 3, 3};
  const Tensor x = uniform(xs, -1.0, 1.0, {.device = device}), w = uniform(ws, -1.0, 1.0, {.device = device});
  allocator_for(device).reset_peak_stats();
  const std::int64_t before = workspace_peak(device);
  const Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  const std::size_t per_sample = static_cast<std::size_t>(workspace_peak(device) - before);
  if (last_conv2d_decision().impl == ConvImpl::native)
    checks.expect(per_sample == column_bytes(xs, ws, {.padding = {1, 1}}),
                  "the workspace tag's peak is one sample's column matrix, whatever the batch");
  std::printf("   input %s (%s): the column matrix of one sample is [64*3*3, 56*56] = %s\n", shape_str(xs).c_str(),
              format_size(x.nbytes()).c_str(), format_size(per_sample).c_str());
  std::printf("   peak bytes under the tag 'workspace' during the call: %s; for the whole batch at once it would\n"
              "   be %s, %.0fx the input itself\n\n",
              format_size(per_sample).c_str(), format_size(per_sample * static_cast<std::size_t>(batch)).c_str(),
              static_cast<double>(per_sample) * static_cast<double>(batch) / static_cast<double>(x.nbytes()));
}

void memory_bound(Device device, std::int64_t batch, samples::Checks& checks) {
  std::printf("3. Depthwise is memory-bound\n");
  const Tensor xd = uniform({batch, 144, 56, 56}, -1.0, 1.0, {.device = device});
  const Tensor wd = uniform({144, 1, 3, 3}, -1.0, 1.0, {.device = device});
  const Tensor x = uniform({batch, 64, 56, 56}, -1.0, 1.0, {.device = device});
  const Tensor w = uniform({64, 64, 3, 3}, -1.0, 1.0, {.device = device});
  const double depthwise_s = seconds(device, [&] { conv2d(xd, wd, Tensor(), {.padding = {1, 1}, .groups = 144}); });
  const double dense_s = seconds(device, [&] { conv2d(x, w, Tensor(), {.padding = {1, 1}}); });
  const double depthwise_flops = 2.0 * static_cast<double>(xd.numel()) * 9, dense_flops = 2.0 * static_cast<double>(x.numel()) * 64 * 9;
  std::printf("   depthwise 144ch: %.1f MFLOP in %.2f ms, %.1f GB/s of input + output\n", depthwise_flops / 1e6,
              depthwise_s * 1e3, 2.0 * static_cast<double>(xd.nbytes()) / depthwise_s / 1e9);
  std::printf("   dense 64->64:    %.1f MFLOP in %.2f ms\n", dense_flops / 1e6, dense_s * 1e3);
  std::printf("   %.0fx fewer flops, but only %.1fx less time: the depthwise layer waits on memory\n\n",
              dense_flops / depthwise_flops, dense_s / depthwise_s);
  // Timings on a shared CPU vary by tens of percent; the claim is an order of magnitude (3.7x against 28x).
  checks.expect(dense_s / depthwise_s < dense_flops / depthwise_flops,
                "the depthwise layer computes fewer flops per second than the dense one");
}

void native_against_cudnn(Device device, std::int64_t batch) {
  std::printf("4. Native kernels against cuDNN, and cuDNN under a workspace limit\n");
  if (!device.is_cuda()) {
    std::printf("   skipped: %s\n", cuda_status().reason.c_str());
    return;
  }
  const Tensor x = uniform({batch, 64, 56, 56}, -1.0, 1.0, {.device = device});
  const Tensor w = uniform({64, 64, 3, 3}, -1.0, 1.0, {.device = device});
  const Conv2dOptions same{.padding = {1, 1}};
  const ConvImpl previous_impl = conv_impl(DeviceType::CUDA);
  const std::size_t previous_limit = conv_workspace_limit();
  for (ConvImpl impl : {ConvImpl::native, ConvImpl::cudnn}) {
    set_conv_impl(DeviceType::CUDA, impl);
    const double s = seconds(device, [&] { conv2d(x, w, Tensor(), same); });
    std::printf("   %-7s %8.3f ms  (%s, workspace %s)\n", std::string(conv_impl_name(impl)).c_str(), s * 1e3,
                last_conv2d_decision().algorithm.c_str(), format_size(last_conv2d_decision().workspace_bytes).c_str());
  }
  for (std::size_t limit : {previous_limit, std::size_t{1} << 20, std::size_t{0}}) {
    set_conv_workspace_limit(limit);
    const double s = seconds(device, [&] { conv2d(x, w, Tensor(), same); });
    std::printf("   cudnn, limit %-10s %8.3f ms  (%s, workspace %s)\n",
                limit == previous_limit ? "none" : format_size(limit).c_str(), s * 1e3,
                last_conv2d_decision().algorithm.c_str(), format_size(last_conv2d_decision().workspace_bytes).c_str());
  }
  set_conv_workspace_limit(previous_limit);
  set_conv_impl(DeviceType::CUDA, previous_impl);
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  try {
    const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
    const std::int64_t batch = device.is_cuda() ? 64 : 8;  // the CPU gets a batch it finishes in seconds
    samples::Checks checks;
    three_paths(device, batch, checks);
    im2col_lesson(device, batch, checks);
    memory_bound(device, batch, checks);
    native_against_cudnn(device, batch);
    return checks.exit_code("03_convolution");
  } catch (const Error& error) {
    std::fprintf(stderr, "03_convolution: %s\n", error.what());
    return 1;
  }
}
