// train/step_memory.h: one training step (train/step.h), measured by the allocator's tags at its phases' ends.
#include "train/step_memory.h"

#include "core/allocator_registry.h"
#include "nn/autograd.h"
#include "train/step.h"

namespace frugal::train {

namespace {

std::int64_t tag_now(const Allocator& allocator, MemoryTag tag) {
  return allocator.stats().tag_bytes[static_cast<int>(tag)].current;
}

}  // namespace

StepMemory training_step(nn::Module& model, nn::Optimizer& optimizer, const Tensor& images, const Tensor& labels,
                         const StepRecipe& recipe) {
  Allocator& allocator = allocator_for(images.device());
  allocator.reset_peak_stats();
  StepMemory m;
  std::int64_t activations_before = 0;
  const auto measure = [&](StepPhase phase, bool begin, std::int64_t) {
    if (phase == StepPhase::forward && begin) activations_before = tag_now(allocator, MemoryTag::activation);
    if (phase == StepPhase::forward && !begin) m.activation_bytes = tag_now(allocator, MemoryTag::activation) - activations_before;
    if (phase == StepPhase::backward && !begin)
      for (const Tensor& p : model.parameters()) m.grad_bytes += static_cast<std::int64_t>(autograd::grad(p).nbytes());
  };
  const StepHooks hooks{.next_batch = [&] { return data::Batch{images, labels, {}}; }, .on_phase = measure};
  optimizer_step({.model = model, .optimizer = &optimizer}, recipe, 1, images.size(0), hooks);
  m.optimizer_bytes = tag_now(allocator, MemoryTag::optimizer);  // zero_grad frees gradients only
  m.peak_bytes = allocator.stats().requested_bytes.peak;
  return m;
}

}  // namespace frugal::train
