// Sample 02: the caching allocator, measured.
//   1. Caching: a tensor allocated and freed 1000 times reaches the device once.
//   2. A memory limit turns the CPU into a simulated device, and an OOM explains itself.
//   3. Fragmentation: a MobileNetV2 training trace, recorded while the model trains, whose batch
//      varies, replayed on a device a little larger than its live peak under PyTorch's rules and
//      with expandable segments.
//   4. Recording: the allocator's history as a Chrome trace for Perfetto.
// Runs on cuda:0 when a GPU is usable, otherwise on the CPU; part 3 always uses a simulated device.
// Each part checks what it shows (samples/checks.h) and the sample exits 1 when one is false; under
// FRUGAL_ALLOC=direct, which bypasses the cache, part 1 has no cache to judge.
//   02_caching_allocator [TRACE_JSON]   (default: 02_caching_allocator_trace.json in the current folder)
#include <chrono>
#include <cstdio>
#include <sstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/mapped_file.h"
#include "core/tensor.h"
#include "memory/alloc_trace.h"
#include "train/training_trace.h"
#include "kernels/cpu_runtime.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

// Part 3's trace is recorded by training MobileNetV2 for real, so its size is the sample's running
// time: 64x64 images in batches of 16 take about 2 s of CPU (9 s under ASan and UBSan, as CI runs
// every sample), where the ImageNet size the CLI and the benchmark use (224x224, batch 32) takes
// about 30 s, and about four times that under the sanitizers. The fragmentation it shows is the
// same kind.
constexpr int kTraceBatch = 16, kTraceResolution = 64;
// The simulated device's capacity above the trace's live peak. Expandable segments map memory in
// 2 MiB chunks, one pool for small blocks and one for large: at this trace's 100 MiB those chunks
// are a few percent of the peak, so the device needs that much room on top.
constexpr int kHeadroomPercent = 10;

void caching_saves_device_calls(Device device, samples::Checks& checks) {
  std::cout << "1. Caching: the device is asked once, not 1000 times\n";
  CachingAllocator& allocator = default_caching_allocator(device);
  const auto backing_calls = [&allocator] {
    const CachingStats s = allocator.caching_stats();
    return s.backing_allocs + s.backing_maps;
  };
  const std::int64_t before = backing_calls();
  std::int64_t after_first = 0;  // the first allocation may reach the device (one segment, or its chunks)
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    Tensor t = empty({1024, 1024}, {.device = device});  // 4 MiB, freed at once
    if (i == 0) after_first = backing_calls();
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const CachingStats after = allocator.caching_stats();
  std::printf("   1000 x empty({1024, 1024}) on %s: %lld backing calls, %.2f us per allocate+free\n",
              device.str().c_str(), static_cast<long long>(backing_calls() - before), us / 1000);
  std::printf("   reserved now %s, allocated %s: the cache keeps the block for the next request\n",
              format_size(after.reserved_bytes.current).c_str(), format_size(after.allocated_bytes.current).c_str());
  const std::size_t returned = allocator.empty_cache();
  std::printf("   empty_cache() gave back %s\n\n", format_size(returned).c_str());
  if (allocator.name() == "direct") return;  // FRUGAL_ALLOC=direct: every request goes to the device, by design
  checks.expect(backing_calls() == after_first, "the 999 allocations after the first reach the device 0 times");
  checks.expect(returned >= (std::size_t{4} << 20), "the freed 4 MiB block stays cached until empty_cache()");
}

void a_limit_and_an_explained_oom(Device device, samples::Checks& checks) {
  std::cout << "2. A memory limit, and an OOM that explains itself\n";
  CachingAllocator& allocator = default_caching_allocator(device);
  const std::size_t limit = allocator.backing().held_bytes() + (64 << 20);
  set_memory_limit(device, limit);
  std::printf("   set_memory_limit(%s, %s)\n", device.str().c_str(), format_size(limit).c_str());
  Tensor kept = empty({8, 1024, 1024}, {.device = device});  // 32 MiB
  try {
    Tensor too_big = empty({12, 1024, 1024}, {.device = device});  // 48 MiB more: over the limit
    checks.expect(false, "48 MiB more than 32 MiB under a 64 MiB limit throws OutOfMemoryError");
  } catch (const OutOfMemoryError& error) {
    std::cout << "   OutOfMemoryError: " << error.message() << "\n";
  }
  Tensor fits = empty({4, 1024, 1024}, {.device = device});  // the allocator keeps working
  std::printf("   afterwards a 16 MiB tensor still fits: %s allocated, %lld OOM so far\n\n",
              format_size(allocator.caching_stats().allocated_bytes.current).c_str(),
              static_cast<long long>(allocator.caching_stats().num_ooms));
  kept = fits = Tensor();
  set_memory_limit(device, kUnlimited);
}

