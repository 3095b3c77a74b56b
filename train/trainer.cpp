// train() and evaluate() (see trainer.h). Read top to bottom: the parts a run is built from, then
// one optimizer step, one epoch, the whole run.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "data/loader.h"
#include "data/open_dataset.h"
#include "data/sampler.h"
#include "dist/ddp.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"
#include "kernels/loss.h"
#include "kernels/reduce.h"
#include "models/registry.h"
#include "nn/amp.h"
#include "nn/saved_activations.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/lr_schedule.h"
#include "nn/optim.h"
#include "train/checkpoint.h"
#include "train/planner.h"
#include "train/memory_context.h"

namespace frugal::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- the parts of a run ---------------------------------------------------------------------------

// Two groups, as the usual recipes: weights (matrices and kernels, dim > 1) decayed; biases and
// BatchNorm's scale and shift (dim 1) not, since shrinking them regularises nothing.
std::vector<nn::ParamGroup> param_groups(const nn::Module& model, const TrainOptions& o) {
  nn::ParamGroup decayed{.params = {}, .lr = o.lr, .weight_decay = o.weight_decay};
  nn::ParamGroup undecayed{.params = {}, .lr = o.lr, .weight_decay = 0.0};
  for (const Tensor& p : model.parameters()) (p.dim() > 1 ? decayed : undecayed).params.push_back(p);
  return {decayed, undecayed};
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
  if (o.optimizer == OptimizerKind::sgd)
    return std::make_unique<nn::SGD>(std::move(groups), o.momentum, 0.0, /*nesterov=*/o.momentum > 0);
  return std::make_unique<nn::AdamW>(std::move(groups), std::pair{o.momentum, 0.999});
}

std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, const TrainOptions& o) {
  return make_optimizer(param_groups(model, o), o);
}

dist::DdpOptions ddp_options(const TrainOptions& o) {
  dist::DdpOptions d;
  d.bucket_cap_bytes = o.bucket_cap_bytes;
  d.first_bucket_cap_bytes = std::min(d.first_bucket_cap_bytes, o.bucket_cap_bytes);
  d.gradient_as_bucket_view = o.bucket_views;
  d.zero1 = o.zero1;
  return d;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, dist::DistributedDataParallel* ddp,
                                              const TrainOptions& o) {
  if (!o.zero1) return make_optimizer(model, o);
  FRUGAL_CHECK_VALUE(ddp != nullptr, "--zero1 needs --ddp");
  return ddp->shard_optimizer([&o](std::vector<nn::ParamGroup> groups) { return make_optimizer(std::move(groups), o); },
                              param_groups(model, o));
}

namespace {

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

struct Memory {
  std::size_t allocated, reserved, peak_allocated;
};

Memory memory_now(Device device) {
  const CachingStats s = default_caching_allocator(device).caching_stats();
  return {static_cast<std::size_t>(s.allocated_bytes.current), static_cast<std::size_t>(s.reserved_bytes.current),
          static_cast<std::size_t>(s.allocated_bytes.peak)};
}

// The communicators of a --ddp run: MPI between the ranks mpirun started, which also carries the
// run's small host-side agreements (step totals, stopping, the final report); for CUDA tensors,
// NCCL over it. Gradients go through `gradients()`.
struct Communicators {
  std::unique_ptr<dist::Communicator> host, device;
  dist::Communicator& gradients() const { return device ? *device : *host; }
};

Communicators open_communicators(const TrainOptions& o) {
  dist::mpi_init();
  Communicators c;
  c.host = dist::make_mpi_communicator();
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.ddp_timeout * 1000.0));
  c.host->set_timeout(timeout);
  FRUGAL_CHECK_VALUE(c.host->world_size() == o.ranks, "--ddp: mpirun started ", c.host->world_size(),
                     " ranks but the run was set up for ", o.ranks);
  if (o.device.is_cuda()) {
    c.device = dist::make_nccl_communicator(*c.host, o.device.index());
    c.device->set_timeout(timeout);
  }
  return c;
}

// What every rank of a --ddp run must share before its first step: the options that shape the step
// (run_identity_json), and those that decide when the ranks meet in a collective (stopping, saving
// ZeRO-1's consolidated state, the buckets).
std::string rank_agreement_json(const TrainOptions& o) {
  auto j = nlohmann::ordered_json::parse(run_identity_json(o));
  j["ddp-ranks"] = o.ranks;
  j["steps"] = o.steps ? nlohmann::ordered_json(*o.steps) : nlohmann::ordered_json("all");
  j["save-every"] = o.save_every;
  j["save"] = !o.save.empty();
  j["bucket-cap"] = o.bucket_cap_bytes;
  j["bucket-views"] = o.bucket_views;
  j["zero1"] = o.zero1;
  j["device"] = o.device.is_cuda() ? "cuda" : o.device.str();
  j["allow-nonfinite"] = o.allow_nonfinite;  // one rank stopping on a NaN loss alone would leave the others waiting
  return j.dump();
}

