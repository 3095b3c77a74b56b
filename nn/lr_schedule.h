// Learning-rate schedules, as torch.optim.lr_scheduler: StepLR, CosineAnnealingLR, OneCycleLR, LinearWarmup
// (torch's LinearLR ending at factor 1) and SequentialLR (one schedule after another, e.g. warm-up
// then cosine). Each is written in closed form, lr_at(base_lr, epoch), which for these schedules
// gives the same numbers as PyTorch's chainable updates. Making a schedule sets epoch 0's lr at
// once (so a warm-up's first step already runs warm); step() moves to the next epoch - or
// iteration: a schedule counts whatever its caller steps it by.
//
// Base lrs are the groups' initial_lr (set from their lr by the first schedule made on the
// optimizer), so schedules made one after another for a SequentialLR all count from the same lr.
// Not here: the optimizers (nn/optim.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/optim.h"
#include "nn/state_dict.h"

namespace frugal::nn {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();  // the next epoch: sets every group's lr
  const std::vector<double>& get_last_lr() const { return last_lr_; }  // one per group
  std::int64_t last_epoch() const { return epoch_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  // The lr at `epoch` (0 = when the schedule was made) of a group whose lr started at base_lr.
  virtual double lr_at(double base_lr, std::int64_t epoch) const = 0;

  // "last_epoch" (0-dim i64) and "base_lrs.G" (0-dim f64): loading moves the optimizer's lrs to
  // that epoch, so a resumed run continues the schedule where it stopped.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Sets every group's lr for `epoch`. Each subclass constructor calls go_to(0) last: a base
  // constructor cannot call lr_at, which the subclass defines.
  void go_to(std::int64_t epoch);

 private:
  Optimizer* optimizer_;
  std::vector<double> base_lrs_, last_lr_;
  std::int64_t epoch_ = 0;
};

// lr = base * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  double lr_at(double base_lr, std::int64_t epoch) const override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2: from base down to eta_min at
// epoch T_max (and back up after, as PyTorch's).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min = 0.0);
  double lr_at(double base_lr, std::int64_t epoch) const override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

// lr = base * (start_factor + (1 - start_factor) min(epoch, warmup_steps) / warmup_steps): linear
// from base * start_factor up to base over warmup_steps, then constant (torch's LinearLR).
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, double start_factor, std::int64_t warmup_steps);
  double lr_at(double base_lr, std::int64_t epoch) const override;

 private:
  double start_factor_;
  std::int64_t warmup_steps_;
};

// torch.optim.lr_scheduler.OneCycleLR (anneal_strategy "cos", two phases) over total_steps: the lr
// rises along a half cosine from base / div_factor to base over the first pct_start of the steps,
// then falls along a half cosine to base / div_factor / final_div_factor at step total_steps - 1.
// The lr only: PyTorch's default also cycles momentum inversely, which this does not.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, std::int64_t total_steps, double pct_start = 0.3, double div_factor = 25.0,
             double final_div_factor = 1e4);
  double lr_at(double base_lr, std::int64_t epoch) const override;

 private:
  std::int64_t total_steps_;
  double pct_start_, div_factor_, final_div_factor_;
};

// schedules[0] until milestones[0], then schedules[1] restarted from its epoch 0, and so on
// (torch's SequentialLR). The parts serve as formulas only: step this one, not them. Every part
// must be made on the same optimizer:
//   std::vector<std::unique_ptr<LRScheduler>> parts;
//   parts.push_back(std::make_unique<LinearWarmup>(optimizer, 0.1, 5));
//   parts.push_back(std::make_unique<CosineAnnealingLR>(optimizer, 95));
//   SequentialLR schedule(optimizer, std::move(parts), {5});
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedules,
               std::vector<std::int64_t> milestones);
  double lr_at(double base_lr, std::int64_t epoch) const override;

 private:
  std::vector<std::unique_ptr<LRScheduler>> schedules_;
  std::vector<std::int64_t> milestones_;
};

}  // namespace frugal::nn