void fragmentation_on_a_simulated_device(samples::Checks& checks) {
  std::cout << "3. Fragmentation: PyTorch's rules against expandable segments, same trace, same device\n";
  const train::TrainingTraceOptions options{.batch_size = kTraceBatch, .steps = 8, .resolution = kTraceResolution};
  const auto start = std::chrono::steady_clock::now();
  const Trace trace = parse_trace_text(train::record_training_trace(options), "training-trace");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ReplayResult ideal = replay(trace, {.expandable = true});
  const std::size_t limit = ideal.peak_live_bytes + ideal.peak_live_bytes * kHeadroomPercent / 100;
  std::printf("   MobileNetV2 trained at %dx%d, batch cycling %d/%d/%d/%d, recorded in %.1f s: %zu events\n",
              kTraceResolution, kTraceResolution, train::training_batch_for_step(options, 0),
              train::training_batch_for_step(options, 1), train::training_batch_for_step(options, 2),
              train::training_batch_for_step(options, 3), seconds, trace.events.size());
  std::printf("   live peak %s; device %s (%d%% more)\n", format_size(ideal.peak_live_bytes).c_str(),
              format_size(limit).c_str(), kHeadroomPercent);
  for (bool expandable : {false, true}) {
    const ReplayResult r = replay(trace, {.limit = limit, .expandable = expandable});
    std::printf("   %-34s peak reserved %s (%.3fx live), %lld retries, %s\n",
                expandable ? "expandable segments (frugal's default):" : "fixed segments (PyTorch's rules):",
                format_size(r.peak_reserved_bytes).c_str(),
                static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_live_bytes),
                static_cast<long long>(r.alloc_retries), r.oom ? "OUT OF MEMORY" : "fits");
    if (r.oom) std::cout << "     at trace line " << r.oom->event << ": " << r.oom->message << "\n";
    // The lesson: the same trace on the same device, out of memory in fixed segments only.
    checks.expect(r.oom.has_value() != expandable, expandable ? "with expandable segments the trace fits"
                                                              : "under PyTorch's rules the trace runs out of memory");
  }
  std::cout << "\n";
}

void record_a_timeline(Device device, const std::string& path, samples::Checks& checks) {
  std::cout << "4. Recording: the allocator's history as a timeline\n";
  CachingAllocator& allocator = default_caching_allocator(device);
  allocator.record_history(10000);
  {
    MemoryTagScope params(MemoryTag::param);
    Tensor weight = zeros({256, 256}, {.device = device});
    MemoryTagScope activations(MemoryTag::activation);
    for (int layer = 0; layer < 8; ++layer) Tensor activation = ones({64, 256, 16}, {.device = device});
  }
  const auto events = allocator.history().size();
  std::ostringstream trace;
  allocator.write_chrome_trace(trace);
  write_file_atomically(path, trace.str());  // core/mapped_file.h: never a half-written trace
  allocator.record_history(0);
  std::printf("   %zu events written to %s: open it in https://ui.perfetto.dev or chrome://tracing\n\n", events,
              path.c_str());
  checks.expect(events >= 2 * 9, "the history holds the 9 allocations and their 9 frees");
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::cout << "device: " << device;
  if (device.is_cpu()) std::cout << " (" << cuda_status().reason << ")";
  std::cout << "\n\n";
  samples::Checks checks;
  caching_saves_device_calls(device, checks);
  a_limit_and_an_explained_oom(device, checks);
  fragmentation_on_a_simulated_device(checks);
  record_a_timeline(device, argc > 1 ? argv[1] : "02_caching_allocator_trace.json", checks);
  std::cout << default_caching_allocator(device).memory_summary();
  return checks.exit_code("02_caching_allocator");
}
