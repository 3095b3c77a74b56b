// find_batch_size() and the search it is made of (see batch_finder.h).
#include "train/batch_finder.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/allocator_registry.h"
#include "core/backing.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "core/caching_allocator.h"
#include "data/open_dataset.h"
#include "train/trainer.h"

namespace frugal::train {

namespace {

// The kernel's estimate of the memory that can be given to a new program without swapping.
std::int64_t available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  FRUGAL_THROW(Error, "/proc/meminfo has no MemAvailable line: cannot tell the free host memory; give --memory-limit");
}

std::int64_t device_free_bytes(Device device) {
  if (device.is_cuda()) return static_cast<std::int64_t>(cuda_device_info(device.index()).free_bytes);
  return available_host_bytes();
}

// Restores an unlimited device after a trial set a limit, whatever the trial threw; the run that
// follows sets its own limit when it has one.
struct UnlimitAfterTrial {
  Device device;
  ~UnlimitAfterTrial() { set_memory_limit(device, kUnlimited); }
};

// Two optimizer steps of the run as configured, quiet, nothing saved, under `limit`, on the splits
// the search was given (opened once, for the search and the run).
std::int64_t train_two_steps(const TrainOptions& options, std::size_t limit, const data::DatasetSplits& splits) {
  TrainOptions trial = options;
  trial.steps = 2;
  trial.epochs = 1;
  trial.memory_limit = limit;
  trial.evaluate = false;
  trial.save.clear();
  trial.resume.clear();
  trial.json.clear();
  trial.leak_check = false;
  TrainHooks quiet;
  quiet.plan_fixes = [](const TrainOptions&) { return std::vector<MemoryFix>{}; };  // the search only needs to know it failed
  const UnlimitAfterTrial unlimit{options.device};
  return static_cast<std::int64_t>(train(trial, quiet, splits).peak_reserved_bytes);
}

// The search's state: every batch tried once, in order, with what it needed.
class Search {
 public:
  Search(const TrainOptions& options, const RunShape& shape, const BatchSearchOptions& search, BatchChoice& choice)
      : options_(options), shape_(shape), search_(search), choice_(choice) {}

  // The step's accumulation for micro-batches of at most `batch`.
  std::int64_t accum_for(std::int64_t batch) const {
    return choice_.global_batch ? split_global_batch(*choice_.global_batch, batch).second : options_.accum;
  }
  // The micro-batch the run takes when `largest` fits: the global batch split evenly, else `largest`.
  std::int64_t batch_for(std::int64_t largest) const {
    return choice_.global_batch ? split_global_batch(*choice_.global_batch, largest).first : largest;
  }
  void choose(std::int64_t largest) {
    choice_.batch_size = batch_for(largest);
    choice_.accum = accum_for(largest);
  }

  TrainOptions with_batch(std::int64_t batch) const {
    TrainOptions o = options_;
    o.batch_size = batch;
    o.accum = accum_for(batch);
    return o;
  }

  bool planned_fits(std::int64_t batch) {
    const MemoryPlan plan = plan_memory(with_batch(batch), shape_.plan);
    return record({batch, accum_for(batch), true, plan.device_needed_bytes <= choice_.usable_bytes, plan.device_needed_bytes});
  }

  bool trial_fits(std::int64_t batch) {
    if (const auto known = trials_.find(batch); known != trials_.end()) return known->second;
    const auto trial = search_.trial ? search_.trial : [this](const TrainOptions& o, std::size_t limit) {
      return train_two_steps(o, limit, shape_.splits);
    };
    BatchTrial t{batch, accum_for(batch), false, false, 0};
    try {
      t.needed_bytes = trial(with_batch(batch), static_cast<std::size_t>(choice_.usable_bytes));
      t.fits = true;
    } catch (const OutOfMemoryError&) {
      t.fits = false;
    }
    return trials_[batch] = record(t);
  }

