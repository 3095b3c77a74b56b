// What filled the device when training ran out of memory. OomExplainer watches one caching
// allocator for the length of a run (an OOM observer, core/caching_allocator.h); at the moment a
// request fails, before anything is freed by the exception, it walks the live blocks and keeps:
//   - the ledger: the live bytes per tag (param, grad, optimizer, activation, workspace, data, other),
//     then the cache (reserved but free) and fragmentation (free blocks inside split segments), so
//     the rows add up to what the allocator reserved, and the tag rows to what it allocated;
//   - the activations by layer, the layers holding most first (train/memory_context.h);
//   - the largest live tensors with the layer or op that made them;
//   - fixes, largest saving first: the ones that follow exactly from what was measured (a half batch
//     holds half the activations), and those a planner predicts, through a callback.
// train() rethrows the allocator's OutOfMemoryError as a TrainingOutOfMemoryError carrying this.
// Not here: the allocator's own explanation and hint (OomReport::message, docs/allocator.md), the
// planner that predicts savings (the FixPlanner callback is its seam), printing (cli/train.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "train/memory_context.h"
#include "train/options.h"

namespace frugal::train {

// A change that needs less memory, and how much less.
struct MemoryFix {
  std::string text;       // "--batch-size 128 --accum 2: ..."
  std::size_t bytes = 0;  // the saving
  bool measured = false;  // true: follows from bytes measured at the failure; false: a prediction
};

// Predicts fixes for the configuration that failed (the planner's seam).
using FixPlanner = std::function<std::vector<MemoryFix>(const TrainOptions& failing)>;

struct LayerBytes {
  std::string made_by;
  std::size_t bytes = 0;
};

struct OomExplanation {
  OomReport allocator;  // the allocator's figures and message
  MemoryTag request_tag = MemoryTag::other;  // the failing request's tag and maker
  std::string request_made_by;
  // The ledger, in block sizes (as allocated_bytes counts them). tag_requested: the same blocks as
  // their callers asked, which is what Allocator::stats().tag_bytes counts.
  std::array<std::size_t, kNumMemoryTags> tag_bytes{}, tag_requested{};
  std::size_t allocated = 0, reserved = 0;
  std::size_t cache = 0;          // reserved, not allocated, not in split segments: returnable
  std::size_t fragmentation = 0;  // free blocks inside segments that also hold live ones
  std::vector<LayerBytes> activation_layers;  // the top kLayers, then "N other layers" when there are more
  std::vector<LiveTensor> largest;            // the kLargest largest live tensors
  std::vector<MemoryFix> fixes;               // largest saving first
  static constexpr std::size_t kLayers = 8;   // a report a reader can take in at a glance
  static constexpr std::size_t kLargest = 8;
};

// The explanation of `report` from the live blocks of the same moment (pure: tests feed it directly).
OomExplanation explain_oom(const OomReport& report, const LiveBlocks& live, MemoryTag request_tag,
                           MemoryContextId request_context);
// The fixes that follow exactly from the measured bytes for `failing`: smaller batches with --accum
// keeping the effective batch hold proportionally fewer activations.
std::vector<MemoryFix> measured_fixes(const OomExplanation& explanation, const TrainOptions& failing);
// Fragmentation is a large share of what is reserved: at least this. 5%: below it, allocator settings
// save less than their replays can tell apart from the loader's timing (one small segment, 2 MiB of
// a 100 MiB run, is 2%).
inline constexpr double kFragmentedShare = 0.05;
// Whether fragmentation caused the out-of-memory: the free bytes split among live blocks are at least
// kFragmentedShare of what is reserved and would have held the request had they been in one piece.
// (Less than the request, and the device was short whatever the blocks' layout.)
bool fragmented(const OomExplanation& explanation);
// The ledger (saying so when fragmentation is a large share), the activations by layer, the largest
// tensors and the fixes, one item a line.
std::string describe(const OomExplanation& explanation);

// An OutOfMemoryError during training, with the explanation (same message, file and line as the
// allocator's).
class TrainingOutOfMemoryError : public OutOfMemoryError {
 public:
  TrainingOutOfMemoryError(const OutOfMemoryError& cause, OomExplanation explanation);
  const OomExplanation& explanation() const { return *explanation_; }

 private:
  std::shared_ptr<const OomExplanation> explanation_;  // shared: exceptions are copied
};

// Watches `allocator` while it lives (its OOM observer is removed in the destructor).
class OomExplainer {
 public:
  explicit OomExplainer(CachingAllocator& allocator);
  ~OomExplainer();
  OomExplainer(const OomExplainer&) = delete;
  OomExplainer& operator=(const OomExplainer&) = delete;

  // Rethrows `error` as a TrainingOutOfMemoryError with the explanation of the OOM it reports, its
  // fixes those of measured_fixes and of `planner` (when given) for `failing`; rethrows `error`
  // unchanged when this explainer did not see it happen (another allocator's OOM).
  [[noreturn]] void rethrow_explained(const OutOfMemoryError& error, const TrainOptions& failing,
                                      const FixPlanner& planner) const;

 private:
  void observe(const OomReport& report);

  CachingAllocator& allocator_;
  std::size_t observer_ = 0;
  mutable std::mutex mutex_;  // an OOM may happen on a loader thread
  std::optional<OomExplanation> latest_;
};

}  // namespace frugal::train
