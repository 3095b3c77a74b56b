// `frugal train` (see train.h): flags into TrainOptions, SIGINT into a request to stop, the trainer's
// reports into the progress display, and the result into a summary, a JSON file and an exit code.
#include "cli/train.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/interrupt.h"
#include "cli/train_output.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "core/mapped_file.h"
#include "models/registry.h"
#include "train/batch_finder.h"
#include "train/checkpoint.h"
#include "train/planner.h"
#include "train/progress.h"
#include "train/trainer.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"

namespace frugal::cli {

namespace {

constexpr int kExitOutOfMemory = 3;

// Exit 3: where it happened, the allocator's explanation, what filled the device when the trainer
// saw it happen (train/oom_explainer.h), the usual remedies, and the checkpoint kept.
int report_out_of_memory(const OutOfMemoryError& e, const train::TrainOptions& o, std::int64_t step) {
  std::cout << std::flush;
  std::cerr << "\nfrugal train: out of memory at step " << step << " (batch size " << o.batch_size << " on "
            << o.device.str() << "):\n"
            << e.message() << "\n";
  if (const auto* explained = dynamic_cast<const train::TrainingOutOfMemoryError*>(&e))
    std::cerr << train::describe(explained->explanation());
  std::cerr << "Smaller batches (--batch-size, with --accum to keep the effective batch), --checkpoint-blocks, "
               "--checkpoint-activations, --bn-from-output, --compress-activations, --optimizer-in-backward, --optimizer "
               "adamw8bit or adafactor, --offload optimizer or activations, "
            << (o.ddp ? "--zero 1, 2 or 3, " : "") << "or --amp bf16 need less. "
            << (o.save.empty() ? "" : "The last checkpoint, " + o.save + ", is intact.") << "\n";
  return kExitOutOfMemory;
}

// A problem the run survives (the leak check's report): on stderr, after the progress line so far.
void print_warning(const std::string& text) {
  std::cout << std::flush;
  std::cerr << "\nfrugal train: " << text << std::endl;
}

}  // namespace

TrainCommand::TrainCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("train", "Train a model on a dataset: progress, memory by tag, checkpoints")) {
  const train::TrainOptions defaults;  // the help shows the defaults train/options.h holds
  CLI::App* c = command_;
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a flag given twice: the last wins
  model_.add_to(*c, FlagsFor::train);
  c->add_option("--dropout", dropout_, "MobileNetV2's classifier dropout probability (default 0.2, torchvision's)");
  data_.add_to(*c, FlagsFor::train);
  c->add_flag("--augment", augment_, "Random crop with padding and horizontal flip");
  c->add_option("--epochs", epochs_, "Epochs; the schedule spans them all (default " + std::to_string(defaults.epochs) + ")")->check(between(1, 100000));
  c->add_option("--steps", steps_, "Stop after this global optimizer step, counted from the start of training")
      ->check(between(1, 1'000'000'000));
  step_.add_to(*c, FlagsFor::train);
  c->add_option("--global-batch", global_batch_, "Samples per optimizer step: sets --accum from the batch size (with auto too)")
      ->check(between(2, 1 << 30));
  c->add_option("--lr", lr_, "Peak learning rate (default " + default_number(defaults.lr) + ")");
  c->add_option("--wd", wd_, "Weight decay, on weights only (default " + default_number(defaults.weight_decay) + ")");
  c->add_option("--schedule", schedule_, "constant, cosine or onecycle, per step over all epochs (default " + train::schedule_name(defaults.schedule) + ")")
      ->check(CLI::IsMember({"constant", "cosine", "onecycle"}));
  c->add_option("--warmup", warmup_, "Fraction of the steps spent warming up (default " + default_number(defaults.warmup) + ")");
  c->add_option("--label-smoothing", label_smoothing_, "Cross-entropy label smoothing (default " + default_number(defaults.label_smoothing) + ")");
  c->add_flag("--no-eval", no_eval_, "Skip the test evaluation after each epoch");
  c->add_option("--seed", seed_, "Seed of the weights, the shuffle, the augmentation and dropout (default " + std::to_string(defaults.seed) + ")");
  device_.add_to(*c);
  c->add_option("--memory-limit", memory_limit_, "Cap the device's memory, e.g. 512MiB: a simulated device on the CPU too");
  c->add_option("--save", save_, "Checkpoint file: written at each epoch's end, on --steps, on Ctrl-C")->check(not_empty());
  c->add_option("--save-every", save_every_, "Also save every N optimizer steps")->check(between(1, 1'000'000'000));
  c->add_option("--resume", resume_, "Continue the run a checkpoint stopped (same flags)")->check(not_empty());
  c->add_option("--json", json_, "Write the run's summary as one JSON document to this file")->check(not_empty());
  add_memory_flags(*c, memory_);
  c->add_flag("--no-leak-check", no_leak_check_, "Do not compare memory at the end of each step with the step before");
  c->add_flag("--no-plan-check", no_plan_check_, "With --memory-limit: start even when the plan cannot fit, to see the "
              "measured out-of-memory and its explanation");
  c->add_flag("--allow-nonfinite", allow_nonfinite_, "Train on after a NaN or infinite loss, and save such weights "
              "(by default the run stops with exit 1 and keeps the last good checkpoint)");
  c->add_flag("--ddp", ddp_, "Data parallel over the ranks mpirun started: MPI between CPUs, NCCL between GPUs; "
              "--batch-size is per rank");
  ddp_flags_.add_to(*c);
  c->add_option("--ddp-timeout", ddp_timeout_, "With --ddp: seconds a collective may take before every rank stops (default " +
                default_number(defaults.ddp_timeout) + ")");
}

train::TrainOptions TrainCommand::options_from_flags() const {
  train::TrainOptions o;
  model_.apply(o);
  step_.apply(o);
  o.dropout = dropout_;
  o.data = data_.data;
  o.test_data = data_.test_data;
  o.augment = augment_;
  o.evaluate = !no_eval_;
  if (epochs_) o.epochs = *epochs_;
  o.steps = steps_;
  if (lr_) o.lr = *lr_;
  if (wd_) o.weight_decay = *wd_;
  if (!schedule_.empty()) o.schedule = train::parse_schedule(schedule_);
  if (warmup_) o.warmup = *warmup_;
  if (label_smoothing_) o.label_smoothing = *label_smoothing_;
  if (seed_) o.seed = *seed_;
  if (!memory_limit_.empty()) o.memory_limit = parse_size(memory_limit_);
  o.save = save_;
  if (save_every_) o.save_every = *save_every_;
  o.resume = resume_;
  o.json = json_;
  o.leak_check = !no_leak_check_;
  o.allow_nonfinite = allow_nonfinite_;
  FRUGAL_CHECK_VALUE(!(global_batch_ && step_.accum), "--global-batch sets --accum itself: give one of them");
  apply_ddp_flags(o);
  train::validate(o);
  o.device = device_.resolve();
  if (o.ddp) {  // MPI starts once the flags are known good; the world's size comes from mpirun
    dist::mpi_init();
    o.ranks = dist::mpi_world_size();
    if (o.device.is_cuda())  // one GPU per rank: each local rank takes its own
      o.device = Device::cuda(dist::device_for_local_rank(dist::mpi_local_rank(), cuda_status().device_count));
  }
  return o;
}

// --ddp and its options (the world's size is read once MPI starts, in options_from_flags).
void TrainCommand::apply_ddp_flags(train::TrainOptions& o) const {
  FRUGAL_CHECK_VALUE(ddp_ || !(ddp_flags_.any() || ddp_timeout_),
                     "--bucket-cap, --bucket-views, --zero and --ddp-timeout need --ddp");
  if (!ddp_) return;
  FRUGAL_CHECK_VALUE(step_.batch_size != "auto", "--batch-size auto with --ddp is not supported: give the batch per rank "
                     "(frugal plan --ddp N --budget SIZE finds one)");
  o.ddp = true;
  ddp_flags_.apply(o);
  if (ddp_timeout_) o.ddp_timeout = *ddp_timeout_;
}

// The batch size and accumulation: --batch-size auto searches (train/batch_finder.h) unless resuming,
// when the checkpoint's are the run's; --global-batch with a given batch size sets the accumulation.
// Options it changes are validated again; a batch given by hand was validated with the rest.
void TrainCommand::choose_batch(train::TrainOptions& o, const train::RunShape& shape,
                                std::optional<train::BatchChoice>& choice) const {
  if (step_.batch_size != "auto" && !global_batch_) return;
  if (step_.batch_size == "auto" && !o.resume.empty()) {
    const nlohmann::json identity = nlohmann::json::parse(train::load_checkpoint(o.resume).run_identity);
    o.batch_size = identity.at("batch-size").get<std::int64_t>();
    o.accum = identity.at("accum").get<std::int64_t>();
    std::cout << "batch size auto: " << o.batch_size << " x " << o.accum << ", as the checkpoint's run chose" << std::endl;
  } else if (step_.batch_size == "auto") {
    train::BatchSearchOptions search{.global_batch = global_batch_};
    search.on_trial = [](const train::BatchTrial& t) {
      if (!t.planned) std::cout << "batch size auto: trying two training steps at batch " << t.batch_size << " ..." << std::endl;
    };
    choice = train::find_batch_size(o, shape, search);
    std::cout << train::describe(*choice) << std::flush;
    o.batch_size = choice->batch_size;
    o.accum = choice->accum;
  } else if (global_batch_) {
    FRUGAL_CHECK_VALUE(*global_batch_ % o.batch_size == 0, "--global-batch ", *global_batch_,
                       " is not a multiple of --batch-size ", o.batch_size, ": give auto or a divisor");
    o.accum = *global_batch_ / o.batch_size;
  }
  // The accumulation came from --global-batch here, not from an --accum the user gave: say so.
  FRUGAL_CHECK_VALUE(!o.optimizer_in_backward || o.accum == 1, "--optimizer-in-backward needs each step in one "
                     "micro-batch, but --global-batch ", global_batch_.value_or(0), " takes ", o.accum, " of ",
                     o.batch_size, ": a smaller --global-batch, or no --optimizer-in-backward");
  train::validate(o);
}

// Every file the run writes, checked before any work (core/output_paths.h): none may be a device, a
// FIFO, a folder, another output or what the run reads. --save may name the --resume file: a run
// continued in place has read the checkpoint whole before its first save.
void check_outputs(const train::TrainOptions& o, const MemoryFlags& memory, const train::RunShape& shape) {
  const std::vector<NamedPath> inputs = data_inputs(shape.sources, o.test_data);
  const std::vector<NamedPath> outputs = {{"--save", o.save},
                                          {"--json", o.json},
                                          {"--memory-timeline", memory.timeline_html},
                                          {"--chrome-trace", memory.chrome_trace},
                                          {"--report", memory.report}};
  check_output_paths(outputs, inputs);
  check_output_paths({outputs.begin() + 1, outputs.end()}, {{"--resume", o.resume}});
}

// The planner's prediction of the run (train/planner.h), printed before it starts; none, with the
// reason, when the run cannot be planned.
std::optional<train::MemoryPlan> predict(const train::TrainOptions& o, const train::RunShape& shape) {
  try {
    train::MemoryPlan plan = train::plan_memory(o, shape.plan);
    std::cout << "planned peak: " << format_size(static_cast<std::size_t>(plan.peak_bytes)) << " allocated, "
              << format_size(static_cast<std::size_t>(plan.peak_reserved_bytes)) << " reserved, in "
              << plan.peak_phase << "; device needed " << format_size(static_cast<std::size_t>(plan.device_needed_bytes))
              << " (frugal plan)" << std::endl;
    return plan;
  } catch (const Error& e) {
    std::cout << "planned peak: none, the planner could not plan this run (" << e.message() << ")" << std::endl;
    return std::nullopt;
  }
}

// Under --memory-limit, a run whose plan allocates more than the limit at its peak cannot fit (the
// caching allocator reserves at least what is allocated): an OutOfMemoryError now, before the first
// step, rather than at the step that fails.
void refuse_impossible(const train::TrainOptions& o, const train::MemoryPlan& plan) {
  if (!o.memory_limit || static_cast<std::size_t>(plan.peak_bytes) <= *o.memory_limit) return;
  FRUGAL_THROW(OutOfMemoryError, "the plan of this run allocates ", format_size(static_cast<std::size_t>(plan.peak_bytes)),
               " at its peak (in ", plan.peak_phase, "), more than --memory-limit ", format_size(*o.memory_limit),
               ": it cannot fit, so it was not started. Smaller batches (--batch-size, with --accum to keep the "
               "effective batch), --checkpoint-activations, --optimizer-in-backward, --optimizer adamw8bit or adafactor, or "
               "--amp bf16 need less: frugal plan --budget ",
               format_size(*o.memory_limit), " ranks them; --no-plan-check starts it anyway");
}

// With --ddp, what a rank's errors are prefixed with, and whether it is the rank that reports.
struct RankIdentity {
  bool ddp = false;
  int rank = 0, ranks = 1;
  bool root() const { return rank == 0; }
  std::string command() const {
    return ddp ? "train (rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ")" : "train";
  }
  // After a rank reported its error: the others may be waiting in a collective for it, so every rank
  // ends now (MPI_Abort), with this rank's exit code.
  int end(int exit_code) const {
    if (ddp && ranks > 1) dist::mpi_abort(exit_code);
    return exit_code;
  }
};

int TrainCommand::run() const {
  train::TrainOptions o;
  RankIdentity rank;
  std::optional<TrainMemory> memory;  // the memory flags' recorder and output files
  std::optional<train::BatchChoice> batch_choice;
  std::optional<train::MemoryPlan> plan;
  std::optional<train::RunShape> shape;  // the data, opened once: the checks, the batch search, the plan and the run read it
  try {
    o = options_from_flags();
    if (o.ddp) rank = {.ddp = true, .rank = dist::mpi_rank(), .ranks = o.ranks};
    shape = train::run_shape(o);
    check_outputs(o, memory_, *shape);
    choose_batch(o, *shape, batch_choice);
    memory.emplace(rank.root() ? memory_ : MemoryFlags{}, o);  // a bad output path fails here, before any planning
    if (rank.root()) plan = predict(o, *shape);
    if (plan) {
      if (!no_plan_check_) refuse_impossible(o, *plan);
      memory->set_plan(*plan);
    }
  } catch (const OutOfMemoryError& e) {
    std::cerr << "frugal " << rank.command() << ": " << e.message() << "\n";
    return rank.end(kExitOutOfMemory);
  } catch (const Error& e) {
    return rank.end(report_error(rank.command(), e));
  }

  // A live line redrawn with \r and escape codes only on a terminal. Under mpirun a rank's stdout is
  // often a pseudo-terminal that mpirun copies into a log: plain lines there.
  const bool terminal = ::isatty(STDOUT_FILENO) == 1 && !o.ddp && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
  train::Progress progress(std::cout, terminal, terminal_columns());
  train::StepInfo last_step;
  train::TrainHooks hooks;
  hooks.should_stop = [] { return interrupted_signal() != 0; };
  if (rank.root()) {  // with --ddp the other ranks train silently
    hooks.on_start = [&](const std::string& line) { std::cout << line << std::endl; };
    hooks.on_step = [&](const train::StepInfo& s) {
      last_step = s;
      progress.step(step_report(s));
    };
    hooks.on_epoch_end = [&](const train::EpochInfo& e) { progress.end_epoch(step_report(e.last), epoch_summary(e)); };
    hooks.on_message = [&](const std::string& line) { progress.message(line); };
    memory->attach(hooks);
    hooks.on_warning = print_warning;
  }

  // Loader reads must not fail with EINTR; under mpirun SIGTERM is the job's end (cli/interrupt.h).
  const InterruptScope stop_signals(/*restart_system_calls=*/true, /*catch_sigterm=*/!o.ddp);
  try {
    const train::TrainResult result = train::train(o, hooks, std::move(shape->splits));
    if (!result.root) return result.interrupted ? interrupted_exit_code() : 0;
    print_summary(std::cout, result);
    if (plan) print_planned_peak(std::cout, result, *plan);
    memory->finish(result, std::cout);
    if (!o.json.empty()) {
      nlohmann::ordered_json document = result_json(result);
      document["predicted_peak_bytes"] = plan ? nlohmann::ordered_json(plan->peak_bytes) : nlohmann::ordered_json(nullptr);
      if (batch_choice) document["batch_search"] = batch_search_json(*batch_choice);
      memory->add_to_json(document);
      write_json_file(o.json, document);
    }
    if (result.interrupted && result.training_done) {  // only the final evaluation was cut short: nothing to resume
      std::cerr << "frugal train: stopped by " << ::strsignal(interrupted_signal())
                << " in the final evaluation; training had finished at step " << result.steps
                << (result.checkpoint.empty() ? "" : "; frugal eval --weights " + result.checkpoint + " evaluates it")
                << "\n";
      return interrupted_exit_code();
    }
    if (result.interrupted) {
      std::cerr << "frugal train: stopped by " << ::strsignal(interrupted_signal()) << " after step " << result.steps
                << (result.checkpoint.empty() ? " (no --save, nothing kept)"
                                              : "; resume with --resume " + result.checkpoint)
                << "\n";
      return interrupted_exit_code();
    }
    return 0;
  } catch (const OutOfMemoryError& e) {
    return rank.end(report_out_of_memory(e, o, last_step.global_step + 1));
  } catch (const train::RanksDisagreeError& e) {  // every rank knows: none waits for another, no abort
    return report_error(rank.command(), e);
  } catch (const Error& e) {
    return rank.end(report_error(rank.command(), e));
  }
}

}  // namespace frugal::cli
