// The leak check of `frugal train`: once training is warm (from the second optimizer step on), what
// a step leaves allocated must equal what the step before it left. The usual culprit is a tensor
// kept from one step to the next (a loss appended to a list keeps its whole graph: every activation
// saved for its backward), and memory then grows by a step's activations each step until the device
// is full.
//
//   train::LeakCheck check(default_caching_allocator(device));
//   for (...) { step(); if (auto leak = check.after_step(step_number)) std::cerr << describe(*leak); }
//
// Cheap when nothing leaks: each step reads two numbers from the allocator, the bytes allocated
// outside the data tag and the number of the latest allocation. Only when the bytes grew does it walk
// the live blocks, and it names the tensors made during the step that are still alive (their block
// numbers are above the step's starting number), largest first, with their tag and the layer or op
// that made them (train/memory_context.h). The data tag is left out of both: the loader prepares
// batches ahead on its own threads, so how many are waiting when a step ends varies.
// It reports once, the first growth, and stops watching.
// Not here: the trainer's --no-leak-check flag (train/options.h), printing (cli/train.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "train/memory_context.h"

namespace frugal::train {

struct LeakReport {
  std::int64_t step = 0;                // the step at whose end memory had grown (global, from 1)
  std::size_t before = 0, after = 0;    // requested bytes outside the data tag at the ends of step - 1 and step
  std::vector<LiveTensor> survivors;    // made during `step`, alive at its end, largest first; at most kListed
  std::size_t survivor_count = 0;       // all of them
  std::size_t survivor_bytes = 0;
  static constexpr std::size_t kListed = 20;  // a report names the largest; the rest are counted
};

class LeakCheck {
 public:
  explicit LeakCheck(CachingAllocator& allocator) : allocator_(allocator) {}
  // Call at the end of every optimizer step. The first call only takes the measure; later ones
  // compare. Returns the report the first time memory grew, nullopt otherwise.
  std::optional<LeakReport> after_step(std::int64_t step);
  const std::optional<LeakReport>& report() const { return report_; }

 private:
  std::size_t watched_bytes() const;

  CachingAllocator& allocator_;
  bool measured_ = false;
  std::size_t bytes_ = 0;         // at the end of the previous step
  std::uint64_t last_serial_ = 0;  // the number of the latest block then
  std::optional<LeakReport> report_;
};

// "memory grew by 1.50 MiB between the ends of steps 2 and 3: ..." with one line per survivor
// (the first `lines` of them), and what usually causes it.
std::string describe(const LeakReport& report, std::size_t lines = 8);
// {step, before_bytes, after_bytes, grown_bytes, survivor_count, survivor_bytes,
//  survivors: [{bytes, tag, made_by}]}
nlohmann::ordered_json to_json(const LeakReport& report);

}  // namespace frugal::train