// Every rank compares `mine` (a JSON object keyed by flag names) with rank 0's before any collective
// that depends on it: a rank started with another --batch-size would otherwise train (its step
// silently another batch) or hang at the epoch's end. On a mismatch every rank throws the same
// RanksDisagreeError, naming the first rank that differs and the flag.
void check_ranks_agree(dist::Communicator& host, const std::string& mine) {
  const auto text_of = [&](int root) {  // rank `root`'s text, on every rank
    const Tensor length = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())});
    host.broadcast(length, root);
    const Tensor bytes = empty({length.item<std::int64_t>()}, {.dtype = DType::u8});
    if (host.rank() == root) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
    host.broadcast(bytes, root);
    return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel()));
  };
  const std::string root_text = text_of(0);
  const Tensor differs = empty({host.world_size()}, {.dtype = DType::i32});
  host.all_gather(full({1}, mine == root_text ? 0 : 1, {.dtype = DType::i32}), differs);
  const std::vector<std::int32_t> flags = differs.to_vector<std::int32_t>();
  const auto first = std::find(flags.begin(), flags.end(), 1);
  if (first == flags.end()) return;
  const int rank = static_cast<int>(first - flags.begin());
  const auto others = std::count(flags.begin(), flags.end(), 1) - 1;
  FRUGAL_THROW(RanksDisagreeError, "the ranks were started with different flags: rank ", rank, " has ",
               identity_difference(text_of(rank), root_text, "rank 0"),
               others > 0 ? " (and " + std::to_string(others) + " more ranks differ)" : std::string(),
               "; every rank must get the same flags");
}

// Everything one run holds, built in the order train() needs it.
struct Run {
  const TrainOptions& options;
  const TrainHooks& hooks;
  Communicators comms;                             // with --ddp
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  RunData inputs;  // the splits and their transforms
  std::int64_t num_classes = 0;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::LRScheduler> schedule;
  std::unique_ptr<nn::GradScaler> scaler;
  std::unique_ptr<data::DataLoader> loader;
  std::optional<LeakCheck> leaks;  // when options.leak_check
  std::int64_t samples_per_epoch = 0;  // this rank's: with --ddp its share of the training split
  std::int64_t batches_per_epoch = 0, steps_per_epoch = 0, total_steps = 0;
  DataIdentity data;  // of the training split: recorded in checkpoints, checked on resume
  TrainingPosition position;
  std::string last_checkpoint;
  std::int64_t last_checkpoint_step = 0;
  double train_seconds = 0.0;
  std::int64_t trained_samples = 0;
  std::int64_t steps_taken = 0, skipped_steps = 0;  // this run's optimizer steps; those the GradScaler skipped
  double epoch_loss_sum = 0.0;       // this run's samples of the epoch in progress (final_loss)
  std::int64_t epoch_samples = 0;

  Run(const TrainOptions& o, const TrainHooks& h);
  void resume_from(const std::string& path);
  void save(const std::string& why);
  void message(const std::string& line) const {
    if (hooks.on_message) hooks.on_message(line);
  }
  // Rank 0 of a --ddp run, or the one process: who evaluates and writes checkpoints.
  bool is_root() const { return !comms.host || comms.host->rank() == 0; }
  int world_size() const { return comms.host ? comms.host->world_size() : 1; }
};

