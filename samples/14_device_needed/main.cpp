// Sample 14: the device a run needs. The most a run holds allocated at once is a floor, not a device
// size: the caching allocator reserves segments, and free blocks split among live ones
// (fragmentation) cannot serve every request. The plan's device_needed_bytes (train/planner.h,
// docs/memory-guide.md "The device a run needs") is the smallest simulated device the run succeeds on.
//   1. The plan of the default run (MobileNetV2, batch 64, AdamW, one loader worker) on Fashion-MNIST:
//      what its requests hold at once, its peak allocated and reserved, and the device needed with its
//      two pieces: the smallest device its six planned steps' requests replay on under this process's
//      allocator policy (FRUGAL_ALLOC_CONF), plus loader_allowance for the worker.
//   2. That run trained for real (train::train) under memory_limit = device needed: its measured peak
//      reserved beside the prediction.
//   3. Less: the requests replayed at the allocated peak and 1 MiB below the replay's figure run out of
//      memory; a real run without a loader worker (whose device needed is the replay's figure alone)
//      runs out 1 MiB below its figure, with the fragmentation its explanation measured, and runs at it.
//   4. The same requests under the allocator's other policies: the device each would need.
// On the CPU, where memory_limit is a simulated device (set_memory_limit) and the planner sees every
// request: on a GPU cuDNN's and cuBLAS's own workspaces are beyond its sight (train/planner.h).
// Needs Debian's dataset-fashion-mnist (it says so and exits 0 when missing).
// Checked (samples/checks.h; the sample exits 1 when one is false): the device needed is the replay's
// figure plus the allowance; the run under it completes, with the device needed at most 10% above its
// measured peak reserved; the replays below the figure run out of memory; the run without a worker
// runs out 1 MiB below its figure and completes at it.
//   14_device_needed [STEPS]   (default 200 training steps in part 2)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "data/idx.h"
#include "data/loader.h"
#include "kernels/cpu_runtime.h"
#include "memory/alloc_trace.h"
#include "train/batch_finder.h"
#include "train/oom_explainer.h"
#include "train/planner.h"
#include "train/trainer.h"
#include "samples/arguments.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;  // devices are sized in whole MiB, as smallest_device's search
// 200 steps of 64 images: past the planned six many times over, 39 s on 2 busy cores; the test runs fewer.
constexpr std::int64_t kDefaultSteps = 200;
// The run without a worker, at its figure: past the six planned steps, so every kind of step (the first,
// which makes AdamW's moments, and those after) has run under the limit more than once.
constexpr std::int64_t kBorderSteps = 12;
// A device figure more than this above what the run reserved would over-buy memory: the worker's
// allowance (4 MiB) and the search's 1 MiB resolution are 5% of a 100 MiB run.
constexpr double kOverAtMost = 0.10;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }
double mib(std::size_t bytes) { return mib(static_cast<std::int64_t>(bytes)); }

// Trains `o` under `limit` from an empty device: the cache of an earlier run would count as reserved.
train::TrainResult train_under(train::TrainOptions o, std::int64_t limit, const train::RunShape& shape,
                               std::int64_t* last_step = nullptr) {
  CachingAllocator& allocator = default_caching_allocator(o.device);
  allocator.empty_cache();
  o.memory_limit = static_cast<std::size_t>(limit);
  train::TrainHooks hooks;
  if (last_step) hooks.on_step = [last_step](const train::StepInfo& info) { *last_step = info.global_step; };
  try {
    train::TrainResult r = train::train(o, hooks, shape.splits);
    set_memory_limit(o.device, kUnlimited);  // the trainer sets the limit and leaves it: the process's next run is another
    return r;
  } catch (...) {
    set_memory_limit(o.device, kUnlimited);
    throw;
  }
}

// Whether `requests` replay under `policy` on a device of `limit` bytes; says how it went.
bool replays(const Trace& requests, ReplayOptions policy, std::int64_t limit, const char* what) {
  policy.limit = static_cast<std::size_t>(limit);
  const ReplayResult r = replay(requests, policy);
  if (r.oom)
    std::printf("   %-40s %8.2f MiB: out of memory at request %zu of %zu (%.2f MiB), after a peak of %.2f MiB allocated\n",
                what, mib(limit), r.events + 1, requests.events.size(), mib(r.oom->requested_bytes),
                mib(r.peak_allocated_bytes));
  else
    std::printf("   %-40s %8.2f MiB: all %zu requests served, %.2f MiB reserved at the peak\n", what, mib(limit),
                requests.events.size(), mib(r.peak_reserved_bytes));
  return !r.oom;
}

