// `frugal train --batch-size auto`: the largest micro-batch that fits the device, found before the run.
//
//   1. The budget: --memory-limit when given, else what the device has free (cuda:N: the driver's free
//      bytes; the CPU: the kernel's MemAvailable), less a safety margin for what the planner cannot
//      see (library workspaces outside frugal's allocator on a GPU; another process growing).
//   2. The planner (train/planner.h) finds the largest batch whose predicted device (the smallest
//      --memory-limit the run fits in, fragmentation included) fits the usable budget: doubling from a first guess, then bisecting, each guess planned on the meta
//      device (milliseconds to a second each, no memory).
//   3. A trial confirms it: two real optimizer steps of the run as configured (the first makes the
//      optimizer's state, the second is what every later step looks like), under a simulated limit of
//      the usable budget, with a throwaway model; the run itself starts afresh afterwards, so its
//      numbers are those of `--batch-size N` given by hand.
//   4. If the trial runs out of memory (the planner was wrong), or the planner cannot plan the run,
//      the same doubling-then-bisecting search goes on with trial steps alone, from the planner's
//      batch (or a first guess) down or up.
// With a global batch G, the micro-batch is capped at G and gradient accumulation keeps the samples
// per optimizer step at G: accum = ceil(G / largest), micro-batch = ceil(G / accum) (G itself when it
// divides; else the step has slightly more samples, and the choice says so).
// Not here: running the training (train/trainer.h), printing (cli/train.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/open_dataset.h"
#include "train/options.h"
#include "train/planner.h"

namespace frugal::train {

// The fraction of the budget left unused. 5%: on the CPU the planner's prediction is within 0.01% of
// the measured peak (docs/memory-guide.md), so the margin is for what a GPU adds out of its sight
// (cuBLAS and cuDNN workspaces, the CUDA context's own growth) and for other processes.
inline constexpr double kBatchSafetyMargin = 0.05;
// BatchNorm in training needs two samples per channel; no model here trains on one.
inline constexpr std::int64_t kSmallestBatch = 2;
// The most the search tries without a global batch: past a few thousand samples accumulation gives any
// effective batch, and a larger micro-batch makes each trial step long on a CPU for nothing.
inline constexpr std::int64_t kLargestAutoBatch = 4096;

// A run's data, opened once (from the data's headers, no pass over the samples), and what it decides
// about the run's shape: what the output checks, the batch finder, the planner and the run itself
// (train(), which takes the splits from here) read.
struct RunShape {
  PlanShape plan;                  // input channels and classes (--num-classes wins over the data's)
  std::int64_t train_samples = 0;  // the training split's size
  std::vector<std::string> sources = {};  // the files and folders the data is read from (data/open_dataset.h)
  data::DatasetSplits splits = {};        // the opened splits themselves
};
RunShape run_shape(const TrainOptions& options);

// One batch size tried, by the planner or by trial steps.
struct BatchTrial {
  std::int64_t batch_size = 0, accum = 1;
  bool planned = true;     // false: two real training steps
  bool fits = false;
  // What the batch needs: planned, the device the plan says it needs (MemoryPlan::device_needed_bytes);
  // a trial, the peak its two steps reserved; 0 for a trial that ran out of memory.
  std::int64_t needed_bytes = 0;
};

struct BatchChoice {
  std::int64_t batch_size = 0, accum = 1;
  std::optional<std::int64_t> global_batch;
  std::int64_t budget_bytes = 0, usable_bytes = 0;
  double margin = kBatchSafetyMargin;  // usable = budget x (1 - margin)
  std::string budget_source;     // "--memory-limit", "free on cuda:0", "available host memory"
  std::int64_t cap = 0;          // the largest batch the search considered
  std::string cap_reason;        // "the global batch", "the training split's size", "frugal's cap"
  std::int64_t planned_batch = 0;  // the planner's answer, 0 when it could not plan
  std::string planner_error;       // why not, when it could not
  bool planner_confirmed = false;  // its batch ran its trial steps within the usable budget
  std::vector<BatchTrial> tried;   // in the order tried
};

struct BatchSearchOptions {
  std::optional<std::int64_t> global_batch;  // samples per optimizer step to keep; none: options.accum stays
  std::int64_t first_guess = 64;
  double margin = kBatchSafetyMargin;
  // Two training steps of `options` under `limit` bytes: their measured peak reserved bytes, or an
  // OutOfMemoryError. Empty: train() itself (tests substitute a model of memory).
  std::function<std::int64_t(const TrainOptions& options, std::size_t limit)> trial = {};
  // The device's free bytes when options.memory_limit is unset. Empty: the device's (see the top).
  std::function<std::int64_t(Device device)> free_bytes = {};
  std::function<void(const BatchTrial&)> on_trial = {};  // each batch as it is tried
};

// The largest n in [smallest, cap] with fits(n), assuming more samples never need less memory: from
// `guess`, doubling while it fits (or halving while it does not), then bisecting the gap until it is
// no wider than `resolution(n)` for the largest n known to fit. 0 when `smallest` does not fit.
std::int64_t largest_fitting(std::int64_t guess, std::int64_t smallest, std::int64_t cap,
                             const std::function<std::int64_t(std::int64_t)>& resolution,
                             const std::function<bool(std::int64_t)>& fits);

// The search described at the top. OutOfMemoryError when not even kSmallestBatch fits; ValueError for
// options it cannot search (a global batch smaller than kSmallestBatch, a global batch with --accum).
BatchChoice find_batch_size(const TrainOptions& options, const RunShape& shape, const BatchSearchOptions& search = {});

// The micro-batch and accumulation that keep `global_batch` samples per step with micro-batches of at
// most `largest`: {ceil(G / accum), accum} with accum = ceil(G / largest).
std::pair<std::int64_t, std::int64_t> split_global_batch(std::int64_t global_batch, std::int64_t largest);

// What was tried and why the choice, as lines for a terminal.
std::string describe(const BatchChoice& choice);

}  // namespace frugal::train
