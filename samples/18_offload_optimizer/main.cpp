// Sample 18: the optimizer offloaded to host memory (nn/optimizer_offload.h, --offload optimizer).
//   1. ResNet-18 (3x32x32 inputs, batch 8) with AdamW, trained a few steps with the optimizer on the
//      device and offloaded: the planner's predicted device peak (train/planner.h), the measured one,
//      the optimizer-tagged bytes on the device, the pinned host memory planned and measured, the
//      step time, and whether the weights afterwards are the same bits (on the CPU they must be: the
//      host runs the same CPU AdamW).
//   2. A simulated device between the two runs' needs: the in-place run runs out of memory, the
//      offloaded one trains.
// Random images and labels (this is about memory, not accuracy), so it needs no dataset. The step is
// the trainer's (train/step.h) with the recipe `frugal train` makes (train/recipe.h), so what is
// measured here is what `frugal train --offload optimizer` does.
// On cuda:0 when a GPU is usable, else on the CPU, where the device is the simulated one and the
// pinned host memory is outside its books: the saving shows on any machine.
// Checked (samples/checks.h; the sample exits 1 when one is false): on the CPU the weights
// bit-identical and the planned device peak and host bytes equal to the measured ones; on either, no
// optimizer bytes on the device when offloaded, a lower device peak, and under the limit the in-place
// run out of memory while the offloaded one trains.
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
constexpr std::int64_t kInChannels = 3;
constexpr std::uint64_t kSeed = 18;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// `steps` optimizer steps of `o` on one random batch, from the same weights every time.
samples::MeasuredSteps train_steps(const train::TrainOptions& o, std::int64_t steps) {
  return samples::measure_random_steps(o, kInChannels, kClasses, steps, kSeed);
}

train::TrainOptions offloaded(train::TrainOptions o) {
  o.offload_optimizer = true;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const auto steps = samples::steps_argument(argc, argv, "18_offload_optimizer", 2, 1000, 3);
  if (!steps) return 2;
  std::printf("Sample 18: the optimizer offloaded to host memory (nn/optimizer_offload.h), planned and measured\n\n");
  train::TrainOptions o;
  o.model = "resnet18";
  o.batch_size = 8;
  o.workers = 0;  // no loader here: the planner counts one batch, the one trained on
  o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  const train::PlanShape shape{.in_channels = kInChannels, .num_classes = kClasses};
  samples::Checks checks;

  // 1. Both ways side by side.
  std::printf("%s, batch %lld of %lldx%lldx%lld, AdamW, %lld steps on %s:\n", o.model.c_str(),
              static_cast<long long>(o.batch_size), static_cast<long long>(kInChannels),
              static_cast<long long>(o.image_size), static_cast<long long>(o.image_size), static_cast<long long>(*steps),
              o.device.str().c_str());
  std::printf("   %-13s %15s %14s %17s %14s %14s %9s\n", "optimizer", "predicted peak", "measured peak", "device optimizer",
              "host planned", "host measured", "step");
  samples::MeasuredSteps runs[2];
  train::MemoryPlan plans[2];
  for (const bool offload : {false, true}) {
    const train::TrainOptions run = offload ? offloaded(o) : o;
    plans[offload] = train::plan_memory(run, shape);
    const samples::MeasuredSteps m = train_steps(run, *steps);
    std::printf("   %-13s %11.2f MiB %10.2f MiB %13.2f MiB %10.2f MiB %10.2f MiB %6.0f ms\n", offload ? "on the host" : "on the device",
                mib(plans[offload].peak_bytes), mib(m.peak_bytes), mib(m.tag(MemoryTag::optimizer)), mib(plans[offload].host_bytes),
                mib(m.host_bytes), 1000 * m.step_seconds);
    if (o.device.is_cpu()) {
      const std::string which = offload ? "offloaded" : "in place";
      checks.expect(plans[offload].peak_bytes == m.peak_bytes, which + ": the planner predicts the device peak to the byte");
      checks.expect(plans[offload].host_bytes == m.host_bytes, which + ": the planner predicts the pinned host bytes to the byte");
    }
    runs[offload] = m;
  }
  const bool same = runs[0].weights == runs[1].weights;
  std::printf("   saved on the device: %.2f MiB of the peak; the host holds %.2f MiB; weights after both: %s\n\n",
              mib(runs[0].peak_bytes - runs[1].peak_bytes), mib(runs[1].host_bytes), same ? "bit-identical" : "different");
  if (o.device.is_cpu()) checks.expect(same, "on the CPU the offloaded step gives the in-place step's weights, bit for bit");
  checks.expect(runs[1].tag(MemoryTag::optimizer) == 0, "no optimizer bytes on the device when offloaded");
  checks.expect(runs[1].peak_bytes < runs[0].peak_bytes, "a lower device peak when offloaded");

  // 2. A device between the two needs: the in-place optimizer does not fit, the offloaded one does.
  const std::int64_t in_place = plans[0].device_needed_bytes, offloaded_needs = plans[1].device_needed_bytes;
  const std::int64_t limit = (in_place + offloaded_needs) / 2;
  std::printf("a simulated device of %.2f MiB (%s needs %.2f MiB with the optimizer on it, %.2f MiB offloaded):\n", mib(limit),
              o.model.c_str(), mib(in_place), mib(offloaded_needs));
  set_memory_limit(o.device, static_cast<std::size_t>(limit));
  bool in_place_failed = false;
  try {
    train_steps(o, *steps);
  } catch (const OutOfMemoryError&) {
    in_place_failed = true;
  }
  std::printf("   on the device: %s\n", in_place_failed ? "out of memory, as planned" : "trained (not as planned)");
  checks.expect(in_place_failed, "the in-place optimizer runs out of memory under the limit");
  const samples::MeasuredSteps fitted = train_steps(offloaded(o), *steps);
  set_memory_limit(o.device, kUnlimited);
  std::printf("   on the host:   trained %lld steps, device peak %.2f MiB allocated\n", static_cast<long long>(*steps),
              mib(fitted.peak_bytes));
  return checks.exit_code("18_offload_optimizer");
}
