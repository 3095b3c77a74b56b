// Sample 16: the optimizer step fused into backward (nn/optimizer_in_backward.h, --optimizer-in-backward).
//   1. ResNet-18 (3x32x32 inputs, batch 8) and MobileNetV2 (1x32x32, batch 64), each with AdamW, trained
//      a few steps the ordinary way and with every update run inside backward: the planner's predicted
//      peak (train/planner.h), the measured peak, the most gradient bytes alive at once (the allocator's
//      grad tag), the step time, and whether the weights afterwards are the same bits (they must be).
//   2. A simulated device between the two runs' needs: the ordinary run runs out of memory, the fused
//      one trains.
// Random images and labels (this is about memory, not accuracy), so it needs no dataset. The step is
// the trainer's (train/step.h) with the recipe `frugal train` makes (train/recipe.h), so what is
// measured here is what `frugal train --optimizer-in-backward` does.
// On cuda:0 when a GPU is usable, else on the CPU.
// Checked (samples/checks.h; the sample exits 1 when one is false): the weights bit-identical, fewer
// gradient bytes alive and a lower peak with the fused step, on the CPU the planned peaks equal to the
// measured ones (a GPU's library workspaces are beyond the planner's sight), and under the limit the
// ordinary run out of memory while the fused one trains.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "kernels/cpu_runtime.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "samples/arguments.h"
#include "samples/checks.h"
#include "samples/random_steps.h"

using namespace frugal;

namespace {

constexpr std::int64_t kClasses = 10;
constexpr std::uint64_t kSeed = 16;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// `steps` optimizer steps of `o` on one random batch, from the same weights every time.
samples::MeasuredSteps train_steps(const train::TrainOptions& o, std::int64_t in_channels, std::int64_t steps) {
  return samples::measure_random_steps(o, in_channels, kClasses, steps, kSeed);
}

train::TrainOptions fused(train::TrainOptions o) {
  o.optimizer_in_backward = true;
  return o;
}

// Part 1 for one model: both ways side by side, checked.
void compare(const train::TrainOptions& o, std::int64_t in_channels, std::int64_t steps, samples::Checks& checks) {
  const train::PlanShape shape{.in_channels = in_channels, .num_classes = kClasses};
  std::printf("%s, batch %lld of %lldx%lldx%lld, AdamW, %lld steps on %s:\n", o.model.c_str(),
              static_cast<long long>(o.batch_size), static_cast<long long>(in_channels),
              static_cast<long long>(o.image_size), static_cast<long long>(o.image_size), static_cast<long long>(steps),
              o.device.str().c_str());
  std::printf("   %-20s %15s %14s %14s %9s\n", "optimizer step", "predicted peak", "measured peak", "gradients", "step");
  samples::MeasuredSteps runs[2];
  for (const bool in_backward : {false, true}) {
    const train::TrainOptions run = in_backward ? fused(o) : o;
    const std::int64_t predicted = train::plan_memory(run, shape).peak_bytes;
    const samples::MeasuredSteps m = train_steps(run, in_channels, steps);
    std::printf("   %-20s %11.2f MiB %10.2f MiB %10.2f MiB %6.0f ms\n", in_backward ? "inside backward" : "after backward",
                mib(predicted), mib(m.peak_bytes), mib(m.tag(MemoryTag::grad)), 1000 * m.step_seconds);
    if (o.device.is_cpu())
      checks.expect(predicted == m.peak_bytes, o.model + (in_backward ? " fused" : " ordinary") +
                                                   ": the planner predicts the peak to the byte");
    runs[in_backward] = m;
  }
  const bool same = runs[0].weights == runs[1].weights;
  std::printf("   saved: %.2f MiB of the peak, %.2f MiB of gradients alive at once; weights after both: %s\n\n",
              mib(runs[0].peak_bytes - runs[1].peak_bytes), mib(runs[0].tag(MemoryTag::grad) - runs[1].tag(MemoryTag::grad)),
              same ? "bit-identical" : "DIFFERENT");
  checks.expect(same, o.model + ": the fused step gives the ordinary step's weights, bit for bit");
  checks.expect(runs[1].tag(MemoryTag::grad) < runs[0].tag(MemoryTag::grad), o.model + ": fewer gradient bytes alive with the fused step");
  checks.expect(runs[1].peak_bytes < runs[0].peak_bytes, o.model + ": a lower peak with the fused step");
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const auto steps = samples::steps_argument(argc, argv, "16_optimizer_in_backward", 2, 1000, 3);
  if (!steps) return 2;
  std::printf("Sample 16: the optimizer step inside backward (nn/optimizer_in_backward.h), planned and measured\n\n");
  train::TrainOptions resnet;
  resnet.model = "resnet18";
  resnet.batch_size = 8;
  resnet.workers = 0;  // no loader here: the planner counts one batch, the one trained on
  resnet.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  train::TrainOptions mobilenet = resnet;
  mobilenet.model = "mobilenet_v2";
  mobilenet.batch_size = 64;
  samples::Checks checks;
  compare(resnet, 3, *steps, checks);
  compare(mobilenet, 1, *steps, checks);

  // 2. A device between the two needs: the ordinary step does not fit, the fused one does.
  const train::PlanShape shape{.in_channels = 3, .num_classes = kClasses};
  const std::int64_t ordinary = train::plan_memory(resnet, shape).device_needed_bytes;
  const std::int64_t inside = train::plan_memory(fused(resnet), shape).device_needed_bytes;
  const std::int64_t limit = (ordinary + inside) / 2;
  std::printf("a simulated device of %.2f MiB (ResNet-18 needs %.2f MiB the ordinary way, %.2f MiB fused):\n", mib(limit),
              mib(ordinary), mib(inside));
  set_memory_limit(resnet.device, static_cast<std::size_t>(limit));
  bool ordinary_failed = false;
  try {
    train_steps(resnet, 3, *steps);
  } catch (const OutOfMemoryError&) {
    ordinary_failed = true;
  }
  std::printf("   after backward:  %s\n", ordinary_failed ? "out of memory, as planned" : "trained (not as planned)");
  checks.expect(ordinary_failed, "the ordinary step runs out of memory under the limit");
  const samples::MeasuredSteps fitted = train_steps(fused(resnet), 3, *steps);
  set_memory_limit(resnet.device, kUnlimited);
  std::printf("   inside backward: trained %lld steps, peak %.2f MiB allocated\n", static_cast<long long>(*steps),
              mib(fitted.peak_bytes));
  return checks.exit_code("16_optimizer_in_backward");
}
