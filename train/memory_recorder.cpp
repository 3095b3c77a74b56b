// MemoryRecorder and the timeline's arithmetic (see memory_recorder.h).
#include "train/memory_recorder.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/allocator_registry.h"
#include "core/error.h"
#include "nn/node.h"
#include "train/memory_context.h"

namespace frugal::train {

namespace {

bool counted(Phase phase) { return phase != Phase::epoch; }  // an epoch is made of the other phases
bool spanned(Phase phase) { return phase == Phase::setup || phase == Phase::epoch || phase == Phase::evaluation; }

// Allocated block bytes by tag, from the allocator's snapshot.
TagBytes allocated_by_tag(const CachingAllocator& allocator) {
  TagBytes bytes{};
  const nlohmann::json snapshot = allocator.snapshot();
  for (const auto& segment : snapshot["segments"])
    for (const auto& block : segment["blocks"]) {
      if (block["state"] != "allocated") continue;
      for (int t = 0; t < kNumMemoryTags; ++t)
        if (block["tag"] == memory_tag_name(static_cast<MemoryTag>(t)))
          bytes[static_cast<std::size_t>(t)] += block["size"].get<std::size_t>();
    }
  return bytes;
}

// The name of the innermost mark of `marks` that holds time t ("" if none does).
std::string innermost_at(const std::vector<TimelineMark>& marks, std::int64_t t) {
  const TimelineMark* found = nullptr;
  for (const TimelineMark& m : marks)
    if (m.begin_ns <= t && t <= m.end_ns && (!found || m.depth > found->depth)) found = &m;
  return found ? found->name : std::string();
}

}  // namespace

std::size_t TimelinePoint::allocated() const {
  std::size_t sum = 0;
  for (std::size_t b : bytes) sum += b;
  return sum;
}

std::vector<TimelinePoint> timeline_points(const MemoryTimeline& timeline) {
  std::vector<TimelinePoint> points;
  points.reserve(timeline.events.size() + 1);
  TimelinePoint now{timeline.begin_ns, timeline.start_bytes, timeline.start_reserved};
  points.push_back(now);
  for (const AllocEvent& e : timeline.events) {
    std::size_t& tag = now.bytes[static_cast<std::size_t>(e.tag)];
    if (e.kind == AllocEvent::Kind::alloc) tag += e.bytes;
    if (e.kind == AllocEvent::Kind::free) tag -= std::min(tag, e.bytes);
    now.time_ns = e.time_ns;
    now.reserved = e.reserved_total;
    points.push_back(now);
  }
  return points;
}

TimelinePeak timeline_peak(const MemoryTimeline& timeline, const std::vector<TimelinePoint>& points) {
  FRUGAL_CHECK(!points.empty(), "a timeline has at least its starting point");
  const auto highest = std::max_element(points.begin(), points.end(),
                                        [](const TimelinePoint& a, const TimelinePoint& b) { return a.allocated() < b.allocated(); });
  std::string layer = innermost_at(timeline.layers, highest->time_ns);
  if (layer.empty()) layer = innermost_at(timeline.backward_nodes, highest->time_ns);
  return {*highest, innermost_at(timeline.phases, highest->time_ns), layer};
}

TagBytes tag_maxima(const std::vector<TimelinePoint>& points) {
  TagBytes maxima{};
  for (const TimelinePoint& p : points)
    for (std::size_t t = 0; t < maxima.size(); ++t) maxima[t] = std::max(maxima[t], p.bytes[t]);
  return maxima;
}

std::size_t host_resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total_pages = 0, resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// ---- the recorder

MemoryRecorder::MemoryRecorder(CachingAllocator& allocator, Options options) : allocator_(allocator), options_(options) {}

MemoryRecorder::~MemoryRecorder() {
  if (in_step_ || options_.phase_memory) allocator_.record_history(0);
}

void MemoryRecorder::on_phase(const PhaseEvent& event) {
  if (event.model) model_ = event.model;
  const auto p = static_cast<std::size_t>(event.phase);
  if (event.begin) {
    if (options_.timeline_step && event.phase == Phase::forward && !in_step_ && !timeline_ &&
        steps_done_ == *options_.timeline_step - 1)
      begin_step(event);
    phase_begin_ns_[p] = allocator_.history_time_ns();
    if (spanned(event.phase))
      spans_.push_back({event.phase, event.epoch, std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count(), 0.0});
    if (options_.phase_memory && counted(event.phase)) begin_phase_memory(event.phase);
    return;
  }
  if (options_.phase_memory && counted(event.phase)) end_phase_memory(event.phase);
  if (in_step_ && counted(event.phase))
    timeline_->phases.push_back({std::string(phase_name(event.phase)), 0, phase_begin_ns_[p], allocator_.history_time_ns()});
  if (spanned(event.phase)) {
    const auto open = std::find_if(spans_.rbegin(), spans_.rend(), [&](const PhaseSpan& s) { return s.phase == event.phase; });
    if (open != spans_.rend())
      open->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count() - open->start_seconds;
  }
  if (event.phase == Phase::optimizer) {
    ++steps_done_;
    if (in_step_) end_step();
  }
}

// The step's starting bytes come from a snapshot taken just before recording starts: an allocation
// a loader thread makes in between is missed (a batch's data bytes), the rest is exact.
void MemoryRecorder::begin_step(const PhaseEvent& event) {
  MemoryTimeline t;
  t.step = steps_done_ + 1;
  t.device = allocator_.device().str();
  t.start_bytes = allocated_by_tag(allocator_);
  t.start_reserved = static_cast<std::size_t>(allocator_.caching_stats().reserved_bytes.current);
  allocator_.record_history(kMaxEvents);
  t.begin_ns = allocator_.history_time_ns();
  timeline_ = std::move(t);
  in_step_ = true;
  if (event.model) model_ = event.model;
}

void MemoryRecorder::end_step() {
  MemoryTimeline& t = *timeline_;
  t.end_ns = allocator_.history_time_ns();
  t.events = allocator_.history();
  truncated_ = t.events.size() >= kMaxEvents;
  std::ostringstream trace;
  allocator_.write_chrome_trace(trace);
  t.allocator_trace = trace.str();
  allocator_.record_history(0);
  in_step_ = false;
  calls_.clear();
}

void MemoryRecorder::begin_phase_memory(Phase phase) {
  if (!in_step_) allocator_.record_history(kMaxEvents);  // this phase's events only
  phase_begin_allocated_[static_cast<std::size_t>(phase)] =
      static_cast<std::size_t>(allocator_.caching_stats().allocated_bytes.current);
}

// A phase run of more than kMaxEvents events has its peak taken from its start and its last
// kMaxEvents events.
void MemoryRecorder::end_phase_memory(Phase phase) {
  const auto p = static_cast<std::size_t>(phase);
  std::size_t peak = phase_begin_allocated_[p];
  for (const AllocEvent& e : allocator_.history())
    if (e.time_ns >= phase_begin_ns_[p]) peak = std::max(peak, e.allocated_total);
  if (!in_step_) allocator_.record_history(0);
  const CachingStats stats = allocator_.caching_stats();
  PhaseMemory& m = phase_memory_[p] ? *phase_memory_[p] : phase_memory_[p].emplace();
  m.phase = phase;
  ++m.runs;
  m.allocated = static_cast<std::size_t>(stats.allocated_bytes.current);
  m.reserved = static_cast<std::size_t>(stats.reserved_bytes.current);
  m.inactive_split = static_cast<std::size_t>(stats.inactive_split_bytes.current);
  m.peak = std::max(m.peak, peak);
  m.host_rss = host_resident_bytes();
  m.pinned_host = static_cast<std::size_t>(pinned_host_allocator().caching_stats().reserved_bytes.current);
}

void MemoryRecorder::before_call(const nn::Module& module) {
  if (in_step_) calls_.push_back({&module, allocator_.history_time_ns()});
}

void MemoryRecorder::after_call(const nn::Module& module, const Tensor* /*output*/) {
  if (!in_step_ || calls_.empty() || calls_.back().module != &module) return;
  const OpenCall call = calls_.back();
  calls_.pop_back();
  timeline_->layers.push_back(
      {module_name(module), static_cast<int>(calls_.size()) + 1, call.begin_ns, allocator_.history_time_ns()});
}

void MemoryRecorder::before_node(const autograd::Node& /*node*/) {
  if (in_step_) node_begins_.push_back(allocator_.history_time_ns());
}

void MemoryRecorder::after_node(const autograd::Node& node) {
  if (!in_step_ || node_begins_.empty()) return;
  // Depth 1 for the outermost; a node inside a checkpoint's backward is deeper, so it names a peak.
  const int depth = static_cast<int>(node_begins_.size());
  timeline_->backward_nodes.push_back({"the backward of " + std::string(node.name()) + " in " + made_by(node.forward_context()),
                                       depth, node_begins_.back(), allocator_.history_time_ns()});
  node_begins_.pop_back();
}

const std::string& MemoryRecorder::module_name(const nn::Module& module) {
  if (names_.empty() && model_)
    for (const auto& [name, m] : model_->named_modules()) names_.emplace(m, name.empty() ? "model" : name);
  auto found = names_.find(&module);
  if (found == names_.end()) found = names_.emplace(&module, module.type_name()).first;
  return found->second;
}

const std::optional<MemoryTimeline>& MemoryRecorder::timeline() const {
  FRUGAL_CHECK(!truncated_, "step ", timeline_->step, " made more than ", kMaxEvents,
               " allocator events: its memory timeline would have lost its start");
  return timeline_;
}

std::vector<PhaseMemory> MemoryRecorder::phase_memory() const {
  std::vector<PhaseMemory> rows;
  for (const auto& m : phase_memory_)
    if (m) rows.push_back(*m);
  return rows;
}

}  // namespace frugal::train
