// Sample 09: checkpointing a chosen set of blocks, memory against recompute.
//   1. MobileNetV2 (1x32x32 inputs, 10 classes) trained for a few steps with no block checkpointed,
//      with blocks 1-k for a few k, and with all 17 (models/block_selection.h numbers them: block i
//      is features.i): the planner's predicted peak (train/planner.h), the measured peak and the
//      activations' peak (the allocator's books), the step time, the recompute overhead against no
//      checkpointing, and whether the gradients are bit-identical to it (they must be).
//   2. A simulated device too small for no checkpointing: the planner's fewest first blocks that fit,
//      the run without them running out of memory, and the run with them training.
// Random images and labels (this is about memory and time, not accuracy), so it needs no dataset.
// The step is the trainer's (train/trainer.cpp): forward, cross-entropy, backward, AdamW; the planner
// runs the very same step on the meta device, which is why the two peaks can agree to the byte.
// On cuda:0 when a GPU is usable, else on the CPU.
// Checked (samples/checks.h; the sample exits 1 when one is false): the gradients bit-identical for
// every selection, on the CPU the planned peak equal to the measured one (a GPU's cuDNN and cuBLAS
// workspaces are beyond the planner's sight), and under the limit the plain run out of memory while
// the planner's blocks fit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/cpu_runtime.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "train/step.h"
#include "train/trainer.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

constexpr int kSteps = 4;  // the first makes AdamW's moments; the later ones are every step after (timed)
constexpr std::int64_t kBatch = 32, kClasses = 10;
constexpr std::uint64_t kSeed = 9;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

struct Measured {
  std::int64_t peak_bytes = 0;        // allocated, beyond what was allocated before the run
  std::int64_t activation_bytes = 0;  // the most bytes tagged activation alive at once
  double step_seconds = 0;            // the fastest step after the first
  std::vector<std::vector<float>> grads;  // of the last step, per parameter
};

// kSteps optimizer steps of `o` on one random batch, from the same weights and dropout draws every time.
Measured train_steps(const train::TrainOptions& o) {
  CachingAllocator& allocator = default_caching_allocator(o.device);
  allocator.reset_peak_stats();
  const std::int64_t before = allocator.caching_stats().allocated_bytes.current;
  manual_seed(kSeed);  // the initial weights and the dropout masks
  const auto model = models::make_model(o.model, train::model_options(o, 1, kClasses));
  model->to(o.device);
  model->train();
  const auto optimizer = train::make_optimizer(*model, o);
  Generator data(kSeed + 1);
  const Tensor images = normal({kBatch, 1, o.image_size, o.image_size}, 0.0, 1.0, {}, &data).to(o.device);
  const Tensor labels = randint(0, kClasses, {kBatch}, {.dtype = DType::i64}, &data).to(o.device);
  Measured m;
  m.step_seconds = 1e9;
  for (int step = 0; step < kSteps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    // The trainer's step (train/step.h); the last one's gradients are kept as backward leaves them.
    const train::StepHooks hooks{.next_batch = [&] { return data::Batch{images, labels, {}}; },
                                 .on_phase = [&](train::StepPhase phase, bool begin, std::int64_t) {
                                   if (phase != train::StepPhase::backward || begin || step != kSteps - 1) return;
                                   for (const Tensor& p : model->parameters())
                                     m.grads.push_back(autograd::grad(p).to(Device::cpu()).to_vector<float>());
                                 }};
    train::optimizer_step({.model = *model, .optimizer = optimizer.get()}, train::step_recipe(o), 1, kBatch, hooks);
    if (o.device.is_cuda()) cuda_synchronize(o.device.index());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) m.step_seconds = std::min(m.step_seconds, seconds);
  }
  m.peak_bytes = allocator.caching_stats().allocated_bytes.peak - before;
  m.activation_bytes = allocator.stats().tag_bytes[static_cast<int>(MemoryTag::activation)].peak;
  return m;
}

