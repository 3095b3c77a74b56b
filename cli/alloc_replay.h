// `frugal alloc-replay TRACE`: replays an allocation trace through the caching allocator on a
// simulated device and prints what the allocator reserved next to what was ideal.
// Not here: the trace formats and the replay (memory/alloc_trace.h), recording the training trace
// (train/training_trace.h).
#pragma once

#include <string>

#include "cli/subcommand.h"

namespace frugal::cli {

class AllocReplayCommand final : public Subcommand {
 public:
  explicit AllocReplayCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 replayed to the end, 3 stopped on an OOM (figures still printed), 2 bad input
  // (a one-line message "frugal alloc-replay: FILE:LINE: ..." on stderr).
  int run() const override;

 private:
  std::string trace_, limit_ = "none", allocator_ = "caching", max_split_ = "none", expandable_ = "on";
  bool json_ = false, training_trace_ = false;
  int batch_ = 32, steps_ = 8, resolution_ = 224;
};

}  // namespace frugal::cli
