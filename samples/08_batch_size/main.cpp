// Sample 08: the first classic fix for running out of memory, a smaller batch, found automatically.
//   1. A training step's peak memory is a straight line in the batch size: a fixed part (parameters,
//      gradients, optimizer state) plus activations per sample. The planner (train/planner.h)
//      predicts each peak on the meta device; the caching allocator measures it in a real run.
//   2. Under a memory limit, the batch finder (train/batch_finder.h, `frugal train --batch-size
//      auto`) takes the planner's largest batch that fits and confirms it with two trial steps; the
//      run trains there, and a batch a quarter larger runs out of memory.
//   3. Gradient accumulation keeps the effective batch: one batch of 64 against 4 accumulated
//      micro-batches of 16, with the gradients compared and the activation peaks measured.
// MobileNetV2 (1x32x32 inputs, 10 classes) on Fashion-MNIST; it needs Debian's dataset-fashion-mnist
// (it says so and exits 0 when missing). On cuda:0 when a GPU is usable, else on the CPU, where the
// memory limit is a simulated device of that size.
// Checked (samples/checks.h; the sample exits 1 when one is false): on the CPU, the planner's peaks
// within 1% of the measured ones and the measured peaks on a line within 1%; a batch a quarter
// larger than the finder's out of memory (an OOM at the finder's own ends the sample with exit 1);
// accumulation keeping a quarter of the activations, with gradients equal to f32 rounding when
// BatchNorm is in eval mode, and a different function in train mode.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "data/idx.h"
#include "kernels/cpu_runtime.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/batch_finder.h"
#include "train/planner.h"
#include "train/trainer.h"
#include "samples/checks.h"

using namespace frugal;
namespace F = frugal::functional;

namespace {

// About 150 samples of MobileNetV2 at 32x32: more than the default batch of 64, far less than a GPU's.
constexpr std::size_t kLimit = std::size_t{192} << 20;
constexpr std::int64_t kGlobalBatch = 64, kMicroBatches = 4;
// How close the planner's peak and the line through the measured peaks must come. The planner runs
// the very step on the meta device, so on the CPU it is within a fraction of a percent; on a GPU
// cuDNN's and cuBLAS's own workspaces are beyond its sight (train/planner.h), so there it is not judged.
constexpr double kPlanAccuracy = 0.01;
// Gradients of one function summed in another order (5.8e-7 measured), relative to each tensor's largest value.
constexpr double kRounding = 1e-4;

double mib(double bytes) { return bytes / (1 << 20); }

train::TrainOptions two_steps(Device device) {
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.steps = 2;  // the first step makes AdamW's state; the second is what every later step looks like
  o.evaluate = false;
  o.leak_check = false;
  o.device = device;
  return o;
}

// 1. Planned and measured peaks over batch sizes, and the line through the measured ones.
void peak_against_batch(Device device, const train::PlanShape& shape, samples::Checks& checks) {
  std::printf("1. Peak memory against the batch size (MobileNetV2, AdamW, two training steps each)\n");
  std::printf("   %6s %14s %14s %16s %14s\n", "batch", "planned peak", "measured peak", "measured/planned", "activations");
  std::vector<double> batches, peaks;
  for (const std::int64_t batch : {8, 16, 32, 64}) {
    train::TrainOptions o = two_steps(device);
    o.batch_size = batch;
    const train::MemoryPlan plan = train::plan_memory(o, shape);
    const train::TrainResult r = train::train(o);
    std::printf("   %6lld %10.2f MiB %10.2f MiB %16.4f %10.2f MiB\n", static_cast<long long>(batch), mib(plan.peak_bytes),
                mib(r.peak_allocated_bytes), static_cast<double>(r.peak_allocated_bytes) / static_cast<double>(plan.peak_bytes),
                mib(r.peak_bytes_by_tag[static_cast<int>(MemoryTag::activation)]));
    batches.push_back(static_cast<double>(batch));
    peaks.push_back(static_cast<double>(r.peak_allocated_bytes));
    if (device.is_cpu())
      checks.expect(std::abs(static_cast<double>(r.peak_allocated_bytes) / static_cast<double>(plan.peak_bytes) - 1) <= kPlanAccuracy,
                    "the planner predicts batch " + std::to_string(batch) + "'s peak within 1%");
  }
  // Least squares: peak = fixed + per_sample x batch.
  const double n = static_cast<double>(batches.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    sx += batches[i];
    sy += peaks[i];
    sxx += batches[i] * batches[i];
    sxy += batches[i] * peaks[i];
  }
  const double per_sample = (n * sxy - sx * sy) / (n * sxx - sx * sx), fixed = (sy - per_sample * sx) / n;
  double worst = 0;
  for (std::size_t i = 0; i < batches.size(); ++i) worst = std::max(worst, std::abs(fixed + per_sample * batches[i] - peaks[i]) / peaks[i]);
  std::printf("   measured peak = %.2f MiB + %.3f MiB per sample (the line misses no point by more than %.2f%%)\n\n", mib(fixed),
              mib(per_sample), 100 * worst);
  if (device.is_cpu()) checks.expect(worst <= kPlanAccuracy, "the peak is a line in the batch size, within 1%");
}

// 2. The batch finder under a limit, the run at its batch, and a larger batch that does not fit.
void auto_batch(Device device, const train::RunShape& shape, samples::Checks& checks) {
  std::printf("2. --batch-size auto under a %.0f MiB limit (%s)\n", mib(kLimit),
              device.is_cuda() ? "the GPU capped by the caching allocator" : "a simulated device on the CPU");
  train::TrainOptions o = two_steps(device);
  o.memory_limit = kLimit;
  const train::BatchChoice choice = train::find_batch_size(o, shape);
  std::printf("%s", train::describe(choice).c_str());
  o.batch_size = choice.batch_size;
  const train::TrainResult r = train::train(o);
  std::printf("   trained 2 steps at batch %lld: peak %.2f MiB allocated, %.2f MiB reserved, under the %.0f MiB limit\n",
              static_cast<long long>(choice.batch_size), mib(r.peak_allocated_bytes), mib(r.peak_reserved_bytes), mib(kLimit));
  o.batch_size = choice.batch_size + choice.batch_size / 4;
  const train::MemoryPlan over = train::plan_memory(o, shape.plan);
  try {
    train::train(o);
    std::printf("   batch %lld also trained: the limit was not reached\n", static_cast<long long>(o.batch_size));
    checks.expect(false, "a batch a quarter larger than the finder's runs out of memory");
    std::printf("\n");
  } catch (const OutOfMemoryError&) {
    std::printf("   batch %lld: out of memory, as planned (it needs a %.2f MiB device)\n\n", static_cast<long long>(o.batch_size),
                mib(over.device_needed_bytes));
  }
  set_memory_limit(device, kUnlimited);
}

struct Gradients {
  std::vector<Tensor> values;
  std::int64_t activation_peak = 0;
};

// The gradient of the mean loss over `images`, taken in `micro_batches` accumulated pieces.
Gradients gradients(nn::Module& model, const Tensor& images, const Tensor& labels, std::int64_t micro_batches) {
  CachingAllocator& allocator = default_caching_allocator(images.device());
  model.zero_grad();
  allocator.reset_peak_stats();
  const std::int64_t micro = images.size(0) / micro_batches;
  for (std::int64_t m = 0; m < micro_batches; ++m) {
    const Tensor loss = F::cross_entropy(model(images.narrow(0, m * micro, micro)), labels.narrow(0, m * micro, micro));
    autograd::backward(F::mul(loss, 1.0 / static_cast<double>(micro_batches)));  // each piece's share of the mean
  }
  Gradients g{{}, allocator.stats().tag_bytes[static_cast<int>(MemoryTag::activation)].peak};
  for (const Tensor& p : model.parameters()) g.values.push_back(autograd::grad(p).to(Device::cpu()).clone());
  return g;
}

// The largest difference between two sets of gradients, relative to each tensor's largest magnitude.
double largest_difference(const Gradients& a, const Gradients& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    const auto x = a.values[i].to_vector<double>(), y = b.values[i].to_vector<double>();
    double scale = 0, difference = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      scale = std::max(scale, std::abs(x[k]));
      difference = std::max(difference, std::abs(x[k] - y[k]));
    }
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}