Run::Run(const TrainOptions& o, const TrainHooks& h) : options(o), hooks(h) {
  if (o.ddp) {
    comms = open_communicators(o);
    check_ranks_agree(*comms.host, rank_agreement_json(o));
  }
  if (o.memory_limit) set_memory_limit(o.device, *o.memory_limit);
  manual_seed(o.seed);  // the initial weights and the dropout draws
  inputs = open_run_data(o.data, o.test_data, o.image_size, o.augment);
  const data::DatasetPtr& train_split = inputs.splits.train;
  num_classes = o.num_classes.value_or(train_split->num_classes());
  FRUGAL_CHECK_VALUE(num_classes >= train_split->num_classes(), "--num-classes ", num_classes, " but the data has ",
                     train_split->num_classes(), " classes");
  data = data_identity(*train_split);
  {
    const MemoryContextScope made_by("model construction");
    model = models::make_model(o.model, model_options(o, train_split->sample_shape()[0], num_classes));
    model->to(o.device);
  }
  if (o.ddp) {
    // Rank 0's weights reach every rank; the buckets are made and the hooks registered.
    const MemoryContextScope made_by("gradient buckets");
    ddp = std::make_unique<dist::DistributedDataParallel>(*model, comms.gradients(), ddp_options(o));
  }
  optimizer = make_optimizer(*model, ddp.get(), o);
  scaler = std::make_unique<nn::GradScaler>(65536.0, 2.0, 0.5, 2000, /*enabled=*/o.amp == DType::f16);
  // With --ddp each rank takes every world_size-th sample of the epoch's shuffled order, so at each
  // step the ranks' batches together are the one-process run's batch of that step.
  std::shared_ptr<data::Sampler> sampler;
  if (o.ddp)
    sampler = std::make_shared<data::DistributedSampler>(train_split->size(), world_size(), comms.host->rank(), true, o.seed);
  samples_per_epoch = sampler ? sampler->size() : train_split->size();
  loader = std::make_unique<data::DataLoader>(
      train_split, data::LoaderOptions{.batch_size = o.batch_size,
                                        .shuffle = !sampler,
                                        .sampler = sampler,
                                        .num_workers = o.workers,
                                        .transforms = inputs.train_transforms,
                                        .device = o.device,
                                        .seed = o.seed,
                                        .pin_memory = o.device.is_cuda()});
  batches_per_epoch = loader->num_batches();
  steps_per_epoch = (batches_per_epoch + o.accum - 1) / o.accum;
  total_steps = steps_per_epoch * o.epochs;
  schedule = make_schedule(*optimizer, o, total_steps);
  if (!o.resume.empty()) resume_from(o.resume);
  if (comms.host) {  // the same data, and the same step to start from (--data, --resume), on every rank
    const nlohmann::ordered_json start = {
        {"data", std::to_string(data.samples) + " samples, fingerprint " + data.fingerprint},
        {"resume", o.resume.empty() ? "none" : "at step " + std::to_string(position.global_step)}};
    check_ranks_agree(*comms.host, start.dump());
  }
  if (o.leak_check) leaks.emplace(default_caching_allocator(o.device));
}

// The global step a position of `batch` loader batches into `epoch` was reached at: whole epochs
// of steps, then a step per `accum` batches begun.
std::int64_t step_at(std::int64_t epoch, std::int64_t batch, std::int64_t steps_per_epoch, std::int64_t accum) {
  return epoch * steps_per_epoch + (batch + accum - 1) / accum;
}

void Run::resume_from(const std::string& path) {
  Checkpoint c = load_checkpoint(path);
  const std::string difference = identity_difference(run_identity_json(options), c.run_identity);
  FRUGAL_CHECK_VALUE(difference.empty(), path, ": not the same run: ", difference);
  FRUGAL_CHECK_VALUE(c.data == data, path, ": not the same data: the checkpoint's run trained on ", c.data.samples,
                     " samples (fingerprint ", c.data.fingerprint, "), this run's data has ", data.samples,
                     " (fingerprint ", data.fingerprint, ")");
  const TrainingPosition& p = c.position;
  FRUGAL_CHECK_VALUE(p.epoch < options.epochs || (p.epoch == options.epochs && p.batch == 0),
                     path, ": checkpoint is past the run's end");
  FRUGAL_CHECK_VALUE(p.batch <= batches_per_epoch, path, ": checkpoint stopped at batch ", p.batch,
                     " of an epoch of ", batches_per_epoch);
  const std::int64_t expected = step_at(p.epoch, p.batch, steps_per_epoch, options.accum);
  FRUGAL_CHECK_VALUE(p.global_step == expected, path, ": the position says step ", p.global_step, " but epoch ",
                     p.epoch + 1, ", batch ", p.batch, " is step ", expected, " (fields disagree: damaged or edited)");
  FRUGAL_CHECK_VALUE(!options.steps || *options.steps > p.global_step, path, ": the checkpoint is at step ",
                     p.global_step, ", so --steps ", options.steps.value_or(0), " leaves nothing to train");
  if (!options.allow_nonfinite) {
    const std::string bad = first_nonfinite(c.model, c.optimizer);
    FRUGAL_CHECK_VALUE(bad.empty(), path, ": tensor '", printable(bad), "' holds a NaN or an infinity: a diverged "
                       "run's checkpoint (--allow-nonfinite resumes it anyway)");
  }
  // A state dict that does not fit the model names the checkpoint, not only the layer.
  try {
    model->load_state_dict(c.model);
    optimizer->load_state_dict(c.optimizer);
    if (scaler->is_enabled()) scaler->load_state_dict(c.scaler);
    schedule->load_state_dict(c.schedule);
  } catch (const Error& e) {
    FRUGAL_THROW(ValueError, path, ": cannot be loaded into this run: ", e.message());
  }
  default_generator().set_state(c.position.generator);
  position = c.position;
  message("resumed from " + path + " at step " + std::to_string(position.global_step) + " (epoch " +
          std::to_string(position.epoch + 1) + ", batch " + std::to_string(position.batch) + ")");
}

