// The memory recorder behind `frugal train --memory-timeline/--chrome-trace/--memory-report/--report`
// (train/memory_recorder.h) and the pages drawn from it (train/memory_pages.h), on a simulated device
// whose allocations are made by hand, so every byte figure is predictable: blocks of whole MiB, no
// rounding. A real run, and the page rendered by a browser, are checked by tests/train_check.sh.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/backing.h"
#include "core/caching_allocator.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"
#include "nn/functional.h"
#include "nn/module.h"
#include "train/memory_pages.h"
#include "train/memory_recorder.h"

using namespace frugal;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// A module whose call allocates `bytes` of activation and keeps it in `kept`.
struct Allocating : nn::Module {
  CachingAllocator& allocator;
  std::size_t bytes;
  std::vector<DataPtr>& kept;
  Allocating(CachingAllocator& a, std::size_t b, std::vector<DataPtr>& k) : Module("Allocating"), allocator(a), bytes(b), kept(k) {}
  Tensor forward(const Tensor& x) override {
    const MemoryTagScope tag(MemoryTag::activation);
    kept.push_back(allocator.allocate(bytes));
    return x;
  }
};

// model = Sequence(first: 2 MiB, second: 3 MiB).
struct Sequence : nn::Module {
  std::shared_ptr<Allocating> first, second;
  Sequence(CachingAllocator& a, std::vector<DataPtr>& kept)
      : Module("Sequence"),
        first(register_module("first", std::make_shared<Allocating>(a, 2 * MiB, kept))),
        second(register_module("second", std::make_shared<Allocating>(a, 3 * MiB, kept))) {}
  Tensor forward(const Tensor& x) override { return (*second)((*first)(x)); }
};

std::unique_ptr<CachingAllocator> simulated() {
  CachingOptions options;
  options.expandable_segments = false;
  return std::make_unique<CachingAllocator>(std::make_unique<SimulatedBacking>(), options);
}

// One step: forward through the model (5 MiB of activations), backward (a 1 MiB gradient made, then
// the activations freed), optimizer step (a 4 MiB optimizer state made on the first step only).
void step(train::MemoryRecorder& recorder, CachingAllocator& a, Sequence& model, std::vector<DataPtr>& grads,
          std::vector<DataPtr>& optimizer_state) {
  const auto phase = [&](train::Phase p, bool begin) { recorder.on_phase({p, begin, 0, 0, &model}); };
  phase(train::Phase::forward, true);
  model(Tensor());
  phase(train::Phase::forward, false);
  phase(train::Phase::backward, true);
  {
    const MemoryTagScope tag(MemoryTag::grad);
    if (grads.empty()) grads.push_back(a.allocate(1 * MiB));
  }
  phase(train::Phase::backward, false);
  phase(train::Phase::optimizer, true);
  {
    const MemoryTagScope tag(MemoryTag::optimizer);
    if (optimizer_state.empty()) optimizer_state.push_back(a.allocate(4 * MiB));
  }
  phase(train::Phase::optimizer, false);
}

struct Fixture {
  std::unique_ptr<CachingAllocator> allocator = simulated();
  std::vector<DataPtr> params, activations, grads, optimizer_state;
  Sequence model{*allocator, activations};
  train::MemoryRecorder recorder{*allocator, {.timeline_step = 2, .phase_memory = true}};
  nn::ModuleCallObserverScope observing{recorder};

  Fixture() {
    const MemoryTagScope tag(MemoryTag::param);
    params.push_back(allocator->allocate(1 * MiB));
  }
  void run_steps(int count) {
    for (int s = 0; s < count; ++s) {
      step(recorder, *allocator, model, grads, optimizer_state);
      activations.clear();  // what backward frees, after the step here
    }
  }
};

}  // namespace

TEST_CASE("memory recorder: the chosen step's bytes by tag, its phases, modules and peak") {
  Fixture f;
  f.run_steps(3);
  REQUIRE(f.recorder.timeline().has_value());
  const train::MemoryTimeline& t = *f.recorder.timeline();
  CHECK(t.step == 2);
  // At step 2's start: the parameter, the gradient and the optimizer state of step 1.
  CHECK(t.start_bytes[static_cast<std::size_t>(MemoryTag::param)] == 1 * MiB);
  CHECK(t.start_bytes[static_cast<std::size_t>(MemoryTag::grad)] == 1 * MiB);
  CHECK(t.start_bytes[static_cast<std::size_t>(MemoryTag::optimizer)] == 4 * MiB);
  CHECK(t.start_bytes[static_cast<std::size_t>(MemoryTag::activation)] == 0);
  // Each point's tags add up to what the allocator counted after that event.
  const std::vector<train::TimelinePoint> points = train::timeline_points(t);
  REQUIRE(points.size() == t.events.size() + 1);
  for (std::size_t i = 0; i < t.events.size(); ++i) CHECK(points[i + 1].allocated() == t.events[i].allocated_total);
  // The peak: 6 MiB held plus both activations, at the end of the second module, in forward.
  const train::TimelinePeak peak = train::timeline_peak(t, points);
  CHECK(peak.point.allocated() == 11 * MiB);
  CHECK(peak.phase == "forward");
  CHECK(peak.layer == "second");
  CHECK(train::tag_maxima(points)[static_cast<std::size_t>(MemoryTag::activation)] == 5 * MiB);
  // Marks: three phases in order; the model and its two children, named as named_modules() names them.
  REQUIRE(t.phases.size() == 3);
  CHECK(t.phases[0].name == "forward");
  CHECK(t.phases[1].name == "backward");
  CHECK(t.phases[2].name == "optimizer step");
  REQUIRE(t.layers.size() == 3);
  CHECK(t.layers[0].name == "first");
  CHECK(t.layers[0].depth == 2);
  CHECK(t.layers[2].name == "model");
  CHECK(t.layers[2].depth == 1);
  CHECK(t.phases[0].begin_ns <= t.layers[2].begin_ns);
  CHECK(t.layers[2].end_ns <= t.phases[0].end_ns);
}

