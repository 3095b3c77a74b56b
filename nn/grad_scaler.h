// Loss scaling, the two kinds a training loop uses:
//   - GradScaler: dynamic loss scaling for mixed precision, as torch.amp.GradScaler. Small
//     gradients underflow in f16, so the loss is multiplied by a large scale before backward and
//     the gradients divided by it before the optimizer step; a step whose gradients overflowed
//     (inf/NaN) is skipped and the scale lowered, and after growth_interval good steps in a row it
//     is raised again. The loop:
//         loss = model(x) ...;  autograd::backward(scaler.scale(loss));
//         scaler.step(optimizer);  scaler.update();  optimizer.zero_grad();
//   - Gradient accumulation: K micro-batches' gradients summed before one step, each loss divided
//     by K, so the step sees the gradient of the mean over the full batch.
// Not here: running ops in lower precision (autocast, nn/amp.h), the optimizers (nn/optim.h).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/tensor.h"
#include "nn/optim.h"
#include "nn/state_dict.h"

namespace frugal::nn {

class GradScaler {
 public:
  // Disabled, every call passes through: scale() returns the loss, step() always steps.
  explicit GradScaler(double init_scale = 65536.0, double growth_factor = 2.0, double backoff_factor = 0.5,
                      std::int64_t growth_interval = 2000, bool enabled = true);

  // loss * scale, recorded for autograd (functional::mul), so backward produces scaled gradients.
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of the optimizer's parameters by the scale, in place, and records
  // whether any holds an inf or NaN. At most once per optimizer between update()s (call it before
  // clipping gradients; step() then does not unscale again).
  void unscale_(Optimizer& optimizer);
  // Unscales if unscale_ was not called, then runs optimizer.step() unless a gradient was not
  // finite. Returns whether the optimizer stepped.
  bool step(Optimizer& optimizer);
  // After each iteration's step(s): scale *= backoff_factor if any step was skipped; otherwise,
  // after growth_interval finite steps in a row, scale *= growth_factor.
  void update();

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return enabled_; }

  // "scale", "growth_factor", "backoff_factor" (0-dim f64), "growth_interval", "growth_tracker"
  // (0-dim i64); empty when disabled, and loading an empty dict into an enabled scaler is a
  // ValueError, as PyTorch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerRecord {
    Stage stage = Stage::ready;
    bool found_inf = false;
  };

  // f32, as torch keeps it: the scale grows until f32 would overflow, exactly as there.
  float scale_;
  double growth_factor_, backoff_factor_;
  std::int64_t growth_interval_;
  std::int64_t growth_tracker_ = 0;  // finite steps in a row since the scale last changed
  bool enabled_;
  std::unordered_map<const Optimizer*, OptimizerRecord> records_;  // this iteration's, cleared by update()
};

// loss / micro_batches, recorded for autograd (functional::mul): summed over the micro-batches,
// the gradients are those of the mean over the full batch.
Tensor scale_for_accumulation(const Tensor& loss, int micro_batches);

// Counts micro-batches and says when a full batch's gradients are in:
//     GradientAccumulator accumulate(4);
//     for (batch : loader) {
//       autograd::backward(accumulate.scale(loss(batch)));
//       if (accumulate.micro_step()) { optimizer.step(); optimizer.zero_grad(); }
//     }
// Caveat: BatchNorm normalises each micro-batch with that micro-batch's own statistics (and
// updates its running statistics K times), so a model with BatchNorm trained with K micro-batches
// of B is not the same as one trained with batches of K*B; models without it match exactly.
class GradientAccumulator {
 public:
  explicit GradientAccumulator(int micro_batches);
  Tensor scale(const Tensor& loss) const { return scale_for_accumulation(loss, micro_batches_); }
  // Counts one micro-batch; true when it completes a full batch (step, then zero the gradients).
  bool micro_step();
  int micro_batches() const { return micro_batches_; }
  int pending() const { return count_; }  // micro-batches counted since the last full batch

 private:
  int micro_batches_;
  int count_ = 0;
};

}  // namespace frugal::nn