// Where the run can be taken up again, for a divergence's message.
std::string last_good_checkpoint(const Run& run) {
  if (run.options.save.empty()) return "no checkpoint was kept (no --save)";
  if (run.last_checkpoint.empty())
    return run.options.resume == run.options.save ? "the last good checkpoint is " + run.options.save + ", as resumed"
                                                  : "no checkpoint was written yet";
  return "the last good checkpoint is " + run.last_checkpoint + " (step " + std::to_string(run.last_checkpoint_step) + ")";
}

[[noreturn]] void diverged(const Run& run, const std::string& what) {
  FRUGAL_THROW(TrainingDivergedError, what, " at step ", run.position.global_step, " (epoch ", run.position.epoch + 1,
               "); ", last_good_checkpoint(run),
               ". A smaller --lr, or --amp bf16 instead of f16, usually helps; --allow-nonfinite trains on regardless");
}

void Run::save(const std::string& why) {
  if (options.save.empty()) return;
  // ZeRO-1's state is sharded: every rank takes part in consolidating it. The weights are the same
  // on every rank, so rank 0 alone writes the file.
  nn::StateDict optimizer_state = optimizer->state_dict();
  if (!is_root()) return;
  position.generator = default_generator().state();
  nn::StateDict weights = model->state_dict();
  // A finite loss can still leave non-finite weights behind its step: never replace a good
  // checkpoint with them.
  if (!options.allow_nonfinite) {
    const std::string bad = first_nonfinite(weights, optimizer_state);
    if (!bad.empty()) diverged(*this, "'" + printable(bad) + "' holds a NaN or an infinity; nothing was saved");
  }
  save_checkpoint(options.save, {std::move(weights), std::move(optimizer_state), scaler->state_dict(),
                                 schedule->state_dict(), position, run_identity_json(options), data});
  last_checkpoint = options.save;
  last_checkpoint_step = position.global_step;
  message("checkpoint saved to " + options.save + " at step " + std::to_string(position.global_step) + " (" + why + ")");
}