// 3. One batch of 64 against 4 accumulated micro-batches of 16.
void accumulation(Device device, samples::Checks& checks) {
  std::printf("3. Gradient accumulation: one batch of %lld against %lld micro-batches of %lld\n", static_cast<long long>(kGlobalBatch),
              static_cast<long long>(kMicroBatches), static_cast<long long>(kGlobalBatch / kMicroBatches));
  manual_seed(8);
  const std::shared_ptr<nn::Module> model = models::make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1});
  model->to(device);
  const Tensor images = normal({kGlobalBatch, 1, 32, 32}, 0.0, 1.0, {.device = device});
  const Tensor labels = randint(0, 10, {kGlobalBatch}, {.dtype = DType::i64, .device = device});
  for (const bool training : {false, true}) {
    training ? model->train() : model->eval();
    const Gradients whole = gradients(*model, images, labels, 1), pieces = gradients(*model, images, labels, kMicroBatches);
    const double less = static_cast<double>(whole.activation_peak) / static_cast<double>(pieces.activation_peak);
    const double difference = largest_difference(whole, pieces);
    const std::string mode = training ? "train" : "eval";
    std::printf("   BatchNorm in %-5s mode: activations %7.2f MiB -> %6.2f MiB (%.1fx less); largest relative gradient difference %.1e\n",
                mode.c_str(), mib(whole.activation_peak), mib(pieces.activation_peak), less, difference);
    checks.expect(less >= 3.5, mode + " mode: 4 micro-batches keep about a quarter of the activations");
    if (training)
      checks.expect(difference > kRounding, "train mode: micro-batches normalised by their own statistics compute another function");
    else
      checks.expect(difference <= kRounding, "eval mode: the accumulated gradients equal the whole batch's to f32 rounding");
  }
  std::printf("   (in eval mode BatchNorm normalises with its running statistics, so both compute one function and differ\n"
              "   by f32 rounding; in train mode each micro-batch is normalised by its own statistics, a different function)\n");
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::printf("Sample 08: a smaller batch, found automatically\n\n");
  if (!std::filesystem::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::printf("MobileNetV2 on Fashion-MNIST (1x32x32, 10 classes), on %s\n\n", device.str().c_str());
  const train::RunShape shape = train::run_shape(two_steps(device));
  try {
    samples::Checks checks;
    peak_against_batch(device, shape.plan, checks);
    auto_batch(device, shape, checks);
    accumulation(device, checks);
    return checks.exit_code("08_batch_size");
  } catch (const Error& error) {
    std::fprintf(stderr, "08_batch_size: %s\n", error.what());
    return 1;
  }
}
