// The memory flags of `frugal train`: --memory-timeline FILE.html, --chrome-trace FILE.json,
// --timeline-step N, --memory-report and --report FILE.md. TrainMemory opens the output files before
// training (a bad path fails at once, before any work), plugs a MemoryRecorder into the trainer's
// hooks and this thread's module calls, and after the run prints the per-phase table, writes the
// pages (each atomically: a failure leaves no file) and adds "memory_report" to the --json document.
// Not here: recording (train/memory_recorder.h), the pages themselves (train/memory_pages.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "core/mapped_file.h"
#include "nn/module.h"
#include "train/memory_recorder.h"
#include "train/options.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace CLI {
class App;
}

namespace frugal::cli {

struct MemoryFlags {
  std::string timeline_html, chrome_trace, report;
  std::int64_t timeline_step = 2;  // the second step: the optimizer's state exists by then
  bool memory_report = false;
};
void add_memory_flags(CLI::App& command, MemoryFlags& flags);

class TrainMemory {
 public:
  // ValueError when --timeline-step is past --steps; FileError when an output's folder is missing.
  TrainMemory(const MemoryFlags& flags, const train::TrainOptions& options);
  ~TrainMemory();
  TrainMemory(const TrainMemory&) = delete;
  TrainMemory& operator=(const TrainMemory&) = delete;

  // Chains the recorder into hooks.on_phase and hooks.on_start; observes this thread's module calls
  // while this object lives. Nothing when no memory flag was given.
  void attach(train::TrainHooks& hooks);
  // After train() returned: empties the cache (--memory-report, --report), prints the table, writes
  // the files. ValueError when the run ended before the timeline's step.
  void finish(const train::TrainResult& result, std::ostream& out);
  // The planner's prediction of this run, shown beside the measured peak of each phase.
  void set_plan(const train::MemoryPlan& plan) { plan_ = plan; }
  // Adds "memory_report" (memory_pages.h memory_report_json) when the table was kept.
  void add_to_json(nlohmann::ordered_json& document) const;

 private:
  MemoryFlags flags_;
  train::TrainOptions options_;
  std::unique_ptr<train::MemoryRecorder> recorder_;
  // Scopes nest (the last made is the first ended), so this one ends with the object, not earlier.
  std::unique_ptr<nn::ModuleCallObserverScope> observing_;
  std::unique_ptr<autograd::BackwardNodeObserverScope> observing_backward_;
  std::unique_ptr<AtomicFile> html_, trace_, report_;
  std::string description_;
  std::optional<nlohmann::ordered_json> report_json_;
  std::optional<train::MemoryPlan> plan_;
};

}  // namespace frugal::cli