std::string policy_name(const ReplayOptions& p) {
  return std::string("expandable:") + (p.expandable ? "on" : "off") +
         (p.max_split == kUnlimited ? std::string() : ",max_split:" + std::to_string(p.max_split >> 20) + "MiB");
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const std::optional<std::int64_t> steps = samples::steps_argument(argc, argv, "14_device_needed", 1, 100000, kDefaultSteps);
  if (!steps) return 2;
  std::printf("Sample 14: the device a run needs (train/planner.h, device_needed_bytes)\n\n");
  if (!std::filesystem::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  train::TrainOptions o;  // frugal train's defaults: MobileNetV2, batch 64, AdamW, one loader worker
  o.steps = *steps;
  o.evaluate = false;     // memory is the lesson; the test split's accuracy would double the time
  o.device = Device::cpu();
  samples::Checks checks;
  try {
    const train::RunShape shape = train::run_shape(o);
    const ReplayOptions policy = train::replay_policy(CachingOptions::from_environment());

    // 1. The plan, and the pieces of its device figure.
    const train::MemoryPlan plan = train::plan_memory(o, shape.plan);
    const Trace& requests = *plan.requests;
    const ReplayResult unlimited = replay(requests, policy);
    const std::int64_t replayed = train::smallest_device(requests, policy);
    const std::int64_t allowance = train::loader_allowance(o.workers);
    std::printf("1. The plan: %s, batch %lld, %d loader worker, on %s; %zu requests in its six planned steps\n",
                o.model.c_str(), static_cast<long long>(o.batch_size), o.workers, o.device.str().c_str(),
                requests.events.size());
    std::printf("   requested, alive at once        %8.2f MiB  (what an allocator with no rounding and no segments "
                "would reserve)\n", mib(unlimited.peak_live_bytes));
    std::printf("   peak allocated                  %8.2f MiB  (blocks, rounded to the allocator's sizes)\n",
                mib(plan.peak_bytes));
    std::printf("   peak reserved                   %8.2f MiB  (segments, on a device with no limit)\n",
                mib(plan.peak_reserved_bytes));
    std::printf("   smallest device of the replay   %8.2f MiB  (the requests replayed under %s, binary search)\n",
                mib(replayed), policy_name(policy).c_str());
    std::printf("   + loader allowance              %8.2f MiB  (%d worker x %d batches in flight x one 2 MiB small segment)\n",
                mib(allowance), o.workers, static_cast<int>(data::LoaderOptions{}.prefetch));
    std::printf("   = device needed                 %8.2f MiB\n\n", mib(plan.device_needed_bytes));
    checks.expect(plan.device_needed_bytes == replayed + allowance,
                  "the device needed is the replay's figure plus the loader allowance");

    // 2. The run, for real, on a device of exactly that size.
    std::printf("2. frugal train's run for %lld steps under --memory-limit %.0fMiB (a simulated device on the CPU)\n",
                static_cast<long long>(*steps), mib(plan.device_needed_bytes));
    const train::TrainResult run = train_under(o, plan.device_needed_bytes, shape);
    const double over = mib(plan.device_needed_bytes) / mib(run.peak_reserved_bytes) - 1;
    std::printf("   %s after %lld steps, %.0f images/s: peak %.2f MiB allocated, %.2f MiB reserved\n",
                run.training_done ? "completed" : "STOPPED", static_cast<long long>(run.steps), run.images_per_sec,
                mib(run.peak_allocated_bytes), mib(run.peak_reserved_bytes));
    std::printf("   device needed %.2f MiB is %.1f%% above the measured peak reserved; "
                "the predicted reserved %.2f MiB is %.1f%% %s it\n\n",
                mib(plan.device_needed_bytes), 100 * over, mib(plan.peak_reserved_bytes),
                100 * std::abs(mib(plan.peak_reserved_bytes) / mib(run.peak_reserved_bytes) - 1),
                plan.peak_reserved_bytes <= static_cast<std::int64_t>(run.peak_reserved_bytes) ? "below" : "above");
    checks.expect(run.training_done, "the run completes on a device of the size the plan says it needs");
    checks.expect(over <= kOverAtMost, "the device needed is at most 10% above the measured peak reserved");

    // 3. Less than the figure.
    std::printf("3. Less: the same requests replayed on smaller devices\n");
    const std::int64_t floor = (plan.peak_bytes + kMiB - 1) / kMiB * kMiB;
    checks.expect(!replays(requests, policy, floor, "the peak allocated, rounded up to a MiB"),
                  "the requests do not replay on a device the size of the peak allocated");
    checks.expect(!replays(requests, policy, replayed - kMiB, "1 MiB below the replay's figure"),
                  "the requests do not replay 1 MiB below the replay's figure");
    checks.expect(replays(requests, policy, replayed, "the replay's figure"), "the requests replay on the replay's figure");

    // Without a worker the batch is made in the step's own order, so the plan's replay is the run's.
    train::TrainOptions alone = o;
    alone.workers = 0;
    alone.steps = kBorderSteps;
    const std::int64_t needed_alone = train::plan_memory(alone, shape.plan).device_needed_bytes;
    std::printf("   the run without a loader worker needs %.2f MiB (no allowance); trained for real:\n", mib(needed_alone));
    std::int64_t reached = 0;
    try {
      train_under(alone, needed_alone - kMiB, shape, &reached);
      std::printf("   at %.2f MiB: trained %lld steps (not as planned)\n", mib(needed_alone - kMiB),
                  static_cast<long long>(kBorderSteps));
      checks.expect(false, "without a worker the run runs out of memory 1 MiB below its device needed");
    } catch (const train::TrainingOutOfMemoryError& error) {
      const train::OomExplanation& e = error.explanation();
      std::printf("   at %.2f MiB: out of memory in step %lld asking %.2f MiB, with %.2f MiB allocated, %.2f MiB reserved,\n"
                  "      of which %.2f MiB free but split among live blocks (fragmentation, %.1f%% of reserved)\n",
                  mib(needed_alone - kMiB), static_cast<long long>(reached + 1), mib(e.allocator.requested), mib(e.allocated),
                  mib(e.reserved), mib(e.fragmentation), 100 * mib(e.fragmentation) / mib(e.reserved));
    }
    const train::TrainResult at_figure = train_under(alone, needed_alone, shape);
    std::printf("   at %.2f MiB: %s %lld steps, %.2f MiB reserved at the peak\n\n", mib(needed_alone),
                at_figure.training_done ? "trained" : "STOPPED after", static_cast<long long>(at_figure.steps),
                mib(at_figure.peak_reserved_bytes));
    checks.expect(at_figure.training_done, "without a worker the run completes on its device needed");

    // 4. The allocator's other policies (FRUGAL_ALLOC_CONF), replayed on the same requests.
    std::printf("4. The same requests under each allocator policy (FRUGAL_ALLOC_CONF)\n");
    std::printf("   %-34s %14s %14s %14s\n", "policy", "reserved", "smallest", "device needed");
    for (const bool expandable : {true, false})
      // 32 MiB: the first whole step above kLargeBuffer's 20 MiB, the least max_split may be.
      for (const std::size_t max_split : {kUnlimited, std::size_t{32} << 20}) {
        const ReplayOptions p{.max_split = max_split, .expandable = expandable};
        const std::int64_t smallest = train::smallest_device(requests, p);
        std::printf("   %-34s %10.2f MiB %10.2f MiB %10.2f MiB%s\n", policy_name(p).c_str(),
                    mib(replay(requests, p).peak_reserved_bytes), mib(smallest), mib(smallest + allowance),
                    p.expandable == policy.expandable && p.max_split == policy.max_split ? "  (this process's)" : "");
      }
    std::printf("   (reserved: with no limit; smallest: the device the requests replay on, each failing request first\n"
                "   emptying the cache and retrying; device needed: that plus the worker's %.0f MiB. max_split keeps only\n"
                "   blocks of 32 MiB or more whole; expandable segments grow one segment per pool in 2 MiB chunks\n"
                "   instead of adding fixed 2 MiB, 20 MiB and one-request segments: core/caching_allocator.h)\n", mib(allowance));
  } catch (const Error& error) {
    std::fprintf(stderr, "14_device_needed: %s\n", error.what());
    return 1;
  }
  return checks.exit_code("14_device_needed");
}
