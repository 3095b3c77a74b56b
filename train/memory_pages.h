// The pages and tables drawn from a MemoryRecorder (train/memory_recorder.h), as text:
//   - memory_timeline_html: one self-contained HTML page (inline SVG drawn by inline JavaScript, no
//     network) with the step's allocated bytes stacked by tag over time, the reserved line above,
//     phase and module bands, and the peak with the phase and module it fell in;
//   - memory_timeline_chrome_trace: the same step as Chrome trace events for Perfetto: the allocator's
//     own trace (CachingAllocator::write_chrome_trace) plus counters by tag and phase and module slices;
//   - the per-phase memory table (text for the terminal, JSON for --json);
//   - run_report_markdown: the run's configuration, data and model, a mermaid flowchart of what was
//     trained on what, a mermaid gantt chart of the measured phases, and the memory tables.
// Not here: recording (memory_recorder.h), writing files (the command line's job).
#pragma once

#include <array>
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/memory_recorder.h"
#include "train/options.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace frugal::train {

std::string memory_timeline_html(const MemoryTimeline& timeline);
nlohmann::json memory_timeline_chrome_trace(const MemoryTimeline& timeline);

// The per-phase table and what emptying the allocator's cache at the run's end gave back, with the
// planner's prediction of each phase's peak beside the measured one when the run was planned.
struct MemoryReport {
  std::vector<PhaseMemory> phases;
  std::size_t reserved_before_empty_cache = 0, reserved_after_empty_cache = 0;
  std::array<std::optional<std::size_t>, kNumPhases> planned_peak{};  // by Phase; none for epoch and evaluation
};
// The plan's phases (init, forward, backward, optimizer step) as the trainer's (setup, forward,
// backward, optimizer step): the planner's init is the model and optimizer made at setup.
void set_planned_peaks(MemoryReport& report, const MemoryPlan& plan);
std::string memory_report_text(const MemoryReport& report);  // a table and one empty_cache line
// {"phases": [{"phase", "runs", "allocated_bytes", "reserved_bytes", "peak_bytes", "planned_peak_bytes" (null
//  when not planned), "inactive_split_bytes", "host_rss_bytes", "pinned_host_bytes"}],
//  "empty_cache": {"reserved_before_bytes", "reserved_after_bytes"}}
nlohmann::ordered_json memory_report_json(const MemoryReport& report);

struct RunReport {
  TrainOptions options;
  std::string description;  // the trainer's start line: model, parameters, device, data
  TrainResult result;
  std::vector<PhaseSpan> spans;
  MemoryReport memory;
  std::optional<TimelinePeak> step_peak;  // when a timeline was recorded
  std::int64_t step = 0;                  // the timeline's step
};
std::string run_report_markdown(const RunReport& report);

}  // namespace frugal::train