// Tells hooks.on_phase that a phase begins, and when the scope ends (an exception included), that it
// ended. Without an on_phase hook it does nothing.
class PhaseScope {
 public:
  PhaseScope(const Run& run, Phase phase) : run_(run), phase_(phase) { notify(true); }
  ~PhaseScope() { notify(false); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  void notify(bool begin) const {
    if (run_.hooks.on_phase)
      run_.hooks.on_phase({phase_, begin, run_.position.epoch, run_.position.global_step, run_.model.get()});
  }
  const Run& run_;
  Phase phase_;
};

// The test split's evaluation, when there is one and it is asked for.
std::optional<EvalResult> evaluate_test(const Run& run) {
  if (!run.inputs.splits.test || !run.options.evaluate || !run.is_root()) return std::nullopt;
  const PhaseScope phase(run, Phase::evaluation);
  return evaluate(*run.model, run.inputs.splits.test, run.inputs.test_transforms, run.options.batch_size,
                  run.options.device, run.options.workers, run.num_classes, run.hooks.should_stop);
}

// ---- one optimizer step -------------------------------------------------------------------------

// Samples in loader batches [first, first + count) of an epoch (the last batch may be short).
std::int64_t samples_in(std::int64_t first, std::int64_t count, std::int64_t batch_size, std::int64_t dataset_size) {
  return std::min((first + count) * batch_size, dataset_size) - first * batch_size;
}

// What one optimizer step trained on, summed over its micro-batches (and with --ddp over the ranks).
struct StepTotals {
  double loss_sum = 0.0;  // of the samples' mean-reduced losses times their count
  double correct = 0.0;
  double samples = 0.0;
};

// With --ddp every rank adds every rank's totals, so each holds the whole run's loss, accuracy and
// sample count (and rank 0's checkpoint the position of all of them). A 3-element host all-reduce.
StepTotals all_ranks(const Run& run, const StepTotals& mine) {
  if (!run.comms.host) return mine;
  const Tensor sums = from_vector(std::vector<double>{mine.loss_sum, mine.correct, mine.samples});
  run.comms.host->all_reduce(sums, dist::ReduceOp::sum);
  const std::vector<double> all = sums.to_vector<double>();
  return {all[0], all[1], all[2]};
}

// Forward, loss and backward of `micro_batches` loader batches, then one optimizer step. Each
// micro-batch's mean loss is weighted by its share of the step's samples, so the accumulated
// gradient is that of the mean over all of them, as one large batch would give. With --ddp the
// gradient buckets are all-reduced (averaged over the ranks) during the last micro-batch's backward
// only: the earlier ones accumulate locally (no_sync).
void optimizer_step(Run& run, std::int64_t micro_batches) {
  const TrainOptions& o = run.options;
  const std::int64_t step_samples = samples_in(run.position.batch, micro_batches, o.batch_size, run.samples_per_epoch);
  StepTotals step;
  const nn::ActivationSavingGuard saving(o.saving);  // what forward saves, and backward's rebuilds
  for (std::int64_t m = 0; m < micro_batches; ++m) {
    std::optional<data::Batch> batch;
    Tensor loss, logits, weighted;
    std::int64_t n = 0;
    {
      const PhaseScope phase(run, Phase::forward);
      batch = run.loader->next();
      FRUGAL_CHECK(batch.has_value(), "the loader ended its epoch early");
      n = batch->inputs.size(0);
      std::optional<nn::AutocastGuard> autocast;
      if (o.amp) autocast.emplace(*o.amp);
      logits = (*run.model)(batch->inputs);
      const MemoryContextScope made_by("loss");
      loss = functional::cross_entropy(logits, batch->labels, {.label_smoothing = o.label_smoothing});
      autocast.reset();
      weighted = functional::mul(loss, static_cast<double>(n) / static_cast<double>(step_samples));
    }
    {
      const PhaseScope phase(run, Phase::backward);
      const MemoryContextScope made_by("backward");
      if (run.ddp) run.ddp->set_sync(m == micro_batches - 1);
      autograd::backward(run.scaler->scale(weighted));
    }
    step.loss_sum += loss.to(Device::cpu()).item<double>() * static_cast<double>(n);
    step.correct += static_cast<double>(
        count_correct(autograd::detach(logits), batch->labels).to(Device::cpu()).item<std::int64_t>());
    step.samples += static_cast<double>(n);
    ++run.position.batch;
  }
  {
    const PhaseScope phase(run, Phase::optimizer);
    if (run.ddp) run.ddp->synchronize();  // every bucket's gradients averaged over the ranks
    {
      const MemoryContextScope made_by("optimizer step");  // the optimizer's state is made by the first one
      if (!run.scaler->step(*run.optimizer)) ++run.skipped_steps;  // a gradient overflowed: no update
    }
    run.scaler->update();
    run.optimizer->zero_grad();
    run.schedule->step();
  }
  const StepTotals all = all_ranks(run, step);
  ++run.position.global_step;
  ++run.steps_taken;
  // Every rank holds the same totals, so every rank stops here together.
  if (!std::isfinite(all.loss_sum) && !o.allow_nonfinite)
    diverged(run, std::string("the loss became ") + (std::isnan(all.loss_sum) ? "nan" : all.loss_sum > 0 ? "inf" : "-inf"));
  run.epoch_loss_sum += all.loss_sum;
  run.epoch_samples += static_cast<std::int64_t>(all.samples);
  run.position.loss_sum += all.loss_sum;
  run.position.correct += static_cast<std::int64_t>(all.correct);
  run.position.samples += static_cast<std::int64_t>(all.samples);
  run.trained_samples += static_cast<std::int64_t>(all.samples);
}

// Whether `mine` holds on any rank (with --ddp, a 1-element all-reduce every rank must enter).
bool any_rank(const Run& run, bool mine) {
  if (!run.comms.host) return mine;
  const Tensor flag = full({1}, mine ? 1 : 0, {.dtype = DType::i32});
  run.comms.host->all_reduce(flag, dist::ReduceOp::max);
  return flag.item<std::int32_t>() != 0;
}

// Whether to stop now (SIGINT): with --ddp every rank stops when any was asked to, at the same step,
// since a rank that went on would wait alone at its next collective.
bool stop_requested(const Run& run) { return any_rank(run, run.hooks.should_stop && run.hooks.should_stop()); }

// The test evaluation (rank 0's), and whether a stop signal cut it short: with --ddp the ranks that
// did not evaluate learn it too, so that none goes on to the next epoch alone.
std::optional<EvalResult> evaluate_test_or_stop(const Run& run, bool& interrupted) {
  std::optional<EvalResult> test = evaluate_test(run);
  interrupted = any_rank(run, test && test->interrupted);
  if (test && test->interrupted) test.reset();  // figures for part of the split only: none reported
  return test;
}

StepInfo step_info(const Run& run, double epoch_seconds, std::int64_t epoch_samples) {
  const TrainingPosition& p = run.position;
  const Memory memory = memory_now(run.options.device);
  StepInfo s;
  s.epoch = p.epoch;
  s.epochs = run.options.epochs;
  s.step_in_epoch = (p.batch + run.options.accum - 1) / run.options.accum;
  s.steps_in_epoch = run.steps_per_epoch;
  s.global_step = p.global_step;
  s.total_steps = run.options.steps ? std::min(*run.options.steps, run.total_steps) : run.total_steps;
  s.loss = p.samples ? p.loss_sum / static_cast<double>(p.samples) : 0.0;
  s.accuracy = p.samples ? static_cast<double>(p.correct) / static_cast<double>(p.samples) : 0.0;
  s.images_per_sec = epoch_seconds > 0 ? static_cast<double>(epoch_samples) / epoch_seconds : 0.0;
  s.epoch_seconds = epoch_seconds;
  s.lr = run.optimizer->param_groups().front().lr;
  s.allocated = memory.allocated;
  s.reserved = memory.reserved;
  s.peak_allocated = memory.peak_allocated;
  s.loss_scale = run.scaler->is_enabled() ? run.scaler->get_scale() : 0.0;
  s.skipped_steps = run.skipped_steps;
  return s;
}

// "mobilenet_v2, 2236106 parameters, on cpu; Fashion-MNIST (...): 60000 train and 10000 test samples of
// [1, 28, 28]; 938 steps per epoch": the data's own description up to its details.
std::string start_line(const Run& run) {
  const data::DatasetSplits& splits = run.inputs.splits;
  const std::string& description = splits.description;
  std::string line = run.options.model + ", " + std::to_string(run.model->parameter_count()) + " parameters, on " +
                     run.options.device.str() + "; " + description.substr(0, description.find(": ")) + ": " +
                     std::to_string(splits.train->size()) + " train";
  if (splits.test) line += " and " + std::to_string(splits.test->size()) + " test";
  return line + " samples of " + shape_str(splits.train->sample_shape()) + "; " + std::to_string(run.steps_per_epoch) +
         " steps per epoch";
}

// The leak check (train/leak_check.h), at the end of every optimizer step; its report, once.
void check_for_leak(Run& run) {
  if (!run.leaks) return;
  const std::optional<LeakReport> leak = run.leaks->after_step(run.position.global_step);
  if (leak && run.hooks.on_warning) run.hooks.on_warning(describe(*leak));
}

// ---- one epoch, the whole run -------------------------------------------------------------------

enum class EpochEnd { finished, stopped, interrupted };

EpochEnd train_epoch(Run& run, StepInfo& last) {
  const TrainOptions& o = run.options;
  run.model->train();
  run.loader->start_epoch(run.position.epoch, run.position.batch);
  run.epoch_loss_sum = 0.0;
  run.epoch_samples = 0;
  const PhaseScope phase(run, Phase::epoch);
  const auto start = Clock::now();
  std::int64_t epoch_samples = 0;
  while (run.position.batch < run.batches_per_epoch) {
    const std::int64_t micro = std::min(o.accum, run.batches_per_epoch - run.position.batch);
    const std::int64_t before = run.trained_samples;
    optimizer_step(run, micro);
    check_for_leak(run);
    epoch_samples += run.trained_samples - before;
    last = step_info(run, seconds_since(start), epoch_samples);
    if (run.hooks.on_step) run.hooks.on_step(last);
    const bool at_end = run.position.batch == run.batches_per_epoch;
    if (o.steps && run.position.global_step >= *o.steps && !at_end) {
      run.train_seconds += seconds_since(start);
      run.save("--steps " + std::to_string(*o.steps));
      return EpochEnd::stopped;
    }
    if (stop_requested(run)) {
      run.train_seconds += seconds_since(start);
      run.save("interrupted");
      return EpochEnd::interrupted;
    }
    if (o.save_every > 0 && run.position.global_step % o.save_every == 0 && !at_end) run.save("--save-every");
  }
  run.train_seconds += seconds_since(start);
  return EpochEnd::finished;
}

// The run's setup (data, model, optimizer, resuming), reported as the setup phase.
std::unique_ptr<Run> start_run(const TrainOptions& options, const TrainHooks& hooks) {
  if (hooks.on_phase) hooks.on_phase({.phase = Phase::setup, .begin = true});
  auto run = std::make_unique<Run>(options, hooks);
  if (hooks.on_phase) hooks.on_phase({Phase::setup, false, run->position.epoch, run->position.global_step, run->model.get()});
  return run;
}

}  // namespace

