// train() (see trainer.h). Read top to bottom: what one run holds and how it is set up, resuming and
// saving, one optimizer step with its bookkeeping, one epoch, the whole run. The parts live beside it:
// the recipe (train/recipe.h), the step itself (train/step.h), the ranks of --ddp (train/ranks.h), the
// data and the evaluation (train/evaluation.h).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "dist/ddp.h"
#include "models/registry.h"
#include "train/checkpoint.h"
#include "train/memory_context.h"
#include "train/planner.h"
#include "train/ranks.h"
#include "train/recipe.h"
#include "train/step.h"

namespace frugal::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Memory {
  std::size_t allocated, reserved, peak_allocated;
};

Memory memory_now(Device device) {
  const CachingStats s = default_caching_allocator(device).caching_stats();
  return {static_cast<std::size_t>(s.allocated_bytes.current), static_cast<std::size_t>(s.reserved_bytes.current),
          static_cast<std::size_t>(s.allocated_bytes.peak)};
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
  Recipe recipe;  // the optimizer, its schedule and the GradScaler
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

  Run(const TrainOptions& o, const TrainHooks& h, std::optional<data::DatasetSplits> opened);
  void resume_from(const std::string& path);
  void save(const std::string& why);
  void message(const std::string& line) const {
    if (hooks.on_message) hooks.on_message(line);
  }
  // Rank 0 of a --ddp run, or the one process: who evaluates and writes checkpoints.
  bool is_root() const { return comms.rank() == 0; }
  // With --zero 3 the model's parameters gathered on every rank for as long as the result lives
  // (dist/ddp.h): what reading or loading the whole model needs. Every rank calls it together.
  std::optional<dist::DistributedDataParallel::FullParameters> whole_model() const {
    if (!ddp) return std::nullopt;
    return ddp->full_parameters();
  }
  int world_size() const { return comms.world_size(); }
};

