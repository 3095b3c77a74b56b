// Sample 11: watching a training run's memory, one tool after another, on MobileNetV2 with
// Fashion-MNIST (1x32x32, 10 classes):
//   1. the caching allocator's statistics after two training steps: allocated, reserved and peak,
//      and per tag what is held now and the most it held; the peak beside the planner's prediction;
//   2. the same books as memory_summary()'s text table, and snapshot(): every segment and block,
//      written as JSON;
//   3. one training step's timeline as a self-contained HTML page, recorded by train::MemoryRecorder
//      as `frugal train --memory-timeline` records it (cli/train_memory.cpp);
//   4. empty_cache(): the reserved bytes before and after;
//   5. a deliberate leak (a monitoring loss per step, computed with autograd on and kept in a vector,
//      and with it its graph) caught by the leak check (train/leak_check.h), which names what
//      survived each step and who made it; then the same loop under NoGradGuard, silent.
// Every number is measured. Writes 11_memory_snapshot.json and 11_memory_timeline.html in the
// current folder. Needs Debian's dataset-fashion-mnist (says so and exits when missing); runs on
// cuda:0 when a GPU is usable, otherwise on the CPU, where the allocator keeps the same books.
// Checked (samples/checks.h; the sample exits 1 when one is false): no gradient or activation bytes
// left between steps, on the CPU the peak within 1% of the plan, the snapshot's allocated blocks
// adding up to the allocated bytes, the leak caught and the fixed loop silent.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "data/idx.h"
#include "data/loader.h"
#include "kernels/cpu_runtime.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/leak_check.h"
#include "train/memory_context.h"
#include "train/memory_pages.h"
#include "train/memory_recorder.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "train/step.h"
#include "train/trainer.h"
#include "samples/checks.h"

using namespace frugal;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kBatch = 16;  // small: the sample also runs as a test under AddressSanitizer
constexpr std::int64_t kLeakSteps = 3;  // the leak check compares from the second step on

std::string size(std::int64_t bytes) { return format_size(static_cast<std::size_t>(bytes)); }

// Writes `text` to `name` in the current folder; returns the file's absolute path.
fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path path = fs::absolute(name);
  write_file_atomically(path.string(), text);  // core/mapped_file.h: whole or not at all
  return path;
}

// One model with its optimizer and a loader, trained by hand a step at a time.
struct Training {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<data::DataLoader> loader;
  std::int64_t batch_size = 0;

  Training(const train::TrainOptions& o, const train::RunData& data) : batch_size(o.batch_size) {
    manual_seed(o.seed);
    model = models::make_model(o.model, train::model_options(o, 1, 10));
    model->to(o.device);
    model->train();
    optimizer = train::make_optimizer(*model, o);
    loader = std::make_unique<data::DataLoader>(
        data.splits.train, data::LoaderOptions{.batch_size = o.batch_size, .shuffle = true, .transforms = data.train_transforms,
                                               .device = o.device, .seed = o.seed});
    loader->start_epoch(0);
  }
  // The trainer's step (train/step.h): forward, backward (which frees what the graph saved),
  // optimizer step, gradients freed.
  void step() {
    const train::StepHooks hooks{.next_batch = [this] { return *loader->next(); }};
    train::optimizer_step({.model = *model, .optimizer = optimizer.get()}, {}, 1, batch_size, hooks);
  }
};