std::string_view phase_name(Phase phase) {
  static constexpr std::array<std::string_view, kNumPhases> kNames = {"setup",    "epoch",          "forward",
                                                                      "backward", "optimizer step", "evaluation"};
  return kNames[static_cast<std::size_t>(phase)];
}

RunData open_run_data(const std::string& data, const std::string& test_data, std::int64_t image_size, bool augment) {
  RunData run{data::open_dataset(data, test_data, {.image_size = image_size}), {}, {}};
  const data::ImageStatistics stats = data::image_statistics(*run.splits.train);
  run.train_transforms = data::training_transforms(*run.splits.train, image_size, augment, stats);
  run.test_transforms = data::training_transforms(*run.splits.train, image_size, false, stats);
  return run;
}

EvalResult evaluate(nn::Module& model, data::DatasetPtr dataset, const data::Compose& transforms, std::int64_t batch_size,
                    Device device, int workers, std::int64_t num_classes, const std::function<bool()>& should_stop) {
  model.eval();
  autograd::NoGradGuard no_grad;
  data::DataLoader loader(std::move(dataset), {.batch_size = batch_size,
                                               .num_workers = workers,
                                               .transforms = transforms,
                                               .device = device,
                                               .pin_memory = device.is_cuda()});
  EvalResult result;
  result.class_correct.assign(static_cast<std::size_t>(num_classes), 0);
  result.class_total.assign(static_cast<std::size_t>(num_classes), 0);
  double loss_sum = 0.0;
  for (data::Batch& batch : loader.epoch(0)) {
    const Tensor logits = model(batch.inputs);
    loss_sum += cross_entropy(logits, batch.labels, {.reduction = LossReduction::sum}).to(Device::cpu()).item<double>();
    const Tensor predicted = logits.to(Device::cpu()).to(DType::f32);
    const std::vector<float> values = predicted.to_vector<float>();
    const std::vector<std::int64_t> labels = batch.labels.to(Device::cpu()).to_vector<std::int64_t>();
    for (std::size_t row = 0; row < labels.size(); ++row) {
      const float* first = values.data() + row * static_cast<std::size_t>(num_classes);
      const auto best = std::max_element(first, first + num_classes) - first;  // the first maximum, as argmax
      const auto label = static_cast<std::size_t>(labels[row]);
      ++result.class_total[label];
      if (best == labels[row]) ++result.class_correct[label];
    }
    result.samples += static_cast<std::int64_t>(labels.size());
    if (should_stop && should_stop()) {
      result.interrupted = true;
      break;
    }
  }
  std::int64_t correct = 0;
  for (std::int64_t c : result.class_correct) correct += c;
  if (result.samples > 0) {
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
    result.loss = loss_sum / static_cast<double>(result.samples);
  }
  return result;
}

