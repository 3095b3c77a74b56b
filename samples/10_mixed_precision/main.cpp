// Sample 10: mixed precision, what it saves and what it costs. MobileNetV2 on Fashion-MNIST (1x32x32,
// 10 classes) trained three ways from the same weights on the same batches:
//   f32   every op in 4-byte floats;
//   f16   autocast to f16 (nn/amp.h) with dynamic loss scaling (nn/grad_scaler.h), which f16's
//         narrow range needs: small gradients would round to 0;
//   bf16  autocast to bf16: f32's range in 2 bytes, so no scaler.
// Per mode: the planner's prediction (train/planner.h) beside the caching allocator's measurement of
// the peak and of the activations the forward keeps for backward, images/s, the training loss and the
// test accuracy after a short run; for f16 the scaler's scale and how many steps it skipped.
// The loop is written out (not train::train) so that the scaler is in view. Needs Debian's
// dataset-fashion-mnist (says so and exits when missing); runs on cuda:0 when a GPU is usable.
//   10_mixed_precision [STEPS]   (default 60 steps of 16 images per mode)
// Checked (samples/checks.h; the sample exits 1 when one is false): on the CPU, each mode's peak
// within 1% of the plan once two steps were taken, and its activations 0 to 2% above the plan (the
// residual additions no layer made); 16-bit modes keep fewer activation bytes than f32, and f16 and
// bf16 the same; the scaler halved its scale once per skipped step; from kDefaultSteps steps on,
// every mode learns (its training loss falls below chance's).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "data/dataset_ops.h"
#include "data/idx.h"
#include "data/loader.h"
#include "kernels/cpu_runtime.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "train/step.h"
#include "train/trainer.h"
#include "samples/arguments.h"
#include "samples/checks.h"

using namespace frugal;
namespace fs = std::filesystem;

