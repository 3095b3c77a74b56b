// The memory flags of `frugal train` (see train_memory.h).
#include "cli/train_memory.h"

#include <CLI/CLI.hpp>

#include "cli/subcommand.h"
#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "train/memory_pages.h"

namespace frugal::cli {

namespace {

std::unique_ptr<AtomicFile> open_output(const std::string& path) {
  return path.empty() ? nullptr : std::make_unique<AtomicFile>(path);
}

void write_text(AtomicFile& file, const std::string& text) {
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace

void add_memory_flags(CLI::App& command, MemoryFlags& flags) {
  command.add_option("--memory-timeline", flags.timeline_html,
                     "Write one step's memory by tag over time, with phases and modules, as a self-contained HTML page")
      ->check(not_empty());
  command.add_option("--chrome-trace", flags.chrome_trace, "Write the same step as Chrome trace-event JSON (Perfetto)")
      ->check(not_empty());
  command.add_option("--timeline-step", flags.timeline_step,
                     "The step of this run that --memory-timeline and --chrome-trace show (default 2: after warm-up)")
      ->check(between(1, 1'000'000'000));
  command.add_flag("--memory-report", flags.memory_report,
                   "Print memory by phase (and add it to --json), and what empty_cache() gives back at the end");
  command.add_option("--report", flags.report,
                     "Write a Markdown run report: options, data and model, mermaid charts, memory tables")
      ->check(not_empty());
}

TrainMemory::TrainMemory(const MemoryFlags& flags, const train::TrainOptions& options) : flags_(flags), options_(options) {
  const bool timeline = !flags.timeline_html.empty() || !flags.chrome_trace.empty();
  FRUGAL_CHECK_VALUE(!timeline || !options.steps || flags.timeline_step <= *options.steps, "--timeline-step ",
                     flags.timeline_step, " is past --steps ", *options.steps);
  html_ = open_output(flags.timeline_html);
  trace_ = open_output(flags.chrome_trace);
  report_ = open_output(flags.report);
  const bool phases = flags.memory_report || report_;
  if (!timeline && !phases) return;
  recorder_ = std::make_unique<train::MemoryRecorder>(
      default_caching_allocator(options.device),
      train::MemoryRecorder::Options{.timeline_step = timeline ? std::optional(flags.timeline_step) : std::nullopt,
                                     .phase_memory = phases});
}

TrainMemory::~TrainMemory() = default;

void TrainMemory::attach(train::TrainHooks& hooks) {
  if (!recorder_) return;
  observing_ = std::make_unique<nn::ModuleCallObserverScope>(*recorder_);
  observing_backward_ = std::make_unique<autograd::BackwardNodeObserverScope>(*recorder_);
  hooks.on_phase = [recorder = recorder_.get(), next = hooks.on_phase](const train::PhaseEvent& event) {
    recorder->on_phase(event);
    if (next) next(event);
  };
  hooks.on_start = [this, next = hooks.on_start](const std::string& line) {
    description_ = line;
    if (next) next(line);
  };
}

void TrainMemory::finish(const train::TrainResult& result, std::ostream& out) {
  if (!recorder_) return;
  train::MemoryReport memory{recorder_->phase_memory(), 0, 0, {}};
  if (plan_) train::set_planned_peaks(memory, *plan_);
  if (flags_.memory_report || report_) {
    CachingAllocator& allocator = default_caching_allocator(options_.device);
    memory.reserved_before_empty_cache = static_cast<std::size_t>(allocator.caching_stats().reserved_bytes.current);
    allocator.empty_cache();
    memory.reserved_after_empty_cache = static_cast<std::size_t>(allocator.caching_stats().reserved_bytes.current);
    report_json_ = train::memory_report_json(memory);
  }
  if (flags_.memory_report) out << "\n" << train::memory_report_text(memory) << std::flush;
  const std::optional<train::MemoryTimeline>& timeline = recorder_->timeline();
  const bool want_timeline = html_ || trace_;
  FRUGAL_CHECK_VALUE(!want_timeline || timeline || result.interrupted, "--timeline-step ", flags_.timeline_step,
                     ": the run ended before training that many steps");
  if (timeline && html_) write_text(*html_, train::memory_timeline_html(*timeline));
  if (timeline && trace_) write_text(*trace_, train::memory_timeline_chrome_trace(*timeline).dump() + "\n");
  if (report_) {
    train::RunReport report{options_, description_, result, recorder_->spans(), memory, std::nullopt, 0};
    if (timeline) {
      report.step_peak = train::timeline_peak(*timeline, train::timeline_points(*timeline));
      report.step = timeline->step;
    }
    write_text(*report_, train::run_report_markdown(report));
  }
}

void TrainMemory::add_to_json(nlohmann::ordered_json& document) const {
  if (report_json_) document["memory_report"] = *report_json_;
}

}  // namespace frugal::cli