namespace {

// This rank's peaks and communication times, as every rank's (gathered over MPI) with --ddp.
std::vector<RankReport> rank_reports(const Run& run, const TrainResult& result) {
  if (!run.comms.host) return {};
  std::vector<double> mine{static_cast<double>(result.peak_allocated_bytes), static_cast<double>(result.peak_reserved_bytes),
                           run.ddp->wait_seconds(), run.ddp->communication_seconds()};
  for (std::size_t bytes : result.peak_bytes_by_tag) mine.push_back(static_cast<double>(bytes));
  const auto width = static_cast<std::int64_t>(mine.size());
  const Tensor all = empty({run.world_size() * width}, {.dtype = DType::f64});
  run.comms.host->all_gather(from_vector(mine), all);
  const std::vector<double> values = all.to_vector<double>();
  std::vector<RankReport> reports(static_cast<std::size_t>(run.world_size()));
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const double* v = values.data() + r * static_cast<std::size_t>(width);
    RankReport& report = reports[r];
    report.rank = static_cast<int>(r);
    report.peak_allocated_bytes = static_cast<std::size_t>(v[0]);
    report.peak_reserved_bytes = static_cast<std::size_t>(v[1]);
    report.communication_wait_seconds = v[2];
    report.communication_seconds = v[3];
    for (std::size_t t = 0; t < report.peak_bytes_by_tag.size(); ++t) report.peak_bytes_by_tag[t] = static_cast<std::size_t>(v[4 + t]);
  }
  return reports;
}

