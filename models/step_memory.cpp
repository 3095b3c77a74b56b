// models/step_memory.h: one training step, measured by the allocator's tags.
#include "models/step_memory.h"

#include "core/allocator_registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"

namespace frugal::models {

namespace {

std::int64_t tag_now(const Allocator& allocator, MemoryTag tag) {
  return allocator.stats().tag_bytes[static_cast<int>(tag)].current;
}

}  // namespace

StepMemory training_step(nn::Module& model, nn::Optimizer& optimizer, const Tensor& images, const Tensor& labels) {
  Allocator& allocator = allocator_for(images.device());
  allocator.reset_peak_stats();
  StepMemory m;
  const std::int64_t activations_before = tag_now(allocator, MemoryTag::activation);
  {  // the loss, and with it the graph, dies at the end of this block
    const Tensor loss = functional::cross_entropy(model(images), labels);
    m.activation_bytes = tag_now(allocator, MemoryTag::activation) - activations_before;
    autograd::backward(loss);
  }
  for (const Tensor& p : model.parameters()) m.grad_bytes += static_cast<std::int64_t>(autograd::grad(p).nbytes());
  optimizer.step();
  m.optimizer_bytes = tag_now(allocator, MemoryTag::optimizer);
  optimizer.zero_grad();
  m.peak_bytes = allocator.stats().requested_bytes.peak;
  return m;
}

}  // namespace frugal::models