namespace {
// Step 1 of a recorder watching backward's nodes on the CPU: `forward` makes the loss inside the
// forward phase, and backward runs inside the backward phase.
train::MemoryTimeline record_backward(const std::function<Tensor()>& forward) {
  train::MemoryRecorder recorder(default_caching_allocator(Device::cpu()), {.timeline_step = 1});
  const autograd::BackwardNodeObserverScope observing(recorder);
  const auto phase = [&](train::Phase p, bool begin) { recorder.on_phase({p, begin, 0, 0, nullptr}); };
  phase(train::Phase::forward, true);
  const Tensor loss = forward();
  phase(train::Phase::forward, false);
  phase(train::Phase::backward, true);
  autograd::backward(loss);
  phase(train::Phase::backward, false);
  phase(train::Phase::optimizer, true);
  phase(train::Phase::optimizer, false);
  REQUIRE(recorder.timeline().has_value());
  return *recorder.timeline();
}
}  // namespace

TEST_CASE("memory recorder: a peak inside backward names the autograd node running and the layer that recorded it") {
  Tensor x = zeros({1 << 20});  // 4 MiB
  autograd::set_requires_grad(x);
  // sum's backward makes the 4 MiB gradient of mul's output; mul's backward makes x's 4 MiB gradient
  // while that one is still alive: the peak, inside mul's node.
  const train::MemoryTimeline t = record_backward([&] {
    const MemoryContextScope layer("my layer");
    return functional::sum(functional::mul(x, 2.0));  // mul's output is freed: only the 4-byte loss is left
  });
  REQUIRE(t.backward_nodes.size() == 3);  // sum's, mul's and x's accumulator, in the order they ran
  for (const train::TimelineMark& node : t.backward_nodes) {
    CAPTURE(node.name);
    CHECK(node.name.rfind("the backward of ", 0) == 0);
    CHECK(node.name.find(" in my layer") != std::string::npos);
    CHECK(node.begin_ns <= node.end_ns);
  }
  const train::TimelinePeak peak = train::timeline_peak(t, train::timeline_points(t));
  CHECK(peak.phase == "backward");
  CHECK(peak.layer == t.backward_nodes[1].name);
  CHECK(peak.layer.find("mul") != std::string::npos);
  autograd::set_grad(x, Tensor());
}

TEST_CASE("memory recorder: the nodes of a checkpoint's inner backward are marked inside its own node") {
  Tensor x = zeros({1024});
  autograd::set_requires_grad(x);
  const train::MemoryTimeline t = record_backward([&] {
    return functional::sum(nn::checkpoint([](const std::vector<Tensor>& in) { return functional::mul(in[0], 3.0); }, {x}));
  });
  const std::vector<train::TimelineMark>& nodes = t.backward_nodes;
  const auto outer = std::find_if(nodes.begin(), nodes.end(), [](const train::TimelineMark& m) {
    return m.name.find("backward of checkpoint") != std::string::npos;
  });
  REQUIRE(outer != nodes.end());
  CHECK(outer->depth == 1);
  const auto inner = std::find_if(nodes.begin(), nodes.end(), [](const train::TimelineMark& m) {
    return m.name.find("backward of mul") != std::string::npos;
  });
  REQUIRE(inner != nodes.end());
  CHECK(inner->depth == 2);
  CHECK(outer->begin_ns <= inner->begin_ns);
  CHECK(inner->end_ns <= outer->end_ns);
  autograd::set_grad(x, Tensor());
}

TEST_CASE("memory recorder: each phase's peak and end, over all its runs") {
  Fixture f;
  f.run_steps(2);
  const std::vector<train::PhaseMemory> rows = f.recorder.phase_memory();
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].phase == train::Phase::forward);
  CHECK(rows[0].runs == 2);
  CHECK(rows[0].peak == 11 * MiB);  // step 2: 6 MiB held, 5 MiB of activations
  CHECK(rows[0].allocated == 11 * MiB);
  CHECK(rows[2].phase == train::Phase::optimizer);
  CHECK(rows[2].peak == 11 * MiB);  // step 1's optimizer state arrives while the activations live
  CHECK(rows[2].reserved >= rows[2].allocated);
  CHECK(rows[2].host_rss > 0);
}