// `shape` is set once the data is open: what the planner needs to predict fixes for an out-of-memory.
TrainResult run_training(const TrainOptions& options, const TrainHooks& hooks, PlanShape& shape) {
  const auto start = Clock::now();
  const std::unique_ptr<Run> started = start_run(options, hooks);
  Run& run = *started;
  shape = {.in_channels = run.inputs.splits.train->sample_shape()[0], .num_classes = run.num_classes};
  LayerMemoryContexts contexts(*run.model);  // the layers name what they allocate (train/memory_context.h)
  const nn::ModuleCallObserverScope observe(contexts);
  default_caching_allocator(options.device).reset_peak_stats();
  if (hooks.on_start) hooks.on_start(start_line(run));
  TrainResult result;
  StepInfo last;
  EpochEnd end = EpochEnd::finished;
  while (run.position.epoch < options.epochs && !(options.steps && run.position.global_step >= *options.steps)) {
    end = train_epoch(run, last);
    if (end != EpochEnd::finished) break;
    bool evaluation_interrupted = false;
    EpochInfo info{last, evaluate_test_or_stop(run, evaluation_interrupted)};
    result.test = info.test;
    if (hooks.on_epoch_end) hooks.on_epoch_end(info);
    run.position = {.epoch = run.position.epoch + 1, .global_step = run.position.global_step};
    ++result.epochs;
    run.save("end of epoch " + std::to_string(run.position.epoch));
    if (evaluation_interrupted) {
      end = EpochEnd::interrupted;
      break;
    }
  }
  if (end == EpochEnd::stopped) {  // --steps: the model as it stopped (after SIGINT, none: it was asked to stop)
    bool evaluation_interrupted = false;
    result.test = evaluate_test_or_stop(run, evaluation_interrupted);
    if (evaluation_interrupted) end = EpochEnd::interrupted;
  }
  result.final_loss = run.epoch_samples > 0 ? run.epoch_loss_sum / static_cast<double>(run.epoch_samples)
                                            : std::numeric_limits<double>::quiet_NaN();
  result.steps_taken = run.steps_taken;
  result.skipped_steps = run.skipped_steps;
  if (run.scaler->is_enabled()) result.loss_scale = run.scaler->get_scale();
  const CachingStats stats = default_caching_allocator(options.device).caching_stats();
  const AllocatorStats tagged = default_caching_allocator(options.device).stats();
  result.model = options.model;
  result.parameters = run.model->parameter_count();
  result.device = options.device.str();
  result.batch_size = options.batch_size;
  result.accum = options.accum;
  result.steps = run.position.global_step;
  result.images_per_sec = run.train_seconds > 0 ? static_cast<double>(run.trained_samples) / run.train_seconds : 0.0;
  result.peak_allocated_bytes = static_cast<std::size_t>(stats.allocated_bytes.peak);
  result.peak_reserved_bytes = static_cast<std::size_t>(stats.reserved_bytes.peak);
  for (int t = 0; t < kNumMemoryTags; ++t)
    result.peak_bytes_by_tag[static_cast<std::size_t>(t)] = static_cast<std::size_t>(tagged.tag_bytes[static_cast<std::size_t>(t)].peak);
  result.seed = options.seed;
  result.stopped_early = end != EpochEnd::finished;
  result.interrupted = end == EpochEnd::interrupted;
  result.training_done = (options.steps && run.position.global_step >= *options.steps) || run.position.epoch >= options.epochs;
  result.checkpoint = run.last_checkpoint;
  result.leak = run.leaks ? run.leaks->report() : std::nullopt;
  result.ranks = run.world_size();
  result.root = run.is_root();
  result.per_rank = rank_reports(run, result);
  result.wall_seconds = seconds_since(start);
  return result;
}

}  // namespace

// An out-of-memory anywhere in the run leaves with the explanation of what filled the device.
TrainResult train(const TrainOptions& options, const TrainHooks& hooks) {
  validate(options);
  OomExplainer explainer(default_caching_allocator(options.device));
  PlanShape shape{.in_channels = 0, .num_classes = 0};
  try {
    return run_training(options, hooks, shape);
  } catch (const OutOfMemoryError& error) {
    const FixPlanner planner = hooks.plan_fixes ? hooks.plan_fixes : [&shape](const TrainOptions& failing) {
      return shape.in_channels > 0 ? planned_fixes(failing, shape) : std::vector<MemoryFix>{};
    };
    explainer.rethrow_explained(error, options, planner);
  }
}

}  // namespace frugal::train
