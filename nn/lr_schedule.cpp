// Learning-rate schedules (see lr_schedule.h): the stepping and saving every schedule shares, and
// each schedule's closed form.
#include "nn/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace frugal::nn {

namespace {
std::string base_lr_key(std::size_t group) { return "base_lrs." + std::to_string(group); }

const Tensor& find(const StateDict& dict, const std::string& key) {
  const auto it = std::find_if(dict.begin(), dict.end(), [&](const auto& entry) { return entry.first == key; });
  FRUGAL_CHECK_VALUE(it != dict.end(), "LRScheduler.load_state_dict: missing key '", key, "'");
  FRUGAL_CHECK_SHAPE(it->second.numel() == 1, "LRScheduler.load_state_dict: '", key, "' should hold one number, got shape ",
                     shape_str(it->second.shape()));
  return it->second;
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {
  for (ParamGroup& group : optimizer.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.lr;
    base_lrs_.push_back(*group.initial_lr);
  }
}

void LRScheduler::go_to(std::int64_t epoch) {
  epoch_ = epoch;
  last_lr_.clear();
  std::vector<ParamGroup>& groups = optimizer_->param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr_at(base_lrs_[g], epoch);
    last_lr_.push_back(groups[g].lr);
  }
}

void LRScheduler::step() { go_to(epoch_ + 1); }

StateDict LRScheduler::state_dict() const {
  StateDict dict{{"last_epoch", full({}, static_cast<double>(epoch_), {.dtype = DType::i64})}};
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) dict.emplace_back(base_lr_key(g), full({}, base_lrs_[g], {.dtype = DType::f64}));
  return dict;
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  FRUGAL_CHECK_VALUE(dict.size() == base_lrs_.size() + 1, "LRScheduler.load_state_dict: expected ",
                     base_lrs_.size() + 1, " entries (last_epoch and one base lr per group), got ", dict.size());
  const auto epoch = find(dict, "last_epoch").item<std::int64_t>();
  std::vector<double> base_lrs;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) base_lrs.push_back(find(dict, base_lr_key(g)).item<double>());
  base_lrs_ = std::move(base_lrs);
  go_to(epoch);
}

// ---- the schedules

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  FRUGAL_CHECK_VALUE(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  go_to(0);
}

double StepLR::lr_at(double base_lr, std::int64_t epoch) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  FRUGAL_CHECK_VALUE(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  FRUGAL_CHECK_VALUE(eta_min >= 0.0, "CosineAnnealingLR: eta_min must be >= 0, got ", eta_min);
  go_to(0);
}

double CosineAnnealingLR::lr_at(double base_lr, std::int64_t epoch) const {
  const double angle = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(angle)) / 2.0;
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::int64_t total_steps, double pct_start, double div_factor,
                       double final_div_factor)
    : LRScheduler(optimizer),
      total_steps_(total_steps),
      pct_start_(pct_start),
      div_factor_(div_factor),
      final_div_factor_(final_div_factor) {
  FRUGAL_CHECK_VALUE(total_steps >= 2, "OneCycleLR: total_steps must be at least 2, got ", total_steps);
  FRUGAL_CHECK_VALUE(pct_start > 0.0 && pct_start < 1.0, "OneCycleLR: pct_start must be in (0, 1), got ", pct_start);
  FRUGAL_CHECK_VALUE(pct_start * static_cast<double>(total_steps) >= 2.0, "OneCycleLR: the rise needs at least 2 steps, got pct_start ", pct_start, " of ", total_steps);
  FRUGAL_CHECK_VALUE(div_factor > 0.0 && final_div_factor > 0.0, "OneCycleLR: div factors must be positive");
  go_to(0);
}

// PyTorch's phases: the rise ends at step pct_start * total - 1, the fall at total - 1; past the end
// the fall's formula continues (PyTorch raises there instead).
double OneCycleLR::lr_at(double base_lr, std::int64_t epoch) const {
  const double initial = base_lr / div_factor_, final_lr = initial / final_div_factor_;
  const double rise_end = pct_start_ * static_cast<double>(total_steps_) - 1.0;
  const double fall_end = static_cast<double>(total_steps_) - 1.0;
  const double step = static_cast<double>(epoch);
  const auto anneal = [](double from, double to, double fraction) {
    return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * fraction) + 1.0);
  };
  if (step <= rise_end) return anneal(initial, base_lr, step / rise_end);
  return anneal(base_lr, final_lr, (step - rise_end) / (fall_end - rise_end));
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, double start_factor, std::int64_t warmup_steps)
    : LRScheduler(optimizer), start_factor_(start_factor), warmup_steps_(warmup_steps) {
  FRUGAL_CHECK_VALUE(start_factor > 0.0 && start_factor <= 1.0, "LinearWarmup: start_factor must be in (0, 1], got ",
                     start_factor);
  FRUGAL_CHECK_VALUE(warmup_steps > 0, "LinearWarmup: warmup_steps must be positive, got ", warmup_steps);
  go_to(0);
}

double LinearWarmup::lr_at(double base_lr, std::int64_t epoch) const {
  const double done = static_cast<double>(std::min(epoch, warmup_steps_)) / static_cast<double>(warmup_steps_);
  return base_lr * (start_factor_ + (1.0 - start_factor_) * done);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedules,
                           std::vector<std::int64_t> milestones)
    : LRScheduler(optimizer), schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  FRUGAL_CHECK_VALUE(!schedules_.empty(), "SequentialLR: needs at least one schedule");
  FRUGAL_CHECK_VALUE(milestones_.size() + 1 == schedules_.size(), "SequentialLR: ", schedules_.size(),
                     " schedules need ", schedules_.size() - 1, " milestones, got ", milestones_.size());
  for (const auto& schedule : schedules_)
    FRUGAL_CHECK_VALUE(schedule && &schedule->optimizer() == &optimizer,
                       "SequentialLR: every schedule must be made on the optimizer SequentialLR gets");
  FRUGAL_CHECK_VALUE(std::is_sorted(milestones_.begin(), milestones_.end()) && (milestones_.empty() || milestones_[0] > 0),
                     "SequentialLR: milestones must be positive and in order");
  go_to(0);
}

double SequentialLR::lr_at(double base_lr, std::int64_t epoch) const {
  // The part in force: the number of milestones reached; it counts its epochs from its milestone.
  const auto part = static_cast<std::size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const std::int64_t start = part == 0 ? 0 : milestones_[part - 1];
  return schedules_[part]->lr_at(base_lr, epoch - start);
}

}  // namespace frugal::nn
