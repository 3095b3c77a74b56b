// The training step (see step.h): a micro-batch's forward and backward, then the optimizer's update.
#include "train/step.h"

#include "core/error.h"
#include "dist/ddp.h"
#include "kernels/loss.h"
#include "nn/activation_offload.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/lr_schedule.h"
#include "nn/optimizer_in_backward.h"
#include "train/memory_context.h"
#include "train/options.h"

namespace frugal::train {

namespace {

// Tells hooks.on_phase that a phase begins and, when the scope ends (an exception included), that it ended.
class StepPhaseScope {
 public:
  StepPhaseScope(const StepHooks& hooks, StepPhase phase, std::int64_t micro_batch)
      : hooks_(hooks), phase_(phase), micro_batch_(micro_batch) {
    if (hooks_.on_phase) hooks_.on_phase(phase_, true, micro_batch_);
  }
  ~StepPhaseScope() {
    if (hooks_.on_phase) hooks_.on_phase(phase_, false, micro_batch_);
  }
  StepPhaseScope(const StepPhaseScope&) = delete;
  StepPhaseScope& operator=(const StepPhaseScope&) = delete;

 private:
  const StepHooks& hooks_;
  StepPhase phase_;
  std::int64_t micro_batch_;
};

// The loss and accuracy of a micro-batch, read back to the host. The meta device has shapes and no
// values: there is nothing to read, and what reading would allocate on it (count_correct's tensors)
// is still made, so the planner's record holds it.
void add_totals(StepTotals& totals, const MicroBatch& m) {
  const Tensor correct = count_correct(autograd::detach(m.logits), m.batch.labels);
  const auto n = static_cast<double>(m.batch.inputs.size(0));
  totals.samples += n;
  if (m.loss.device().is_meta()) return;
  totals.loss_sum += m.loss.to(Device::cpu()).item<double>() * n;
  totals.correct += static_cast<double>(correct.to(Device::cpu()).item<std::int64_t>());
}

}  // namespace

StepRecipe step_recipe(const TrainOptions& o) {
  return {.amp = o.amp, .label_smoothing = o.label_smoothing, .saving = o.saving,
          .offload_activations = o.offload_activations};
}

MicroBatch micro_batch(const StepParts& parts, const StepRecipe& recipe, const StepHooks& hooks, std::int64_t index,
                       bool last, std::int64_t step_samples) {
  FRUGAL_CHECK(hooks.next_batch != nullptr, "training step: no batch source (StepHooks::next_batch)");
  // What forward saves for backward, and how backward rebuilds it: set for both (nn/saved_activations.h).
  const nn::ActivationSavingGuard saving(recipe.saving);
  MicroBatch m;
  {
    const StepPhaseScope phase(hooks, StepPhase::forward, index);
    m.batch = hooks.next_batch();
    // Saved feature maps go to host memory as forward saves them, and come back in backward without
    // the scope (nn/activation_offload.h); what checkpointing recomputes in backward stays on the device.
    std::optional<nn::ActivationOffloadScope> offload;
    if (recipe.offload_activations) offload.emplace();
    std::optional<nn::AutocastGuard> autocast;  // forward and loss only: backward runs in the forward's dtypes
    if (recipe.amp) autocast.emplace(*recipe.amp);
    m.logits = parts.model(m.batch.inputs);
    const MemoryContextScope made_by("loss");
    m.loss = functional::cross_entropy(m.logits, m.batch.labels, {.label_smoothing = recipe.label_smoothing});
  }
  const StepPhaseScope phase(hooks, StepPhase::backward, index);
  const MemoryContextScope made_by("backward");
  const std::int64_t n = m.batch.inputs.size(0);
  FRUGAL_CHECK_VALUE(n >= 1 && n <= step_samples, "training step: a micro-batch of ", n, " samples in a step of ",
                     step_samples);
  // A weight of exactly 1 (one micro-batch per step) would multiply by one: skipped, no bit changes.
  Tensor weighted = n == step_samples ? m.loss : functional::mul(m.loss, static_cast<double>(n) / static_cast<double>(step_samples));
  if (parts.scaler) weighted = parts.scaler->scale(weighted);
  if (parts.ddp) parts.ddp->set_sync(last);  // the earlier micro-batches accumulate locally (no_sync)
  autograd::backward(weighted);
  return m;
}

StepResult optimizer_step(const StepParts& parts, const StepRecipe& recipe, std::int64_t micro_batches,
                          std::int64_t step_samples, const StepHooks& hooks) {
  FRUGAL_CHECK(parts.optimizer != nullptr, "optimizer_step: no optimizer");
  FRUGAL_CHECK_VALUE(micro_batches >= 1, "optimizer_step: ", micro_batches, " micro-batches");
  StepResult result;
  // The optimizer in backward: armed for the step's one backward, which updates each parameter as
  // its gradient completes and frees the gradient (nn/optimizer_in_backward.h).
  std::optional<nn::OptimizerInBackward::Armed> in_backward;
  if (parts.in_backward) {
    FRUGAL_CHECK_VALUE(micro_batches == 1 && !parts.ddp && !(parts.scaler && parts.scaler->is_enabled()),
                       "training step: the optimizer in backward needs one micro-batch per step, no DDP and no f16 "
                       "loss scaling (each needs every gradient complete before any update)");
    in_backward.emplace(*parts.in_backward);
  }
  for (std::int64_t m = 0; m < micro_batches; ++m)
    add_totals(result.totals, micro_batch(parts, recipe, hooks, m, m == micro_batches - 1, step_samples));
  const bool updated_in_backward = in_backward.has_value();
  in_backward.reset();
  const StepPhaseScope phase(hooks, StepPhase::optimizer, 0);
  if (parts.ddp) parts.ddp->synchronize();  // every bucket's gradients averaged over the ranks
  {
    const MemoryContextScope made_by("optimizer step");  // the optimizer's state is made by the first one
    if (updated_in_backward) {
      // every parameter with a gradient was updated during backward, its gradient already freed
    } else if (parts.scaler) {
      result.updated = parts.scaler->step(*parts.optimizer);  // false: a gradient overflowed, no update
      parts.scaler->update();
    } else {
      parts.optimizer->step();
    }
  }
  parts.optimizer->zero_grad();
  if (parts.schedule) parts.schedule->step();
  return result;
}

}  // namespace frugal::train
