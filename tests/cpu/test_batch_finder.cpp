// The batch-size search behind `frugal train --batch-size auto` (train/batch_finder.h): the
// doubling-then-bisecting search on its own, the split of a global batch, and find_batch_size with a
// stand-in for the trial steps (a memory model that can disagree with the planner), so the fallback
// paths run without training. The whole command is checked by tests/train_check.sh train_batch_auto.
#include <doctest/doctest.h>

#include <set>

#include "core/error.h"
#include "train/batch_finder.h"

using namespace frugal;

namespace {

std::int64_t exact(std::int64_t) { return 1; }

// Counts what a search asks, and refuses to be asked the same batch twice.
struct Oracle {
  std::int64_t largest_fitting = 0;
  std::set<std::int64_t> asked;
  bool operator()(std::int64_t n) {
    CHECK(asked.insert(n).second);
    return n <= largest_fitting;
  }
};

train::TrainOptions small_cnn() {
  train::TrainOptions o;
  o.model = "cnn";
  o.memory_limit = std::size_t{48} << 20;
  return o;
}

const train::RunShape kFashionShape{.plan = {.in_channels = 1, .num_classes = 10}, .train_samples = 60000};

}  // namespace

TEST_CASE("largest_fitting: doubling up, halving down, bisecting to the resolution") {
  for (const std::int64_t answer : {2, 3, 63, 64, 65, 100, 1000, 4095, 4096}) {
    for (const std::int64_t guess : {2, 64, 5000}) {
      Oracle oracle{answer, {}};
      CHECK(train::largest_fitting(guess, 2, 4096, exact, std::ref(oracle)) == answer);
      CHECK(oracle.asked.size() <= 26);  // about two passes of log2(4096)
    }
  }
  Oracle none{1, {}};
  CHECK(train::largest_fitting(64, 2, 4096, exact, std::ref(none)) == 0);
  // A coarse resolution stops early, never above the answer.
  Oracle coarse{1000, {}};
  const std::int64_t found = train::largest_fitting(64, 2, 4096, [](std::int64_t n) { return n / 16; }, std::ref(coarse));
  CHECK(found <= 1000);
  CHECK(found >= 1000 - 1000 / 16);
  CHECK_THROWS_AS(train::largest_fitting(64, 0, 4096, exact, std::ref(coarse)), ValueError);
}

TEST_CASE("split_global_batch: accumulation keeps the samples per step, micro-batches as even as can be") {
  CHECK(train::split_global_batch(256, 4096) == std::pair<std::int64_t, std::int64_t>{256, 1});
  CHECK(train::split_global_batch(256, 100) == std::pair<std::int64_t, std::int64_t>{86, 3});  // 258 samples
  CHECK(train::split_global_batch(256, 128) == std::pair<std::int64_t, std::int64_t>{128, 2});
  CHECK(train::split_global_batch(256, 127) == std::pair<std::int64_t, std::int64_t>{86, 3});
  CHECK(train::split_global_batch(7, 2) == std::pair<std::int64_t, std::int64_t>{2, 4});  // 8 samples
}

TEST_CASE("find_batch_size: the planner's largest batch, confirmed by one trial") {
  train::BatchSearchOptions search;
  std::int64_t trials = 0;
  search.trial = [&](const train::TrainOptions& o, std::size_t limit) {
    ++trials;
    CHECK(limit == static_cast<std::size_t>(0.95 * (48 << 20)));  // the trial runs under the usable budget
    return train::plan_memory(o, kFashionShape.plan).device_needed_bytes;  // the planner is right
  };
  const train::BatchChoice c = train::find_batch_size(small_cnn(), kFashionShape, search);
  CHECK(trials == 1);
  CHECK(c.batch_size == c.planned_batch);
  CHECK(c.accum == 1);
  CHECK(c.budget_source == "--memory-limit");
  train::TrainOptions next = small_cnn();
  next.batch_size = c.batch_size + 1;
  CHECK(train::plan_memory(next, kFashionShape.plan).device_needed_bytes > c.usable_bytes);
  CHECK(train::describe(c).find("chose batch " + std::to_string(c.batch_size) + ": the planner's largest") != std::string::npos);
}

TEST_CASE("find_batch_size: when the trial runs out of memory, trial steps search down from the planner's batch") {
  constexpr std::int64_t kReallyFits = 40;  // a device that holds less than the planner thinks
  train::BatchSearchOptions search;
  search.trial = [](const train::TrainOptions& o, std::size_t) -> std::int64_t {
    FRUGAL_CHECK_AS(OutOfMemoryError, o.batch_size <= kReallyFits, "stand-in device full at batch ", o.batch_size);
    return o.batch_size << 20;
  };
  const train::BatchChoice c = train::find_batch_size(small_cnn(), kFashionShape, search);
  CHECK(c.planned_batch > kReallyFits);
  CHECK(c.batch_size <= kReallyFits);
  CHECK(c.batch_size >= kReallyFits - kReallyFits / 16);
  CHECK_FALSE(c.tried.back().planned);
  CHECK(train::describe(c).find("the largest the trial steps found") != std::string::npos);
}

TEST_CASE("find_batch_size: a global batch sets the accumulation, and bad requests are refused") {
  train::BatchSearchOptions search;
  search.trial = [](const train::TrainOptions& o, std::size_t) { return train::plan_memory(o, kFashionShape.plan).peak_reserved_bytes; };
  search.global_batch = 1024;
  const train::BatchChoice c = train::find_batch_size(small_cnn(), kFashionShape, search);
  CHECK(c.accum >= 2);
  CHECK(c.batch_size * c.accum >= 1024);
  CHECK(c.batch_size * c.accum < 1024 + c.accum);
  CHECK(c.cap == 1024);
  CHECK(c.cap_reason == "the global batch");

  search.global_batch = 1;
  CHECK_THROWS_AS(train::find_batch_size(small_cnn(), kFashionShape, search), ValueError);
  search.global_batch = 64;
  train::TrainOptions accumulating = small_cnn();
  accumulating.accum = 2;
  CHECK_THROWS_AS(train::find_batch_size(accumulating, kFashionShape, search), ValueError);
  train::TrainOptions tiny = small_cnn();
  tiny.memory_limit = std::size_t{1} << 20;
  search.global_batch.reset();
  CHECK_THROWS_AS(train::find_batch_size(tiny, kFashionShape, search), OutOfMemoryError);
}

TEST_CASE("find_batch_size: without a limit the device's free memory is the budget") {
  train::TrainOptions o = small_cnn();
  o.memory_limit.reset();
  train::BatchSearchOptions search;
  search.free_bytes = [](Device) { return std::int64_t{32} << 20; };
  search.trial = [](const train::TrainOptions& t, std::size_t) { return train::plan_memory(t, kFashionShape.plan).peak_reserved_bytes; };
  const train::BatchChoice c = train::find_batch_size(o, kFashionShape, search);
  CHECK(c.budget_bytes == std::int64_t{32} << 20);
  CHECK(c.budget_source == "available host memory");
  CHECK(c.batch_size > 2);
}