namespace {

// Short on a CPU: 60 steps of 16 images (960 training images, a 60th of an epoch). The test accuracy
// is measured on the first kTestImages images of the test split, and after so few steps it says
// little: evaluation uses BatchNorm's running statistics, which do not yet describe the batches the
// layers were trained on (MobileNetV2's last blocks see 1x1 feature maps on 32x32 inputs, so each of
// their batch statistics is over 16 numbers). Measured: 10-43% per mode, moving with the rounding
// of a single kernel. So whether a mode learns is read from the training loss instead: the mean of
// its last kLossSteps steps kLearnedMargin below chance's (ln 10: every class equally likely) and
// below its first kLossSteps steps'.
constexpr std::int64_t kBatch = 16, kDefaultSteps = 60, kTestImages = 400;
// AdamW at a constant rate. frugal train's default peak rate (1e-2) made the first steps' loss jump
// to 4.5-4.8 and left bf16's last steps above chance's loss in one build; at 2e-3 every mode's loss
// fell to 1.6-1.9 (2026-12-06).
constexpr double kLearningRate = 2e-3;
constexpr std::int64_t kLossSteps = 10;  // steps averaged at each end of the run (or all of a shorter run)
const double kChanceLoss = std::log(10.0);
// How far below chance's loss a mode must end: a mode that does not learn wanders around ln 10 with
// each batch; the modes that learn ended 0.4-0.7 below it.
constexpr double kLearnedMargin = 0.2;
// The f16 scaler's: PyTorch's defaults. The scale doubles only after kGrowthInterval good steps in a row.
constexpr double kInitialScale = 65536.0;
constexpr std::int64_t kGrowthInterval = 2000;

struct Mode {
  const char* name;
  std::optional<DType> amp;  // nullopt: f32
};

struct Measured {
  train::MemoryPlan plan;
  std::int64_t peak_bytes = 0;        // allocated (block sizes) above what was allocated before the model
  std::int64_t activation_bytes = 0;  // activation-tagged bytes alive when the forward ends
  double images_per_sec = 0.0;        // from the second step on (the first makes the optimizer's state)
  double test_accuracy = 0.0;
  double first_loss = 0.0, last_loss = 0.0;  // mean training loss of the first and the last kLossSteps steps
  double scale_before = 0.0, scale_after = 0.0;
  std::vector<std::int64_t> skipped;  // the steps the scaler skipped
};

train::TrainOptions options_for(const Mode& mode, Device device) {
  train::TrainOptions o;  // mobilenet_v2, AdamW with weight decay on weights, 32x32 images
  o.batch_size = kBatch;
  o.lr = kLearningRate;
  o.workers = 0;  // batches are loaded in the training thread: one batch alive, as planned
  o.amp = mode.amp;
  o.device = device;
  return o;
}

std::int64_t saved_by_layers(const train::MemoryPlan& plan) {
  std::int64_t bytes = 0;
  for (const train::LayerPlan& layer : plan.layers) bytes += layer.saved_bytes;
  return bytes;
}

std::int64_t activation_now(Device device) {
  return default_caching_allocator(device).stats().tag_bytes[static_cast<int>(MemoryTag::activation)].current;
}

Measured run(const Mode& mode, Device device, const train::RunData& data, std::int64_t steps) {
  const train::TrainOptions o = options_for(mode, device);
  Measured m;
  m.plan = train::plan_memory(o, {.in_channels = 1, .num_classes = 10});

  CachingAllocator& allocator = default_caching_allocator(device);
  allocator.empty_cache();
  const std::int64_t baseline = allocator.caching_stats().allocated_bytes.current;
  allocator.reset_peak_stats();
  manual_seed(o.seed);  // the same initial weights in every mode
  const auto model = models::make_model(o.model, train::model_options(o, 1, 10));
  model->to(device);
  model->train();
  const auto optimizer = train::make_optimizer(*model, o);
  // f16 only; a disabled scaler passes everything through, so the loop is the same for every mode.
  nn::GradScaler scaler(kInitialScale, 2.0, 0.5, kGrowthInterval, /*enabled=*/mode.amp == DType::f16);
  m.scale_before = scaler.get_scale();
  data::DataLoader loader(data.splits.train, {.batch_size = kBatch, .shuffle = true, .transforms = data.train_transforms,
                                              .device = device, .seed = o.seed});
  loader.start_epoch(0);

  auto timed_from = std::chrono::steady_clock::now();
  // The trainer's step (train/step.h) under autocast: the loss times the scale in backward, the
  // gradients unscaled before the update, which is skipped when one overflowed.
  for (std::int64_t step = 1; step <= steps; ++step) {
    if (step == 2) timed_from = std::chrono::steady_clock::now();
    std::int64_t activations_before = 0;
    const train::StepHooks hooks{.next_batch = [&] { return *loader.next(); },
                                 .on_phase = [&](train::StepPhase phase, bool begin, std::int64_t) {
                                   if (phase != train::StepPhase::forward || step != 2) return;  // the step the plan records
                                   if (begin) activations_before = activation_now(device);
                                   else m.activation_bytes = activation_now(device) - activations_before;
                                 }};
    const train::StepParts parts{.model = *model, .optimizer = optimizer.get(), .scaler = &scaler};
    const train::StepResult result = train::optimizer_step(parts, train::step_recipe(o), 1, kBatch, hooks);
    if (!result.updated) m.skipped.push_back(step);
    const double loss = result.totals.loss_sum / result.totals.samples;
    const double averaged = static_cast<double>(std::min(kLossSteps, steps));
    if (step <= kLossSteps) m.first_loss += loss / averaged;
    if (step > steps - kLossSteps) m.last_loss += loss / averaged;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_from).count();
  m.images_per_sec = static_cast<double>((steps - 1) * kBatch) / seconds;
  m.peak_bytes = allocator.caching_stats().allocated_bytes.peak - baseline;
  m.scale_after = scaler.get_scale();

  std::vector<std::int64_t> first(static_cast<std::size_t>(kTestImages));
  std::iota(first.begin(), first.end(), 0);
  std::optional<nn::AutocastGuard> autocast;  // the test pass runs in the precision it trained in
  if (mode.amp) autocast.emplace(*mode.amp);
  m.test_accuracy = train::evaluate(*model, std::make_shared<data::Subset>(data.splits.test, first), data.test_transforms,
                                    kBatch, device, 0, 10)
                        .accuracy;
  return m;
}

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

double percent_off(std::int64_t measured, std::int64_t predicted) {
  return predicted ? 100.0 * static_cast<double>(measured - predicted) / static_cast<double>(predicted) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  // From 2: the first step is not timed.
  const std::optional<std::int64_t> steps = samples::steps_argument(argc, argv, "10_mixed_precision", 2, 100000, kDefaultSteps);
  if (!steps) return 2;
  std::printf("Sample 10: mixed precision (nn/amp.h, nn/grad_scaler.h), predicted and measured\n\n");
  if (!fs::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  try {
    const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
    std::printf("MobileNetV2 on Fashion-MNIST (1x32x32, 10 classes), AdamW lr %g, %lld steps of %lld images, on %s (%s allocator)\n",
                kLearningRate, static_cast<long long>(*steps), static_cast<long long>(kBatch), device.str().c_str(),
                std::string(default_caching_allocator(device).name()).c_str());
    std::printf("test accuracy on the first %lld test images; chance is 10%%\n\n", static_cast<long long>(kTestImages));
    const train::RunData data = train::open_run_data("", "", 32, false);

    const Mode modes[] = {{"f32", std::nullopt}, {"f16+scaler", DType::f16}, {"bf16", DType::bf16}};
    std::printf("%-11s %-24s %-24s %9s %9s\n", "", "peak allocated", "activations after forward", "", "test");
    std::printf("%-11s %11s %12s %11s %12s %9s %9s\n", "mode", "predicted", "measured", "predicted", "measured", "img/s",
                "accuracy");
    samples::Checks checks;
    std::optional<Measured> f32, f16;
    double f32_speed = 0.0;
    for (const Mode& mode : modes) {
      const Measured m = run(mode, device, data, *steps);
      const std::int64_t saved = saved_by_layers(m.plan);
      std::printf("%-11s %11s %12s %11s %12s %9.1f %8.1f%%\n", mode.name, mib(m.plan.peak_bytes).c_str(),
                  mib(m.peak_bytes).c_str(), mib(saved).c_str(), mib(m.activation_bytes).c_str(), m.images_per_sec,
                  100.0 * m.test_accuracy);
      std::printf("%-11s %11s %+11.2f%% %11s %+11.2f%% %8.2fx\n", "", "", percent_off(m.peak_bytes, m.plan.peak_bytes), "",
                  percent_off(m.activation_bytes, saved), f32_speed > 0 ? m.images_per_sec / f32_speed : 1.0);
      if (!mode.amp) f32_speed = m.images_per_sec;
      if (!mode.amp) f32 = m;
      if (mode.amp == DType::f16) f16 = m;
      const std::string name = mode.name;
      // The planner's steps all update (the first makes AdamW's state); a run whose scaler skipped all
      // but one update has no second step to compare with. A GPU's library workspaces are beyond the planner's sight.
      if (device.is_cpu() && *steps - static_cast<std::int64_t>(m.skipped.size()) >= 2)
        checks.expect(std::abs(percent_off(m.peak_bytes, m.plan.peak_bytes)) <= 1.0, name + ": the peak is the plan's, within 1%");
      if (device.is_cpu()) {
        const double off = percent_off(m.activation_bytes, saved);
        checks.expect(off >= 0.0 && off <= 2.0, name + ": the activations are the layers' planned ones plus the residual sums");
      }
      if (mode.amp)
        checks.expect(m.activation_bytes < f32->activation_bytes, name + " keeps fewer activation bytes than f32");
      if (mode.amp == DType::bf16)
        checks.expect(m.activation_bytes == f16->activation_bytes, "bf16 keeps the bytes f16 keeps: both are 2 bytes wide");
      std::printf("%-11s training loss %.3f -> %.3f (mean of the first and the last %lld steps)\n", "", m.first_loss,
                  m.last_loss, static_cast<long long>(kLossSteps));
      if (*steps >= kDefaultSteps)
        checks.expect(m.last_loss < kChanceLoss - kLearnedMargin && m.last_loss < m.first_loss,
                      name + " learns: its last steps' training loss 0.2 below chance's and below its first steps'");
    }
    std::printf("(second line: measured against predicted, and speed against f32)\n");
    if (!device.is_cuda())
      std::printf("(on the CPU, 16-bit matrix products are widened to f32 and run in frugal's own blocked GEMM,\n"
                  " not OpenBLAS's, and every autocast op converts in software: 16 bits save memory here, not time)\n");
    std::printf("\n");
    std::printf("f16's GradScaler: scale %g at the start, %g after %lld steps; %zu skipped (a gradient not finite):",
                f16->scale_before, f16->scale_after, static_cast<long long>(*steps), f16->skipped.size());
    for (const std::int64_t step : f16->skipped) std::printf(" %lld", static_cast<long long>(step));
    std::printf("\n");
    // Before kGrowthInterval good steps in a row, each skip halves the scale and nothing else moves it.
    if (*steps < kGrowthInterval)
      checks.expect(f16->scale_after == f16->scale_before * std::pow(0.5, static_cast<double>(f16->skipped.size())),
                    "the scaler halved its scale once per skipped step");
    return checks.exit_code("10_mixed_precision");
  } catch (const Error& error) {
    std::fprintf(stderr, "10_mixed_precision: %s\n", error.what());
    return 1;
  }
}
