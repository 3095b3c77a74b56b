// Loss scaling (see grad_scaler.h): GradScaler's unscale/skip/update cycle, torch.amp.GradScaler's
// rules step by step, and the gradient accumulation helpers.
#include "nn/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "nn/autograd.h"
#include "nn/functional.h"

namespace frugal::nn {

namespace {

void check_factors(double growth_factor, double backoff_factor, std::int64_t growth_interval, const char* where) {
  FRUGAL_CHECK_VALUE(growth_factor > 1.0, where, ": growth_factor must be > 1, got ", growth_factor);
  FRUGAL_CHECK_VALUE(backoff_factor > 0.0 && backoff_factor < 1.0, where, ": backoff_factor must be in (0, 1), got ",
                     backoff_factor);
  FRUGAL_CHECK_VALUE(growth_interval > 0, where, ": growth_interval must be positive, got ", growth_interval);
}

// Whether a gradient holds an inf or NaN, as a 0-dim tensor still on the device: the sum (in
// double, kernels/reduce.h) of anything with an inf or NaN is inf or NaN. A finite gradient whose
// sum overflows its dtype reads as non-finite too; only f16 gets near that, and f16 gradients are
// refused (as PyTorch refuses them: mixed precision keeps f32 master parameters).
Tensor finiteness_probe(const Tensor& grad) { return sum(grad); }

}  // namespace

GradScaler::GradScaler(double init_scale, double growth_factor, double backoff_factor, std::int64_t growth_interval,
                       bool enabled)
    : scale_(static_cast<float>(init_scale)),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval),
      enabled_(enabled) {
  FRUGAL_CHECK_VALUE(init_scale > 0.0 && std::isfinite(scale_), "GradScaler: init_scale must be a positive f32, got ",
                     init_scale);
  check_factors(growth_factor, backoff_factor, growth_interval, "GradScaler");
}

Tensor GradScaler::scale(const Tensor& loss) const { return enabled_ ? functional::mul(loss, scale_) : loss; }

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!enabled_) return;
  OptimizerRecord& record = records_[&optimizer];
  FRUGAL_CHECK(record.stage == Stage::ready, "GradScaler.unscale_: ",
               record.stage == Stage::unscaled ? "already called on this optimizer" : "called after step()",
               " since the last update()");
  autograd::NoGradGuard no_grad;
  const double inverse = static_cast<float>(1.0 / scale_);  // as torch: the reciprocal in double, kept as f32
  std::vector<Tensor> grads;
  for (const ParamGroup& group : optimizer.param_groups())
    for (const Tensor& param : group.params) {
      Tensor grad = autograd::grad(param);
      if (!grad.defined()) continue;
      // Checked for every gradient before any is touched: a refusal leaves them all as they were.
      FRUGAL_CHECK_DTYPE(grad.dtype() != DType::f16, "GradScaler.unscale_: refusing to unscale f16 gradients (of a ",
                         shape_str(param.shape()), " parameter); keep the parameters in f32");
      grads.push_back(std::move(grad));
    }
  std::vector<Tensor> probes;
  for (Tensor& grad : grads) {
    unary_(UnaryOp::mul_scalar, grad, inverse);
    probes.push_back(finiteness_probe(grad));
  }
  // Read only once every probe is launched, so a GPU is waited on once, not once per gradient. The
  // meta device (the memory planner's) has no values: its gradients count as finite, so the planned
  // step is the one that updates.
  const bool found_here = std::any_of(probes.begin(), probes.end(), [](const Tensor& p) {
    return !p.device().is_meta() && !std::isfinite(p.item<double>());
  });
  record.found_inf = optimizer.found_inf_anywhere(found_here);
  record.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  FRUGAL_CHECK(records_[&optimizer].stage != Stage::stepped,
               "GradScaler.step: already called on this optimizer since the last update()");
  if (records_[&optimizer].stage == Stage::ready) unscale_(optimizer);
  OptimizerRecord& record = records_[&optimizer];
  record.stage = Stage::stepped;
  if (record.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  const bool checked = std::any_of(records_.begin(), records_.end(), [](const auto& r) { return r.second.stage != Stage::ready; });
  FRUGAL_CHECK(checked, "GradScaler.update: no inf checks were recorded; call step() or unscale_() first");
  const bool found_inf = std::any_of(records_.begin(), records_.end(), [](const auto& r) { return r.second.found_inf; });
  records_.clear();
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * backoff_factor_);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    const auto grown = static_cast<float>(scale_ * growth_factor_);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  auto f64 = [](double v) { return full({}, v, {.dtype = DType::f64}); };
  auto i64 = [](std::int64_t v) { return full({}, static_cast<double>(v), {.dtype = DType::i64}); };
  return {{"scale", f64(scale_)},
          {"growth_factor", f64(growth_factor_)},
          {"backoff_factor", f64(backoff_factor_)},
          {"growth_interval", i64(growth_interval_)},
          {"growth_tracker", i64(growth_tracker_)}};
}

void GradScaler::load_state_dict(const StateDict& dict) {
  if (!enabled_) return;
  FRUGAL_CHECK_VALUE(!dict.empty(), "GradScaler.load_state_dict: the dict is empty, perhaps saved by a disabled GradScaler");
  const std::map<std::string, Tensor> entries(dict.begin(), dict.end());
  FRUGAL_CHECK_VALUE(entries.size() == 5 && dict.size() == 5, "GradScaler.load_state_dict: expected the 5 entries of ",
                     "state_dict(), got ", dict.size());
  auto read = [&](const char* key) {
    const auto it = entries.find(key);
    FRUGAL_CHECK_VALUE(it != entries.end(), "GradScaler.load_state_dict: missing key '", key, "'");
    FRUGAL_CHECK_SHAPE(it->second.numel() == 1, "GradScaler.load_state_dict: '", key, "' should hold one number");
    return it->second.item<double>();
  };
  const double scale = read("scale"), growth = read("growth_factor"), backoff = read("backoff_factor");
  const auto interval = static_cast<std::int64_t>(read("growth_interval"));
  const auto tracker = static_cast<std::int64_t>(read("growth_tracker"));
  FRUGAL_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), "GradScaler.load_state_dict: scale ", scale, " is not positive");
  check_factors(growth, backoff, interval, "GradScaler.load_state_dict");
  FRUGAL_CHECK_VALUE(tracker >= 0 && tracker < interval, "GradScaler.load_state_dict: growth_tracker ", tracker,
                     " is outside [0, growth_interval)");
  scale_ = static_cast<float>(scale);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = interval;
  growth_tracker_ = tracker;
}

// ---- gradient accumulation

Tensor scale_for_accumulation(const Tensor& loss, int micro_batches) {
  FRUGAL_CHECK_VALUE(micro_batches > 0, "scale_for_accumulation: micro_batches must be positive, got ", micro_batches);
  return functional::mul(loss, 1.0 / micro_batches);
}

GradientAccumulator::GradientAccumulator(int micro_batches) : micro_batches_(micro_batches) {
  FRUGAL_CHECK_VALUE(micro_batches > 0, "GradientAccumulator: micro_batches must be positive, got ", micro_batches);
}

bool GradientAccumulator::micro_step() {
  if (++count_ < micro_batches_) return false;
  count_ = 0;
  return true;
}

}  // namespace frugal::nn