train::TrainOptions with_blocks(train::TrainOptions o, const models::BlockSelection& blocks) {
  o.checkpoint_blocks = blocks;
  return o;
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::printf("Sample 09: checkpointing a chosen set of blocks (models/block_selection.h), planned and measured\n\n");
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.batch_size = kBatch;
  o.workers = 0;  // no loader here: the planner counts one batch, the one trained on
  o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  const std::vector<std::string>& blocks = models::block_names(o.model);
  std::printf("MobileNetV2 on random 1x32x32 images, 10 classes, batch %lld, AdamW, on %s; blocks 1-%zu are %s .. %s\n\n",
              static_cast<long long>(kBatch), o.device.str().c_str(), blocks.size(), blocks.front().c_str(),
              blocks.back().c_str());

  std::printf("   %-10s %15s %14s %12s %11s %9s %8s  %s\n", "checkpoint", "predicted peak", "measured peak", "activations",
              "recomputed", "step", "vs none", "gradients against none");
  const Measured none = train_steps(o);
  samples::Checks checks;
  for (const auto& selection : {models::BlockSelection(), models::BlockSelection::first(4), models::BlockSelection::first(8),
                                models::BlockSelection::first(12), models::BlockSelection::all()}) {
    const train::TrainOptions run = with_blocks(o, selection);
    const std::int64_t predicted = train::plan_memory(run).peak_bytes;
    const Measured m = selection.empty() ? none : train_steps(run);
    const bool same = m.grads == none.grads;
    const auto recomputed = static_cast<double>(selection.count(static_cast<std::int64_t>(blocks.size()))) /
                            static_cast<double>(blocks.size());
    std::printf("   %-10s %11.2f MiB %10.2f MiB %8.2f MiB %10.0f%% %6.0f ms %+7.0f%%  %s\n", selection.str().c_str(),
                mib(predicted), mib(m.peak_bytes), mib(m.activation_bytes), 100 * recomputed, 1000 * m.step_seconds,
                100 * (m.step_seconds / none.step_seconds - 1), same ? "bit-identical" : "DIFFERENT");
    checks.expect(same, "checkpointing " + selection.str() + " gives the gradients of no checkpointing, bit for bit");
    if (o.device.is_cpu())
      checks.expect(predicted == m.peak_bytes, "the planner predicts the peak with " + selection.str() + " to the byte");
  }
  std::printf("   (recomputed: the share of the blocks run twice, the planner's measure of the cost; vs none: the\n"
              "   fastest of %d steps against no checkpointing, which on a shared CPU varies by 10%% or more)\n\n",
              kSteps - 1);

  // 2. A device between the two: the plain run does not fit, checkpointing every block does.
  const std::int64_t plain = train::plan_memory(o).peak_reserved_bytes;
  const std::int64_t all = train::plan_memory(with_blocks(o, models::BlockSelection::all())).peak_reserved_bytes;
  const std::int64_t limit = (plain + all) / 2;
  const std::optional<std::int64_t> k = train::smallest_checkpoint_prefix(o, limit);
  std::printf("a simulated device of %.2f MiB (the plan needs %.2f MiB reserved with no block checkpointed, %.2f MiB with all):\n",
              mib(limit), mib(plain), mib(all));
  if (!checks.expect(k.has_value(), "the planner finds first blocks that fit between the two peaks"))
    return checks.exit_code("09_checkpointing");
  std::printf("   the planner's fewest first blocks that fit: --checkpoint-blocks 1-%lld\n", static_cast<long long>(*k));
  set_memory_limit(o.device, static_cast<std::size_t>(limit));
  bool plain_failed = false;
  try {
    train_steps(o);
  } catch (const OutOfMemoryError&) {
    plain_failed = true;
  }
  std::printf("   no block checkpointed: %s\n", plain_failed ? "out of memory, as planned" : "trained (not as planned)");
  checks.expect(plain_failed, "with no block checkpointed the run runs out of memory under the limit");
  const Measured fitted = train_steps(with_blocks(o, models::BlockSelection::first(*k)));
  set_memory_limit(o.device, kUnlimited);
  std::printf("   blocks 1-%lld: trained %d steps, peak %.2f MiB allocated; gradients %s\n", static_cast<long long>(*k), kSteps,
              mib(fitted.peak_bytes), fitted.grads == none.grads ? "bit-identical to the plain run's" : "DIFFERENT");
  checks.expect(fitted.grads == none.grads, "the run that fits gives the plain run's gradients, bit for bit");
  return checks.exit_code("09_checkpointing");
}
