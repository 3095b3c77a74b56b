// MemoryRecorder: what `frugal train --memory-timeline/--chrome-trace/--memory-report/--report` see of
// the device's memory while the run goes on. It listens to the trainer's phases (TrainHooks::on_phase),
// as a ModuleCallObserver to every module call and as a BackwardNodeObserver to every node backward
// runs, and drives the caching allocator's recording (CachingAllocator::record_history) to keep:
//   - one optimizer step's whole allocator history, with the phases, module calls and backward nodes
//     laid beside it as marks on the history's clock (MemoryTimeline): the step's memory over time, by tag;
//   - per phase (setup, forward, backward, optimizer step, evaluation) the memory at its end and the
//     highest allocated bytes while it ran (PhaseMemory), found in the history of each phase run;
//   - the wall-clock spans of setup, each epoch and each evaluation (PhaseSpan), for a gantt chart.
// Recording costs a little time per allocation; a run without these flags makes no recorder.
// Not here: the pages and tables drawn from what it keeps (train/memory_pages.h), the allocator.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/caching_allocator.h"
#include "nn/autograd.h"
#include "nn/module.h"
#include "train/trainer.h"

namespace frugal::train {

using TagBytes = std::array<std::size_t, kNumMemoryTags>;

// A phase or a module call, from begin_ns to end_ns on the allocator history's clock
// (CachingAllocator::history_time_ns).
struct TimelineMark {
  // "forward"; a module's dotted name ("features.3.conv.0"; the root is "model"); a backward node and
  // the layer that recorded it ("the backward of conv2d in features.3.conv.0 (Conv2d)")
  std::string name;
  int depth = 0;     // phases 0; module calls 1 + how many module calls enclose it (the root model: 1);
                     // backward nodes 1, and one more inside each enclosing node (a checkpoint's)
  std::int64_t begin_ns = 0, end_ns = 0;
};

// One optimizer step's memory.
struct MemoryTimeline {
  std::int64_t step = 0;            // which step this run trained, from 1
  std::string device;
  std::int64_t begin_ns = 0, end_ns = 0;
  TagBytes start_bytes{};           // allocated block bytes by tag when the step began
  std::size_t start_reserved = 0;
  std::vector<AllocEvent> events;   // every allocator event of the step, in order
  std::vector<TimelineMark> phases, layers;
  std::vector<TimelineMark> backward_nodes;  // each node backward ran, in the order they ended
  std::string allocator_trace;      // the allocator's Chrome trace of these events (write_chrome_trace)
};

// The timeline's state after each event (and at its start): allocated block bytes by tag, reserved.
struct TimelinePoint {
  std::int64_t time_ns = 0;
  TagBytes bytes{};
  std::size_t reserved = 0;
  std::size_t allocated() const;  // the sum over tags
};
std::vector<TimelinePoint> timeline_points(const MemoryTimeline& timeline);

// Where the step's allocated bytes were highest (the first point at that height).
struct TimelinePeak {
  TimelinePoint point;
  std::string phase;  // the phase running then, "" between phases
  // The innermost module running then; in backward, the node running and the layer it works for;
  // "" when neither (between nodes, the optimizer step).
  std::string layer;
};
TimelinePeak timeline_peak(const MemoryTimeline& timeline, const std::vector<TimelinePoint>& points);
TagBytes tag_maxima(const std::vector<TimelinePoint>& points);  // each tag's highest bytes over the step

// One phase over the run. Memory figures are those at the phase's last end, except `peak`: the most
// allocated bytes at any moment of any of its runs.
struct PhaseMemory {
  Phase phase = Phase::setup;
  std::int64_t runs = 0;
  std::size_t allocated = 0, reserved = 0, peak = 0, inactive_split = 0;
  std::size_t host_rss = 0;      // the process's resident set (/proc/self/statm)
  std::size_t pinned_host = 0;   // reserved by the pinned host allocator (the loader's staging buffers)
};

// A stretch of wall-clock time for the run report's gantt chart: setup, an epoch, an evaluation.
struct PhaseSpan {
  Phase phase = Phase::setup;
  std::int64_t epoch = 0;       // from 0
  double start_seconds = 0.0;   // since the recorder was made
  double seconds = 0.0;
};

// Bytes the process holds in RAM now (resident pages of /proc/self/statm); 0 where that is unknown.
std::size_t host_resident_bytes();

class MemoryRecorder final : public nn::ModuleCallObserver, public autograd::BackwardNodeObserver {
 public:
  struct Options {
    std::optional<std::int64_t> timeline_step;  // record this step (from 1) as a MemoryTimeline
    bool phase_memory = false;                  // keep the PhaseMemory table
  };
  // Most allocator events one recording holds (a phase run, or the timeline's step): ~18 MiB of
  // history, far more than a step of the models here makes (MobileNetV2: a few thousand).
  static constexpr std::size_t kMaxEvents = std::size_t{1} << 18;

  MemoryRecorder(CachingAllocator& allocator, Options options);
  ~MemoryRecorder() override;  // stops the allocator's recording
  MemoryRecorder(const MemoryRecorder&) = delete;
  MemoryRecorder& operator=(const MemoryRecorder&) = delete;

  void on_phase(const PhaseEvent& event);  // plug into TrainHooks::on_phase
  void before_call(const nn::Module& module) override;
  void after_call(const nn::Module& module, const Tensor* output) override;
  void before_node(const autograd::Node& node) override;
  void after_node(const autograd::Node& node) override;

  // The recorded step; nullopt when the run ended before it. Error when the step made more than
  // kMaxEvents allocator events (the history lost its start).
  const std::optional<MemoryTimeline>& timeline() const;
  std::vector<PhaseMemory> phase_memory() const;  // the phases that ran, in Phase order
  const std::vector<PhaseSpan>& spans() const { return spans_; }

 private:
  struct OpenCall {
    const nn::Module* module;
    std::int64_t begin_ns;
  };
  void begin_step(const PhaseEvent& event);
  void end_step();
  void begin_phase_memory(Phase phase);
  void end_phase_memory(Phase phase);
  const std::string& module_name(const nn::Module& module);

  CachingAllocator& allocator_;
  Options options_;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  std::int64_t steps_done_ = 0;
  bool in_step_ = false;
  bool truncated_ = false;
  std::optional<MemoryTimeline> timeline_;
  std::array<std::int64_t, kNumPhases> phase_begin_ns_{};
  std::array<std::size_t, kNumPhases> phase_begin_allocated_{};
  std::array<std::optional<PhaseMemory>, kNumPhases> phase_memory_;
  std::vector<PhaseSpan> spans_;
  std::vector<OpenCall> calls_;  // module calls begun and not yet ended, outermost first
  // When each running backward node began, innermost last: a checkpoint's node runs a backward of
  // its own inside its own.
  std::vector<std::int64_t> node_begins_;
  const nn::Module* model_ = nullptr;
  std::unordered_map<const nn::Module*, std::string> names_;
};

}  // namespace frugal::train