Run::Run(const TrainOptions& o, const TrainHooks& h, std::optional<data::DatasetSplits> opened) : options(o), hooks(h) {
  if (o.ddp) {
    comms = open_communicators(o);
    check_ranks_agree(*comms.host, rank_agreement_json(o));
  }
  if (o.memory_limit) set_memory_limit(o.device, *o.memory_limit);
  manual_seed(o.seed);  // the initial weights and the dropout draws
  inputs = opened ? open_run_data(std::move(*opened), o.image_size, o.augment)
                  : open_run_data(o.data, o.test_data, o.image_size, o.augment);
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
  recipe = make_recipe(*model, ddp.get(), o, total_steps);
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
    {
      const auto whole = whole_model();  // ZeRO-3: each rank keeps its chunk of the loaded weights
      model->load_state_dict(c.model);
    }
    recipe.optimizer->load_state_dict(c.optimizer);
    if (recipe.scaler->is_enabled()) recipe.scaler->load_state_dict(c.scaler);
    recipe.schedule->load_state_dict(c.schedule);
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
  // ZeRO's state is sharded: every rank takes part in consolidating it, and under ZeRO-3 in
  // gathering the weights. The weights are the same on every rank, so rank 0 alone writes the file.
  const auto whole = whole_model();
  nn::StateDict optimizer_state = recipe.optimizer->state_dict();
  if (!is_root()) return;
  position.generator = default_generator().state();
  nn::StateDict weights = model->state_dict();
  // A finite loss can still leave non-finite weights behind its step: never replace a good
  // checkpoint with them.
  if (!options.allow_nonfinite) {
    const std::string bad = first_nonfinite(weights, optimizer_state);
    if (!bad.empty()) diverged(*this, "'" + printable(bad) + "' holds a NaN or an infinity; nothing was saved");
  }
  save_checkpoint(options.save, {std::move(weights), std::move(optimizer_state), recipe.scaler->state_dict(),
                                 recipe.schedule->state_dict(), position, run_identity_json(options), data});
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

// The run's phase of a step's phase (the run's add setup, epoch and evaluation around them).
Phase run_phase(StepPhase phase) {
  switch (phase) {
    case StepPhase::forward: return Phase::forward;
    case StepPhase::backward: return Phase::backward;
    case StepPhase::optimizer: return Phase::optimizer;
  }
  FRUGAL_THROW(Error, "unknown step phase ", static_cast<int>(phase));
}

// One optimizer step of `micro_batches` loader batches (train/step.h), each micro-batch's forward and
// backward and the update reported as phases; then the step's totals, added over the ranks.
void optimizer_step(Run& run, std::int64_t micro_batches) {
  const TrainOptions& o = run.options;
  const std::int64_t step_samples = samples_in(run.position.batch, micro_batches, o.batch_size, run.samples_per_epoch);
  const StepHooks hooks{
      .next_batch =
          [&run] {
            std::optional<data::Batch> batch = run.loader->next();
            FRUGAL_CHECK(batch.has_value(), "the loader ended its epoch early");
            ++run.position.batch;
            return std::move(*batch);
          },
      .on_phase =
          [&](StepPhase phase, bool begin, std::int64_t) {
            if (run.hooks.on_phase)
              run.hooks.on_phase({run_phase(phase), begin, run.position.epoch, run.position.global_step,
                                  run.model.get()});
          }};
  const StepResult step = train::optimizer_step(run.recipe.parts(*run.model, run.ddp.get()), step_recipe(o),
                                                micro_batches, step_samples, hooks);
  if (!step.updated) ++run.skipped_steps;  // a gradient overflowed: the GradScaler skipped the update
  const StepTotals all = all_ranks(run.comms, step.totals);
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

// Whether to stop now (SIGINT): with --ddp every rank stops when any was asked to, at the same step,
// since a rank that went on would wait alone at its next collective.
bool stop_requested(const Run& run) { return any_rank(run.comms, run.hooks.should_stop && run.hooks.should_stop()); }

// The test evaluation (rank 0's), and whether a stop signal cut it short: with --ddp the ranks that
// did not evaluate learn it too, so that none goes on to the next epoch alone.
std::optional<EvalResult> evaluate_test_or_stop(const Run& run, bool& interrupted) {
  std::optional<EvalResult> test;
  {
    // ZeRO-3: every rank gathers the weights, rank 0 evaluates (the same condition on every rank).
    const bool evaluating = run.inputs.splits.test && run.options.evaluate;
    const auto whole = evaluating ? run.whole_model() : std::nullopt;
    test = evaluate_test(run);
  }
  interrupted = any_rank(run.comms, test && test->interrupted);
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
  s.lr = run.recipe.optimizer->param_groups().front().lr;
  s.allocated = memory.allocated;
  s.reserved = memory.reserved;
  s.peak_allocated = memory.peak_allocated;
  s.loss_scale = run.recipe.scaler->is_enabled() ? run.recipe.scaler->get_scale() : 0.0;
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
std::unique_ptr<Run> start_run(const TrainOptions& options, const TrainHooks& hooks,
                               std::optional<data::DatasetSplits> opened) {
  if (hooks.on_phase) hooks.on_phase({.phase = Phase::setup, .begin = true});
  auto run = std::make_unique<Run>(options, hooks, std::move(opened));
  if (hooks.on_phase) hooks.on_phase({Phase::setup, false, run->position.epoch, run->position.global_step, run->model.get()});
  return run;
}

}  // namespace

std::string_view phase_name(Phase phase) {
  static constexpr std::array<std::string_view, kNumPhases> kNames = {"setup",    "epoch",          "forward",
                                                                      "backward", "optimizer step", "evaluation"};
  return kNames[static_cast<std::size_t>(phase)];
}

namespace {

// `shape` is set once the data is open: what the planner needs to predict fixes for an out-of-memory.
TrainResult run_training(const TrainOptions& options, const TrainHooks& hooks, std::optional<data::DatasetSplits> opened,
                         PlanShape& shape) {
  const auto start = Clock::now();
  // The pinned host memory this run takes, the offloaded optimizer's (made with the run) included.
  CachingAllocator& pinned = pinned_host_allocator();
  pinned.reset_peak_stats();
  const std::int64_t pinned_before = pinned.stats().requested_bytes.current;
  const std::unique_ptr<Run> started = start_run(options, hooks, std::move(opened));
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
  if (run.recipe.scaler->is_enabled()) result.loss_scale = run.recipe.scaler->get_scale();
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
  result.peak_pinned_host_bytes = static_cast<std::size_t>(pinned.stats().requested_bytes.peak - pinned_before);
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
  result.per_rank = rank_reports(run.comms, run.ddp.get(), result);
  result.wall_seconds = seconds_since(start);
  return result;
}

}  // namespace

// An out-of-memory anywhere in the run leaves with the explanation of what filled the device.
TrainResult train(const TrainOptions& options, const TrainHooks& hooks, std::optional<data::DatasetSplits> opened) {
  validate(options);
  OomExplainer explainer(default_caching_allocator(options.device));
  PlanShape shape{.in_channels = 0, .num_classes = 0};
  try {
    return run_training(options, hooks, std::move(opened), shape);
  } catch (const OutOfMemoryError& error) {
    const FixPlanner planner = hooks.plan_fixes ? hooks.plan_fixes : [&shape](const TrainOptions& failing) {
      return shape.in_channels > 0 ? planned_fixes(failing, shape) : std::vector<MemoryFix>{};
    };
    explainer.rethrow_explained(error, options, planner);
  }
}

}  // namespace frugal::train