 private:
  bool record(const BatchTrial& t) {
    choice_.tried.push_back(t);
    if (search_.on_trial) search_.on_trial(t);
    return t.fits;
  }

  const TrainOptions& options_;
  const RunShape& shape_;
  const BatchSearchOptions& search_;
  BatchChoice& choice_;
  std::map<std::int64_t, bool> trials_;  // trial steps are slow: none runs twice
};

// The search's upper end: the global batch, the training split, frugal's cap, the smallest of them.
void set_cap(BatchChoice& choice, const RunShape& shape) {
  choice.cap = kLargestAutoBatch;
  choice.cap_reason = "frugal's cap of " + std::to_string(kLargestAutoBatch);
  if (shape.train_samples < choice.cap) {
    choice.cap = shape.train_samples;
    choice.cap_reason = "the training split's size";
  }
  if (choice.global_batch && *choice.global_batch <= choice.cap) {
    choice.cap = *choice.global_batch;
    choice.cap_reason = "the global batch";
  }
}

void set_budget(BatchChoice& choice, const TrainOptions& options, const BatchSearchOptions& search) {
  if (options.memory_limit) {
    choice.budget_bytes = static_cast<std::int64_t>(*options.memory_limit);
    choice.budget_source = "--memory-limit";
  } else {
    choice.budget_bytes = search.free_bytes ? search.free_bytes(options.device) : device_free_bytes(options.device);
    choice.budget_source = options.device.is_cuda() ? "free on " + options.device.str() : "available host memory";
  }
  choice.margin = search.margin;
  choice.usable_bytes = static_cast<std::int64_t>(static_cast<double>(choice.budget_bytes) * (1.0 - search.margin));
}

// Trial steps resolve the batch to a sixteenth: each costs two real steps, and the margin is wider.
std::int64_t trial_resolution(std::int64_t batch) { return std::max<std::int64_t>(1, batch / 16); }
std::int64_t exact(std::int64_t) { return 1; }

}  // namespace

RunShape run_shape(const TrainOptions& options) {
  data::DatasetSplits splits = data::open_dataset(options.data, options.test_data, {.image_size = options.image_size});
  const data::DatasetPtr train = splits.train;
  std::vector<std::string> sources = splits.sources;
  return {.plan = {.in_channels = train->sample_shape()[0], .num_classes = options.num_classes.value_or(train->num_classes())},
          .train_samples = train->size(),
          .sources = std::move(sources),
          .splits = std::move(splits)};
}

std::int64_t largest_fitting(std::int64_t guess, std::int64_t smallest, std::int64_t cap,
                             const std::function<std::int64_t(std::int64_t)>& resolution,
                             const std::function<bool(std::int64_t)>& fits) {
  FRUGAL_CHECK_VALUE(smallest >= 1 && smallest <= cap, "cannot search batch sizes in [", smallest, ", ", cap, "]");
  std::int64_t fit = 0, miss = cap + 1;  // the largest known to fit, the smallest known not to
  std::int64_t n = std::clamp(guess, smallest, cap);
  if (fits(n)) {
    for (fit = n; fit < cap;) {  // doubling
      n = std::min(2 * fit, cap);
      if (!fits(n)) {
        miss = n;
        break;
      }
      fit = n;
    }
  } else {
    for (miss = n; fit == 0;) {  // halving
      if (miss == smallest) return 0;
      n = std::max(miss / 2, smallest);
      (fits(n) ? fit : miss) = n;
    }
  }
  while (miss - fit > resolution(fit)) {  // bisecting
    n = fit + (miss - fit) / 2;
    (fits(n) ? fit : miss) = n;
  }
  return fit;
}

std::pair<std::int64_t, std::int64_t> split_global_batch(std::int64_t global_batch, std::int64_t largest) {
  const std::int64_t accum = (global_batch + largest - 1) / largest;
  return {(global_batch + accum - 1) / accum, accum};
}