void statistics(CachingAllocator& allocator, std::int64_t baseline, const train::MemoryPlan& plan, samples::Checks& checks) {
  std::printf("1. Allocator statistics after two steps (the first makes AdamW's state)\n");
  const CachingStats s = allocator.caching_stats();
  const AllocatorStats asked = allocator.stats();
  std::printf("   allocated %s, reserved %s; peak allocated %s, peak reserved %s\n", size(s.allocated_bytes.current).c_str(),
              size(s.reserved_bytes.current).c_str(), size(s.allocated_bytes.peak).c_str(), size(s.reserved_bytes.peak).c_str());
  std::printf("   %-11s %12s %12s   (bytes as requested, before rounding to blocks)\n", "tag", "now", "peak");
  for (int t = 0; t < kNumMemoryTags; ++t)
    std::printf("   %-11s %12s %12s\n", std::string(memory_tag_name(static_cast<MemoryTag>(t))).c_str(),
                size(asked.tag_bytes[t].current).c_str(), size(asked.tag_bytes[t].peak).c_str());
  const std::int64_t measured = s.allocated_bytes.peak - baseline;
  const double off = static_cast<double>(measured - plan.peak_bytes) / static_cast<double>(plan.peak_bytes);
  std::printf("   the steps' peak: predicted %s by plan_memory (in %s), measured %s (%+.2f%%)\n", size(plan.peak_bytes).c_str(),
              plan.peak_phase.c_str(), size(measured).c_str(), 100.0 * off);
  for (const MemoryTag tag : {MemoryTag::grad, MemoryTag::activation})
    checks.expect(asked.tag_bytes[static_cast<int>(tag)].current == 0,
                  "between steps no " + std::string(memory_tag_name(tag)) + " bytes are held");
  // The planner runs the same steps on the meta device; a GPU's library workspaces are beyond its sight.
  if (allocator.device().is_cpu()) checks.expect(std::abs(off) <= 0.01, "plan_memory predicts the peak within 1%");
  std::printf("\n");
}

void summary_and_snapshot(CachingAllocator& allocator, samples::Checks& checks) {
  std::printf("2. memory_summary() and snapshot()\n%s", allocator.memory_summary().c_str());
  const nlohmann::json snapshot = allocator.snapshot();
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> by_state;  // state -> blocks, bytes
  for (const auto& segment : snapshot["segments"])
    for (const auto& block : segment["blocks"]) {
      auto& [count, bytes] = by_state[block["state"].get<std::string>()];
      ++count;
      bytes += block["size"].get<std::int64_t>();
    }
  const fs::path path = write_file("11_memory_snapshot.json", snapshot.dump(1) + "\n");
  std::printf("   snapshot: %zu segments;", snapshot["segments"].size());
  for (const auto& [state, counted] : by_state)
    std::printf(" %lld %s blocks (%s);", static_cast<long long>(counted.first), state.c_str(), size(counted.second).c_str());
  std::printf("\n   written to %s (%s)\n\n", path.c_str(), size(static_cast<std::int64_t>(fs::file_size(path))).c_str());
  checks.expect(by_state["allocated"].second == allocator.caching_stats().allocated_bytes.current,
                "the snapshot's allocated blocks add up to the allocated bytes");
}

// Two steps through train::train, the second recorded, as `frugal train --memory-timeline` does.
void timeline(train::TrainOptions o) {
  std::printf("3. One step's timeline (train/memory_recorder.h, train/memory_pages.h)\n");
  o.steps = 2;
  o.evaluate = false;
  train::MemoryRecorder recorder(default_caching_allocator(o.device), {.timeline_step = 2});
  const nn::ModuleCallObserverScope observe(recorder);
  const autograd::BackwardNodeObserverScope observe_backward(recorder);  // names the node running at a peak in backward
  train::TrainHooks hooks;
  hooks.on_phase = [&recorder](const train::PhaseEvent& event) { recorder.on_phase(event); };
  train::train(o, hooks);
  const train::MemoryTimeline& step = *recorder.timeline();
  const train::TimelinePeak peak = train::timeline_peak(step, train::timeline_points(step));
  const fs::path path = write_file("11_memory_timeline.html", train::memory_timeline_html(step));
  std::size_t at_start = 0;  // part 1's model, still alive, included
  for (const std::size_t bytes : step.start_bytes) at_start += bytes;
  std::printf("   step %lld: %zu allocator events, %zu module calls, %.1f ms; allocated %s at its start (part 1's\n"
              "   model included), peak %s in %s%s%s\n",
              static_cast<long long>(step.step), step.events.size(), step.layers.size(),
              static_cast<double>(step.end_ns - step.begin_ns) / 1e6, format_size(at_start).c_str(),
              size(static_cast<std::int64_t>(peak.point.allocated())).c_str(), peak.phase.c_str(),
              peak.layer.empty() ? "" : ", during ", peak.layer.c_str());
  std::printf("   written to %s (%s): open it in a browser\n\n", path.c_str(),
              size(static_cast<std::int64_t>(fs::file_size(path))).c_str());
}