TEST_CASE("memory recorder: a run that ends before the step has no timeline") {
  Fixture f;
  f.run_steps(1);
  CHECK_FALSE(f.recorder.timeline().has_value());
}

TEST_CASE("memory timeline page: self-contained, with the step's data, and a name cannot end its script") {
  Fixture f;
  f.run_steps(2);
  train::MemoryTimeline t = *f.recorder.timeline();
  t.layers.push_back({"evil</script><script>alert(1)", 3, t.begin_ns, t.begin_ns});
  const std::string page = train::memory_timeline_html(t);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  for (const char* outside : {"src=", "href=", "<link", "@import", "url(", "https:"}) {
    CAPTURE(outside);
    CHECK(page.find(outside) == std::string::npos);
  }
  CHECK(page.find("evil<\\/script>") != std::string::npos);
  CHECK(page.find("evil</script>") == std::string::npos);
  CHECK(page.find("\"peak\":{\"bytes\":" + std::to_string(11 * MiB)) != std::string::npos);
  CHECK(page.find("\"step\":2") != std::string::npos);
}

TEST_CASE("memory timeline chrome trace: the allocator's events, counters by tag, phase and module slices") {
  Fixture f;
  f.run_steps(2);
  const nlohmann::json trace = train::memory_timeline_chrome_trace(*f.recorder.timeline());
  std::size_t allocator_counters = 0, tag_counters = 0, phases = 0, modules = 0, highest = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["name"] == "memory") ++allocator_counters;  // write_chrome_trace's own counter
    if (e["name"] == "allocated by tag") {
      ++tag_counters;
      std::size_t sum = 0;
      for (const auto& [tag, bytes] : e["args"].items()) sum += bytes.get<std::size_t>();
      highest = std::max(highest, sum);
    }
    if (e["ph"] == "X" && e["cat"] == "phase") ++phases;
    if (e["ph"] == "X" && e["cat"] == "module") ++modules;
  }
  CHECK(allocator_counters == f.recorder.timeline()->events.size());
  CHECK(tag_counters == allocator_counters + 1);  // and the step's start
  CHECK(phases == 3);
  CHECK(modules == 3);
  CHECK(highest == 11 * MiB);
}

TEST_CASE("memory report: the table, its JSON, and the Markdown run report with mermaid charts") {
  Fixture f;
  f.run_steps(2);
  const train::MemoryReport memory{f.recorder.phase_memory(), 40 * MiB, 6 * MiB, {}};
  const std::string text = train::memory_report_text(memory);
  CHECK(text.find("memory by phase") == 0);
  CHECK(text.find("\nforward ") != std::string::npos);
  CHECK(text.find("\noptimizer step ") != std::string::npos);
  CHECK(text.find("reserved 40.00 MiB before, 6.00 MiB after") != std::string::npos);
  const nlohmann::ordered_json json = train::memory_report_json(memory);
  CHECK(json["phases"][0]["phase"] == "forward");
  CHECK(json["phases"][0]["peak_bytes"] == 11 * MiB);
  CHECK(json["empty_cache"]["reserved_after_bytes"] == 6 * MiB);

  train::RunReport report;
  report.description = "cnn, 1234 parameters, on cpu; Tiny: 96 train and 96 test samples of [1, 12, 12]; 3 steps per epoch";
  report.result.model = "cnn";
  report.result.device = "cpu";
  report.spans = {{train::Phase::setup, 0, 0.0, 0.5}, {train::Phase::epoch, 0, 0.5, 2.0}, {train::Phase::evaluation, 0, 2.5, 0.25}};
  report.memory = memory;
  const std::string md = train::run_report_markdown(report);
  CHECK(md.rfind("# frugal train: cnn on cpu", 0) == 0);
  CHECK(md.find("| --batch-size | 64 |") != std::string::npos);
  CHECK(md.find("```mermaid\nflowchart LR\n") != std::string::npos);
  CHECK(md.find("data[\"Tiny: 96 train and 96 test samples of [1, 12, 12]\"]") != std::string::npos);
  CHECK(md.find("```mermaid\ngantt\n  dateFormat x\n") != std::string::npos);
  CHECK(md.find("  setup (data, model) :0, 500\n") != std::string::npos);
  CHECK(md.find("  epoch 1 :500, 2500\n") != std::string::npos);
  CHECK(md.find("  evaluation after epoch 1 :2500, 2750\n") != std::string::npos);
  CHECK(md.find("| forward | 11.00 MiB |") != std::string::npos);
  CHECK(md.find("reserved 40.00 MiB before, 6.00 MiB after") != std::string::npos);
}