BatchChoice find_batch_size(const TrainOptions& options, const RunShape& shape, const BatchSearchOptions& search) {
  BatchChoice choice;
  choice.global_batch = search.global_batch;
  if (choice.global_batch) {
    FRUGAL_CHECK_VALUE(*choice.global_batch >= kSmallestBatch, "--global-batch must be at least ", kSmallestBatch, ", got ",
                       *choice.global_batch);
    FRUGAL_CHECK_VALUE(options.accum == 1, "--global-batch sets the accumulation itself: leave out --accum ", options.accum);
  }
  set_cap(choice, shape);
  FRUGAL_CHECK_VALUE(choice.cap >= kSmallestBatch, "the training split has ", shape.train_samples,
                     " samples: too few to search a batch size");
  set_budget(choice, options, search);
  Search s(options, shape, search, choice);

  std::int64_t largest = 0, guess = search.first_guess;
  try {
    choice.planned_batch = largest_fitting(guess, kSmallestBatch, choice.cap, exact, [&](std::int64_t n) { return s.planned_fits(n); });
    FRUGAL_CHECK_AS(OutOfMemoryError, choice.planned_batch > 0, "batch size auto: even a batch of ", kSmallestBatch, " needs ",
                    format_size(static_cast<std::size_t>(choice.tried.back().needed_bytes)), ", over the ",
                    format_size(static_cast<std::size_t>(choice.usable_bytes)), " usable of ",
                    format_size(static_cast<std::size_t>(choice.budget_bytes)), " (", choice.budget_source, ")");
    largest = choice.planned_batch;
    if (s.trial_fits(s.batch_for(largest))) {
      s.choose(largest);
      choice.planner_confirmed = true;
      return choice;
    }
    guess = s.batch_for(largest);  // the planner was wrong: trial steps from its batch down
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    choice.planner_error = e.message();  // e.g. a model the planner cannot run on meta: trial steps alone
  }
  largest = largest_fitting(guess, kSmallestBatch, choice.cap, trial_resolution, [&](std::int64_t n) { return s.trial_fits(n); });
  FRUGAL_CHECK_AS(OutOfMemoryError, largest > 0, "batch size auto: even a batch of ", kSmallestBatch,
                  " ran out of memory in a trial step under ", format_size(static_cast<std::size_t>(choice.usable_bytes)),
                  " usable of ", format_size(static_cast<std::size_t>(choice.budget_bytes)), " (", choice.budget_source, ")");
  s.choose(largest);  // no smaller than the trial that fitted: it fits too
  return choice;
}

std::string describe(const BatchChoice& c) {
  std::ostringstream out;
  out << "batch size auto: budget " << format_size(static_cast<std::size_t>(c.budget_bytes)) << " (" << c.budget_source
      << "), " << format_size(static_cast<std::size_t>(c.usable_bytes)) << " usable after a "
      << static_cast<int>(c.margin * 100 + 0.5) << "% margin; batches up to " << c.cap << " (" << c.cap_reason << ")\n";
  if (!c.planner_error.empty()) out << "  the planner could not plan the run (" << c.planner_error << "): trial steps only\n";
  for (const BatchTrial& t : c.tried) {
    out << "  " << (t.planned ? "planned " : "trial   ") << t.batch_size;
    if (t.accum > 1) out << " x " << t.accum;
    if (t.needed_bytes > 0)
      out << ": " << format_size(static_cast<std::size_t>(t.needed_bytes)) << (t.fits ? ", fits" : ", over");
    else
      out << ": out of memory";
    out << "\n";
  }
  out << "chose batch " << c.batch_size;
  if (c.accum > 1) out << " x accum " << c.accum << " = " << c.batch_size * c.accum << " samples per step";
  if (c.global_batch && c.batch_size * c.accum != *c.global_batch) out << " (the global batch " << *c.global_batch << " does not split evenly)";
  out << (c.planner_confirmed ? ": the planner's largest, confirmed by two training steps" : ": the largest the trial steps found")
      << "\n";
  return out.str();
}

}  // namespace frugal::train
