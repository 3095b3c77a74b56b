// Sample 19: saved activations offloaded to host memory (nn/activation_offload.h, --offload activations).
//   1. MobileNetV2 (1x32x32 inputs, batch 64) with AdamW, trained a few steps three ways: everything
//      on the device, the saved activations in pinned host memory, and the optimizer's state there
//      too (--offload optimizer,activations): the planner's predicted device peak (train/planner.h),
//      the measured one, the activation-tagged bytes on the device at their most, the pinned host
//      memory planned and measured, the step time, and whether the weights afterwards are the same
//      bits (they must be: offloading copies bytes, it computes nothing).
//   2. A simulated device between the first two runs' needs: the run that keeps its activations on the
//      device runs out of memory, the offloaded one trains.
// Random images and labels (this is about memory, not accuracy), so it needs no dataset. The step is
// the trainer's (train/step.h) with the recipe `frugal train` makes (train/recipe.h), so what is
// measured here is what `frugal train --offload activations` does.
// On cuda:0 when a GPU is usable, else on the CPU, where the device is the simulated one and the
// pinned host memory is outside its books: the saving shows on any machine.
// Checked (samples/checks.h; the sample exits 1 when one is false): the weights bit-identical; on the
// CPU the planned device peak and host bytes equal to the measured ones; on either, fewer activation
// bytes and a lower peak on the device when offloaded, and under the limit the run on the device out
// of memory while the offloaded one trains.
#include <cstdio>
#include <string>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "kernels/cpu_runtime.h"
#include "train/planner.h"
#include "samples/arguments.h"
#include "samples/checks.h"
#include "samples/random_steps.h"

using namespace frugal;

namespace {

constexpr std::int64_t kClasses = 10;
constexpr std::int64_t kInChannels = 1;
constexpr std::uint64_t kSeed = 19;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// `steps` optimizer steps of `o` on one random batch, from the same weights every time.
samples::MeasuredSteps train_steps(const train::TrainOptions& o, std::int64_t steps) {
  return samples::measure_random_steps(o, kInChannels, kClasses, steps, kSeed);
}

struct Way {
  const char* name;
  bool activations, optimizer;  // offloaded
};
constexpr Way kWays[] = {{"on the device", false, false}, {"activations", true, false}, {"both", true, true}};

train::TrainOptions offloaded(train::TrainOptions o, const Way& way) {
  o.offload_activations = way.activations;
  o.offload_optimizer = way.optimizer;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const auto steps = samples::steps_argument(argc, argv, "19_offload_activations", 2, 1000, 3);
  if (!steps) return 2;
  std::printf("Sample 19: saved activations offloaded to host memory (nn/activation_offload.h), planned and measured\n\n");
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.batch_size = 64;
  o.workers = 0;  // no loader here: the planner counts one batch, the one trained on
  o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  const train::PlanShape shape{.in_channels = kInChannels, .num_classes = kClasses};
  samples::Checks checks;

  // 1. The three ways side by side.
  std::printf("%s, batch %lld of %lldx%lldx%lld, AdamW, %lld steps on %s (offloaded: what is in pinned host memory):\n",
              o.model.c_str(), static_cast<long long>(o.batch_size), static_cast<long long>(kInChannels),
              static_cast<long long>(o.image_size), static_cast<long long>(o.image_size), static_cast<long long>(*steps),
              o.device.str().c_str());
  std::printf("   %-14s %15s %14s %18s %14s %14s %9s\n", "offloaded", "predicted peak", "measured peak",
              "device activations", "host planned", "host measured", "step");
  samples::MeasuredSteps runs[std::size(kWays)];
  train::MemoryPlan plans[std::size(kWays)];
  for (std::size_t w = 0; w < std::size(kWays); ++w) {
    const train::TrainOptions run = offloaded(o, kWays[w]);
    plans[w] = train::plan_memory(run, shape);
    runs[w] = train_steps(run, *steps);
    const samples::MeasuredSteps& m = runs[w];
    std::printf("   %-14s %11.2f MiB %10.2f MiB %14.2f MiB %10.2f MiB %10.2f MiB %6.0f ms\n", kWays[w].name,
                mib(plans[w].peak_bytes), mib(m.peak_bytes), mib(m.tag(MemoryTag::activation)), mib(plans[w].host_bytes),
                mib(m.host_bytes), 1000 * m.step_seconds);
    if (o.device.is_cpu()) {
      checks.expect(plans[w].peak_bytes == m.peak_bytes, std::string(kWays[w].name) + ": the planner predicts the device peak to the byte");
      checks.expect(plans[w].host_bytes == m.host_bytes, std::string(kWays[w].name) + ": the planner predicts the pinned host bytes to the byte");
    }
    checks.expect(m.weights == runs[0].weights, std::string(kWays[w].name) + ": the weights are the on-device run's, bit for bit");
  }
  std::printf("   activations offloaded: %.2f MiB less device peak, %.2f MiB fewer activation bytes, %.0f%% longer step\n\n",
              mib(runs[0].peak_bytes - runs[1].peak_bytes),
              mib(runs[0].tag(MemoryTag::activation) - runs[1].tag(MemoryTag::activation)),
              100 * (runs[1].step_seconds / runs[0].step_seconds - 1));
  checks.expect(runs[1].tag(MemoryTag::activation) < runs[0].tag(MemoryTag::activation),
                "fewer activation bytes on the device when offloaded");
  checks.expect(runs[1].peak_bytes < runs[0].peak_bytes && runs[2].peak_bytes < runs[1].peak_bytes,
                "a lower device peak with each offload");

  // 2. A device between the two needs: the activations kept on the device do not fit, offloaded they do.
  const std::int64_t on_device = plans[0].device_needed_bytes, offloaded_needs = plans[1].device_needed_bytes;
  const std::int64_t limit = (on_device + offloaded_needs) / 2;
  std::printf("a simulated device of %.2f MiB (%s needs %.2f MiB with its activations on it, %.2f MiB offloaded):\n",
              mib(limit), o.model.c_str(), mib(on_device), mib(offloaded_needs));
  set_memory_limit(o.device, static_cast<std::size_t>(limit));
  bool on_device_failed = false;
  try {
    train_steps(o, *steps);
  } catch (const OutOfMemoryError&) {
    on_device_failed = true;
  }
  std::printf("   on the device: %s\n", on_device_failed ? "out of memory, as planned" : "trained (not as planned)");
  checks.expect(on_device_failed, "the activations kept on the device run out of memory under the limit");
  const samples::MeasuredSteps fitted = train_steps(offloaded(o, kWays[1]), *steps);
  set_memory_limit(o.device, kUnlimited);
  std::printf("   on the host:   trained %lld steps, device peak %.2f MiB allocated\n", static_cast<long long>(*steps),
              mib(fitted.peak_bytes));
  return checks.exit_code("19_offload_activations");
}
