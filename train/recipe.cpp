// The run's recipe (see recipe.h): model options, optimizer, schedule, scaler.
#include "train/recipe.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace frugal::train {

namespace {

// Two groups, as the usual recipes: weights (matrices and kernels, dim > 1) decayed; biases and
// BatchNorm's scale and shift (dim 1) not, since shrinking them regularises nothing.
std::vector<nn::ParamGroup> param_groups(const nn::Module& model, const TrainOptions& o) {
  nn::ParamGroup decayed{.params = {}, .lr = o.lr, .weight_decay = o.weight_decay};
  nn::ParamGroup undecayed{.params = {}, .lr = o.lr, .weight_decay = 0.0};
  for (const Tensor& p : model.parameters()) (p.dim() > 1 ? decayed : undecayed).params.push_back(p);
  return {decayed, undecayed};
}

// GradScaler's defaults, torch.amp.GradScaler's: start at 2^16, double after 2000 good steps, halve on an overflow.
constexpr double kInitialScale = 65536.0, kGrowthFactor = 2.0, kBackoffFactor = 0.5;
constexpr std::int64_t kGrowthInterval = 2000;

// The lr of every optimizer step over the whole run: `warmup` of the steps rising linearly from 1%
// of the lr, then constant or a cosine to 0; onecycle rises over `warmup` of the steps (at least
// two) along a half cosine instead.
std::unique_ptr<nn::LRScheduler> make_schedule(nn::Optimizer& optimizer, const TrainOptions& o, std::int64_t total_steps) {
  constexpr double kWarmupStart = 0.01;  // warm-up starts at 1% of the lr: not 0, which would waste a step
  if (o.schedule == ScheduleKind::onecycle) {
    const double rise = std::max(o.warmup, 2.0 / static_cast<double>(std::max<std::int64_t>(total_steps, 3)));
    return std::make_unique<nn::OneCycleLR>(optimizer, std::max<std::int64_t>(total_steps, 3), std::min(rise, 0.99));
  }
  const auto warmup_steps = static_cast<std::int64_t>(o.warmup * static_cast<double>(total_steps));
  std::vector<std::unique_ptr<nn::LRScheduler>> parts;
  std::vector<std::int64_t> milestones;
  if (warmup_steps > 0) {
    parts.push_back(std::make_unique<nn::LinearWarmup>(optimizer, kWarmupStart, warmup_steps));
    milestones.push_back(warmup_steps);
  }
  if (o.schedule == ScheduleKind::cosine)
    parts.push_back(std::make_unique<nn::CosineAnnealingLR>(optimizer, std::max<std::int64_t>(total_steps - warmup_steps, 1)));
  else
    parts.push_back(std::make_unique<nn::StepLR>(optimizer, std::numeric_limits<std::int64_t>::max(), 1.0));
  return std::make_unique<nn::SequentialLR>(optimizer, std::move(parts), std::move(milestones));
}

}  // namespace

models::ModelOptions model_options(const TrainOptions& o, std::int64_t in_channels, std::int64_t num_classes) {
  return {.num_classes = num_classes,
          .in_channels = in_channels,
          .width_mult = o.width,
          .dropout = o.dropout,
          .cifar_stem = o.cifar_stem,
          .checkpoint_activations = o.checkpoint_activations,
          .checkpoint_blocks = o.checkpoint_blocks,
          .inplace_activations = o.inplace_activations};
}

std::unique_ptr<nn::Optimizer> make_optimizer(std::vector<nn::ParamGroup> groups, const TrainOptions& o) {
  switch (o.optimizer) {
    case OptimizerKind::sgd: return std::make_unique<nn::SGD>(std::move(groups), o.momentum, 0.0, /*nesterov=*/o.momentum > 0);
    case OptimizerKind::adamw: return std::make_unique<nn::AdamW>(std::move(groups), std::pair{o.momentum, 0.999});
    case OptimizerKind::adamw8bit: return std::make_unique<nn::AdamW8bit>(std::move(groups), std::pair{o.momentum, 0.999});
    case OptimizerKind::adafactor: return std::make_unique<nn::Adafactor>(std::move(groups));  // no momentum: no first moment
  }
  FRUGAL_THROW(ValueError, "make_optimizer: unknown optimizer");
}

std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, const TrainOptions& o) {
  if (!o.offload_optimizer) return make_optimizer(param_groups(model, o), o);
  // --offload optimizer: the same optimizer, over pinned host copies of the parameters.
  return std::make_unique<nn::OffloadedOptimizer>(
      param_groups(model, o), [&o](std::vector<nn::ParamGroup> host_groups) { return make_optimizer(std::move(host_groups), o); });
}

dist::DdpOptions ddp_options(const TrainOptions& o) {
  dist::DdpOptions d;
  d.bucket_cap_bytes = o.bucket_cap_bytes;
  d.first_bucket_cap_bytes = std::min(d.first_bucket_cap_bytes, o.bucket_cap_bytes);
  d.gradient_as_bucket_view = o.bucket_views;
  d.zero = o.zero;
  return d;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, dist::DistributedDataParallel* ddp,
                                              const TrainOptions& o) {
  if (o.zero == 0) return make_optimizer(model, o);
  FRUGAL_CHECK_VALUE(ddp != nullptr, "--zero needs --ddp");
  return ddp->shard_optimizer([&o](std::vector<nn::ParamGroup> groups) { return make_optimizer(std::move(groups), o); },
                              param_groups(model, o));
}

Recipe make_recipe(const nn::Module& model, dist::DistributedDataParallel* ddp, const TrainOptions& o,
                   std::int64_t total_steps) {
  Recipe r;
  r.optimizer = make_optimizer(model, ddp, o);
  r.schedule = make_schedule(*r.optimizer, o, total_steps);
  r.scaler = std::make_unique<nn::GradScaler>(kInitialScale, kGrowthFactor, kBackoffFactor, kGrowthInterval,
                                              /*enabled=*/o.amp == DType::f16);
  if (o.optimizer_in_backward) r.in_backward = std::make_unique<nn::OptimizerInBackward>(*r.optimizer);
  return r;
}

}  // namespace frugal::train