void empty_the_cache(CachingAllocator& allocator) {
  std::printf("4. empty_cache()\n");
  const CachingStats before = allocator.caching_stats();
  const std::size_t returned = allocator.empty_cache();
  const CachingStats after = allocator.caching_stats();
  std::printf("   allocated %s; reserved %s before, %s after: %s given back to the %s\n\n",
              size(before.allocated_bytes.current).c_str(), size(before.reserved_bytes.current).c_str(),
              size(after.reserved_bytes.current).c_str(), format_size(returned).c_str(),
              allocator.device().is_cuda() ? "device" : "system");
}

// Each line of `text` indented by `prefix`, for reports printed inside a section.
std::string indented(const std::string& text, const std::string& prefix) {
  std::string out = prefix;
  for (const char c : text) {
    out.push_back(c);
    if (c == '\n') out.append(prefix);
  }
  return out;
}

// The loss of a fixed batch, for watching progress, computed with autograd on: it holds its graph,
// and with it every activation the graph saved for a backward that never comes. (A trained loss kept
// after its backward holds only its own 4 bytes: backward freed what the graph saved.)
Tensor monitoring_loss(Training& training, const data::Batch& held) {
  training.model->eval();
  Tensor loss;
  {
    const Tensor logits = (*training.model)(held.inputs);
    const MemoryContextScope made_by("monitoring loss");
    loss = functional::cross_entropy(logits, held.labels);
  }
  training.model->train();
  return loss;
}

void a_leak(Training& training, CachingAllocator& allocator, samples::Checks& checks) {
  std::printf("5. A leak: a monitoring loss per step, computed with autograd on and kept as a tensor\n");
  train::LayerMemoryContexts contexts(*training.model);  // blocks say which layer made them
  const nn::ModuleCallObserverScope observe(contexts);
  const data::Batch held = *training.loader->next();
  for (const bool as_numbers : {false, true}) {
    train::LeakCheck check(allocator);
    std::vector<Tensor> kept;       // the bug
    std::vector<double> logged;     // the fix: a number per step, computed without a graph
    for (std::int64_t step = 1; step <= kLeakSteps; ++step) {
      training.step();
      if (as_numbers) {
        const autograd::NoGradGuard no_graph;
        logged.push_back(monitoring_loss(training, held).item<double>());
      } else {
        kept.push_back(monitoring_loss(training, held));
      }
      check.after_step(step);
    }
    std::printf("   %s: allocated %s after %lld steps\n", as_numbers ? "kept as numbers under NoGradGuard" : "kept as tensors",
                size(allocator.caching_stats().allocated_bytes.current).c_str(), static_cast<long long>(kLeakSteps));
    const std::optional<train::LeakReport>& leak = check.report();
    if (leak)
      std::printf("   the leak check (train/leak_check.h) says:\n%s\n", indented(train::describe(*leak, 6), "     ").c_str());
    else
      std::printf("   the leak check (train/leak_check.h): nothing grew\n");
    checks.expect(leak.has_value() != as_numbers, as_numbers ? "the loop under NoGradGuard leaves nothing behind"
                                                             : "the leak check catches the kept losses");
  }
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::printf("Sample 11: watching memory: statistics, summary, snapshot, timeline, empty_cache, leak check\n\n");
  if (!fs::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  try {
    train::TrainOptions o;  // mobilenet_v2, AdamW, 32x32 images
    o.batch_size = kBatch;
    o.workers = 0;  // batches are loaded in the training thread: one batch alive, as planned
    o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
    CachingAllocator& allocator = default_caching_allocator(o.device);
    std::printf("MobileNetV2 on Fashion-MNIST, AdamW, batch %lld, on %s (%s allocator)\n\n", static_cast<long long>(kBatch),
                o.device.str().c_str(), std::string(allocator.name()).c_str());
    const train::MemoryPlan plan = train::plan_memory(o, {.in_channels = 1, .num_classes = 10});
    const train::RunData data = train::open_run_data("", "", o.image_size, false);

    const std::int64_t baseline = allocator.caching_stats().allocated_bytes.current;
    allocator.reset_peak_stats();
    Training training(o, data);
    training.step();
    training.step();
    samples::Checks checks;
    statistics(allocator, baseline, plan, checks);
    summary_and_snapshot(allocator, checks);
    timeline(o);
    empty_the_cache(allocator);
    a_leak(training, allocator, checks);
    return checks.exit_code("11_memory_monitoring");
  } catch (const Error& error) {
    std::fprintf(stderr, "11_memory_monitoring: %s\n", error.what());
    return 1;
  }
}
