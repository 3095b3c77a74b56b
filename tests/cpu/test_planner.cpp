// The meta device and the memory planner: meta tensors have shapes and counted allocations but no
// data; ops on them allocate what the CPU would; the planner's figures hold together (parameters
// as the model's, activations linear in the batch, checkpointing and bf16 saving what they should;
// checkpointing some blocks among the budget's options and the out-of-memory fixes); and a plan's
// cost is bounded by the model's layers, not its tensors' sizes (no CPU memory for a huge classifier,
// no work per sample for a huge batch).
// How close the plan comes to a measured run is checked against `frugal train` (tests/train_check.sh
// plan_matches_train), since only a whole run measures what a run holds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "kernels/conv.h"
#include "kernels/reduce.h"
#include "models/registry.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "train/step.h"

using namespace frugal;

// Heap allocations made on this thread while a count is on: a measure of work that needs no clock.
// Every view, tensor handle and graph node is one, so a loop over samples shows as millions. This
// replaces the program's operator new (the standard's way to observe it); it counts nothing unless asked.
namespace {
thread_local std::int64_t* t_heap_allocations = nullptr;
}  // namespace

// Every form that is not over-aligned is replaced, throwing and nothrow, single and array: a runtime
// that supplies its own (AddressSanitizer does) must never see one of its blocks freed by ours, or
// the reverse (ASan: alloc-dealloc-mismatch in std::stable_sort's nothrow temporary buffer).
namespace {
void* counted_malloc(std::size_t bytes) noexcept {
  if (t_heap_allocations) ++*t_heap_allocations;
  return std::malloc(bytes == 0 ? 1 : bytes);
}
}  // namespace

void* operator new(std::size_t bytes) {
  if (void* p = counted_malloc(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) {
  if (void* p = counted_malloc(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return counted_malloc(bytes); }
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept { return counted_malloc(bytes); }
// Not inlined: GCC would then see free() meet a pointer from operator new and warn of a mismatch.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {
std::int64_t meta_allocated() { return default_caching_allocator(Device::meta()).caching_stats().allocated_bytes.current; }

train::TrainOptions small_mobilenet(std::int64_t batch) {
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.width = 0.25;
  o.batch_size = batch;
  return o;
}

// Full width at a batch of 32: the activations outweigh the parameters and AdamW's state, and the
// caching allocator's 2 MiB segments are small beside the differences checkpointing makes.
train::TrainOptions full_mobilenet() {
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.batch_size = 32;
  return o;
}

std::int64_t sum_of(const train::MemoryPlan& plan, std::int64_t train::LayerPlan::*field) {
  std::int64_t total = 0;
  for (const train::LayerPlan& l : plan.layers) total += l.*field;
  return total;
}
}  // namespace

TEST_CASE("meta tensors: parsed and printed, allocated and counted, but hold no data") {
  CHECK(Device::parse("meta") == Device::meta());
  CHECK(Device::meta().str() == "meta");
  const std::int64_t before = meta_allocated();
  {
    const Tensor x = empty({8, 3, 32, 32}, {.device = Device::meta()});
    const Tensor w = empty({16, 3, 3, 3}, {.device = Device::meta()});
    const Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
    CHECK(y.shape() == Shape{8, 16, 32, 32});
    CHECK(y.device() == Device::meta());
    CHECK(meta_allocated() - before >= static_cast<std::int64_t>(x.nbytes() + w.nbytes() + y.nbytes()));
    CHECK_THROWS_AS(y.to(Device::cpu()), DeviceError);
    CHECK_THROWS_WITH_AS(sum(y).item<double>(), doctest::Contains("meta tensor has a shape but no data"), DeviceError);
    CHECK(ones({4}).to(Device::meta()).device() == Device::meta());  // to meta: nothing to copy
  }
  CHECK(meta_allocated() == before);
}

TEST_CASE("the planner: parameters, gradients and optimizer state are the model's own") {
  const train::MemoryPlan plan = train::plan_memory(small_mobilenet(8));
  const auto model = models::make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width_mult = 0.25});
  std::int64_t param_bytes = 0;
  for (const Tensor& p : model->parameters()) param_bytes += static_cast<std::int64_t>(p.nbytes());
  CHECK(sum_of(plan, &train::LayerPlan::param_bytes) == param_bytes);
  CHECK(sum_of(plan, &train::LayerPlan::grad_bytes) == param_bytes);
  CHECK(sum_of(plan, &train::LayerPlan::optimizer_bytes) == 2 * param_bytes);  // AdamW: two moments
  CHECK(plan.layers.front().name == "features.0.0");
  CHECK(plan.layers.back().name == "classifier.1");
  REQUIRE(plan.phases.size() == 4);
  CHECK(plan.phases[0].name == "init");
  CHECK(plan.phases[0].end_bytes >= param_bytes);
  // The peak holds at least the parameters, their state and what the forward saved.
  CHECK(plan.peak_bytes >= 3 * param_bytes + sum_of(plan, &train::LayerPlan::saved_bytes));
  CHECK(plan.peak_bytes >= plan.phases[2].peak_bytes);
  CHECK(plan.peak_reserved_bytes >= plan.peak_bytes);
  CHECK(meta_allocated() == 0);  // the plan leaves nothing behind on the meta device
}

TEST_CASE("the planner: saved activations grow linearly with the batch, checkpointing and bf16 save less") {
  const auto saved = [](train::TrainOptions o) { return sum_of(train::plan_memory(o), &train::LayerPlan::saved_bytes); };
  const std::int64_t s8 = saved(small_mobilenet(8)), s16 = saved(small_mobilenet(16)), s32 = saved(small_mobilenet(32));
  CHECK(s8 > 0);
  CHECK(static_cast<double>(s32 - s16) == doctest::Approx(2.0 * static_cast<double>(s16 - s8)).epsilon(0.02));
  train::TrainOptions checkpointed = small_mobilenet(32);
  checkpointed.checkpoint_activations = true;
  CHECK(saved(checkpointed) < s32 / 3);  // only the blocks' inputs stay
  train::TrainOptions bf16 = small_mobilenet(32);
  bf16.amp = DType::bf16;
  CHECK(saved(bf16) < s32 * 3 / 4);
  train::TrainOptions sgd = small_mobilenet(8);
  sgd.optimizer = train::OptimizerKind::sgd;
  sgd.momentum = 0.0;
  CHECK(sum_of(train::plan_memory(sgd), &train::LayerPlan::optimizer_bytes) == 0);  // no momentum, no state
}

TEST_CASE("the planner refuses what cannot train") {
  train::TrainOptions o = small_mobilenet(0);
  CHECK_THROWS_AS(train::plan_memory(o), ValueError);
  CHECK_THROWS_AS(train::plan_memory(small_mobilenet(1)), ValueError);  // BatchNorm needs two values per channel
  CHECK(meta_allocated() == 0);
}

TEST_CASE("the planner: checkpointing the first k blocks needs less as k grows, and the smallest fitting k is found") {
  const auto planned = [](std::int64_t k) {
    train::TrainOptions o = full_mobilenet();
    o.checkpoint_blocks = models::BlockSelection::first(k);
    return train::plan_memory(o);
  };
  std::int64_t previous_peak = 0, previous_saved = 0;
  for (const std::int64_t k : {0, 1, 3, 6, 9, 13, 17}) {
    CAPTURE(k);
    const train::MemoryPlan plan = planned(k);
    const std::int64_t saved = sum_of(plan, &train::LayerPlan::saved_bytes);
    if (k > 0) {
      CHECK(plan.device_needed_bytes <= previous_peak);  // what smallest_checkpoint_prefix's search takes
      CHECK(saved < previous_saved);
    }
    previous_peak = plan.device_needed_bytes;
    previous_saved = saved;
  }
  // Blocks 1-17 are every block: the same plan as checkpoint_activations.
  train::TrainOptions all = full_mobilenet();
  all.checkpoint_activations = true;
  CHECK(train::plan_memory(all).peak_bytes == planned(17).peak_bytes);

  // A limit between the plain run's device and the all-blocks one: the answer fits and one block fewer does not.
  const std::int64_t limit = (planned(0).device_needed_bytes + planned(17).device_needed_bytes) / 2;
  const std::optional<std::int64_t> k = train::smallest_checkpoint_prefix(full_mobilenet(), limit);
  REQUIRE(k.has_value());
  MESSAGE("limit ", limit, ": checkpoint blocks 1-", *k);
  CHECK(*k >= 1);
  CHECK(*k < 17);
  CHECK(planned(*k).device_needed_bytes <= limit);
  CHECK(planned(*k - 1).device_needed_bytes > limit);
  CHECK_FALSE(train::smallest_checkpoint_prefix(full_mobilenet(), planned(17).device_needed_bytes - 1).has_value());
  CHECK(meta_allocated() == 0);
}

TEST_CASE("the planner: fit_budget offers some blocks checkpointed, ranked by the fraction recomputed") {
  train::TrainOptions o = small_mobilenet(4);
  const std::int64_t plain = train::plan_memory(o).device_needed_bytes;
  train::TrainOptions all = o;
  all.checkpoint_activations = true;
  const std::int64_t recomputed = train::plan_memory(all).device_needed_bytes;
  const auto options = train::fit_budget(o, (plain + recomputed) / 2);
  std::set<std::string> blocks;
  for (const train::BudgetOption& b : options) blocks.insert(b.checkpoint_blocks.str());
  CHECK(blocks == std::set<std::string>{"none", "1-5", "1-9", "1-13", "all"});  // a quarter, a half, three quarters of 17
  // Among the options that fit at a batch of 16 in f32 with the optimizer as given, on the device,
  // fewer blocks recomputed come first (another optimizer changes the numbers, so it ranks after all
  // of them; the optimizer on the host is priced as recomputing every block).
  std::vector<double> fractions;
  for (const train::BudgetOption& b : options)
    if (b.fits && b.accum == 1 && !b.bf16 && b.saving.standard() && b.optimizer == o.optimizer && !b.offload_optimizer &&
        !b.offload_activations)
      fractions.push_back(b.recomputed);
  REQUIRE_FALSE(fractions.empty());
  CHECK(std::is_sorted(fractions.begin(), fractions.end()));
  CHECK(fractions.front() < 1.0);  // some partial set fits: the whole model need not be recomputed
  for (const train::BudgetOption& b : options)
    if (b.checkpoint_blocks.str() == "1-9") CHECK(b.recomputed == doctest::Approx(9.0 / 17.0));
}

TEST_CASE("the planner: an out-of-memory run under a limit is offered the fewest first blocks that fit") {
  train::TrainOptions failing = full_mobilenet();
  train::TrainOptions all = failing;
  all.checkpoint_activations = true;
  const std::int64_t plain = train::plan_memory(failing).peak_reserved_bytes;
  const std::int64_t limit = (plain + train::plan_memory(all).peak_reserved_bytes) / 2;
  failing.memory_limit = static_cast<std::size_t>(limit);
  const std::int64_t k = train::smallest_checkpoint_prefix(failing, limit).value();
  const std::vector<train::MemoryFix> fixes = train::planned_fixes(failing, {});
  const std::string expected = "--checkpoint-blocks 1-" + std::to_string(k) + ": needs ";
  CHECK(std::any_of(fixes.begin(), fixes.end(), [&](const train::MemoryFix& f) { return f.text.rfind(expected, 0) == 0; }));
  CHECK(std::any_of(fixes.begin(), fixes.end(),
                    [](const train::MemoryFix& f) { return f.text.rfind("--checkpoint-activations: ", 0) == 0; }));
  // Without a limit, half the blocks: 1-9 of 17.
  failing.memory_limit.reset();
  const std::vector<train::MemoryFix> unlimited = train::planned_fixes(failing, {});
  CHECK(std::any_of(unlimited.begin(), unlimited.end(),
                    [](const train::MemoryFix& f) { return f.text.rfind("--checkpoint-blocks 1-9: needs ", 0) == 0; }));
}

TEST_CASE("the planner runs the trainer's step: f16 autocast with its GradScaler and accumulation planned to the byte") {
  // The run the plan is of, on the CPU: the trainer's recipe and step (train/recipe.h, train/step.h),
  // two micro-batches per step, the loader's one batch (no workers) made when the step asks for it.
  train::TrainOptions o;
  o.model = "cnn";
  o.batch_size = 8;
  o.accum = 2;
  o.amp = DType::f16;
  o.workers = 0;
  const train::MemoryPlan plan = train::plan_memory(o);
  CachingAllocator& cpu = default_caching_allocator(Device::cpu());
  cpu.empty_cache();
  const std::int64_t before = cpu.caching_stats().allocated_bytes.current;
  cpu.reset_peak_stats();
  {
    const auto model = models::make_model(o.model, train::model_options(o, 1, 10));
    model->train();
    const train::Recipe recipe = train::make_recipe(*model, nullptr, o, 6);
    REQUIRE(recipe.scaler->is_enabled());
    const train::StepHooks hooks{.next_batch = [&o] {
      const MemoryTagScope tag(MemoryTag::data);
      return data::Batch{zeros({o.batch_size, 1, o.image_size, o.image_size}), zeros({o.batch_size}, {.dtype = DType::i64}), {}};
    }};
    for (int step = 0; step < 6; ++step) {
      const train::StepResult result =
          train::optimizer_step(recipe.parts(*model, nullptr), train::step_recipe(o), o.accum, o.accum * o.batch_size, hooks);
      CHECK(result.updated);
      CHECK(result.totals.samples == 16);
    }
    CHECK(recipe.scaler->get_scale() == 65536.0);  // no overflow: the scale kept
  }
  CHECK(cpu.caching_stats().allocated_bytes.peak - before == plan.peak_bytes);
  // The device it needs is the smallest the planned steps replay on: 1 MiB less runs out of memory.
  const ReplayOptions policy = train::replay_policy(CachingOptions::from_environment());
  REQUIRE(plan.requests);
  CHECK(plan.device_needed_bytes == train::smallest_device(*plan.requests, policy));
  const auto capped = [&policy](std::int64_t bytes) {
    ReplayOptions limited = policy;
    limited.limit = static_cast<std::size_t>(bytes);
    return limited;
  };
  CHECK_FALSE(replay(*plan.requests, capped(plan.device_needed_bytes)).oom.has_value());
  CHECK(replay(*plan.requests, capped(plan.device_needed_bytes - (1 << 20))).oom.has_value());
  CHECK(plan.device_needed_bytes <= plan.peak_reserved_bytes + (1 << 20));
}

namespace {
// Sets (or, with nullptr, unsets) an environment variable for its lifetime, then puts back what was there.
class EnvironmentScope {
 public:
  EnvironmentScope(const char* name, const char* value) : name_(name) {
    if (const char* was = std::getenv(name)) before_ = was;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvironmentScope() {
    if (before_) setenv(name_, before_->c_str(), 1);
    else unsetenv(name_);
  }
  EnvironmentScope(const EnvironmentScope&) = delete;
  EnvironmentScope& operator=(const EnvironmentScope&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};
}  // namespace

TEST_CASE("the planner: an allocator setting is offered as a fix when replaying the run's requests under it needs less") {
  train::TrainOptions o = full_mobilenet();
  o.workers = 0;
  // Without expandable segments blocks split among live ones; with them (the default) the same
  // requests fit a smaller device, and that setting is the fix, predicted by the replay. The
  // allocator's environment is this test's for its length (the sanitizer pass runs the suite with
  // FRUGAL_ALLOC=direct, which would bypass the cache the settings are about).
  const EnvironmentScope caching("FRUGAL_ALLOC", nullptr);
  std::optional<EnvironmentScope> conf(std::in_place, "FRUGAL_ALLOC_CONF", "expandable:off");
  const train::MemoryPlan fixed_segments = train::plan_memory(o);
  const std::vector<train::MemoryFix> fixes = train::planned_fixes(o, {});
  conf.emplace("FRUGAL_ALLOC_CONF", nullptr);
  const train::MemoryPlan expandable = train::plan_memory(o);
  REQUIRE(expandable.device_needed_bytes < fixed_segments.device_needed_bytes);
  const auto setting = std::find_if(fixes.begin(), fixes.end(), [](const train::MemoryFix& f) {
    return f.text.rfind("FRUGAL_ALLOC_CONF=expandable:on ", 0) == 0;
  });
  REQUIRE(setting != fixes.end());
  CHECK(setting->bytes == static_cast<std::size_t>(fixed_segments.device_needed_bytes - expandable.device_needed_bytes));
  // Under the default no setting needs less: none is offered.
  for (const train::MemoryFix& f : train::planned_fixes(o, {})) CHECK(f.text.find("FRUGAL_ALLOC_CONF") == std::string::npos);
}

namespace {
// What `body` cost: the heap allocations it made on this thread, and the bytes the CPU's allocator
// handed out meanwhile (a plan needs none: everything it builds is on the meta device).
struct Cost {
  std::int64_t heap_allocations = 0;
  std::int64_t cpu_bytes = 0;
};
Cost cost_of(const std::function<void()>& body) {
  const CachingAllocator& cpu = default_caching_allocator(Device::cpu());
  const std::int64_t cpu_before = cpu.caching_stats().allocated_bytes.allocated;
  Cost cost;
  t_heap_allocations = &cost.heap_allocations;
  try {
    body();
  } catch (...) {
    t_heap_allocations = nullptr;
    throw;
  }
  t_heap_allocations = nullptr;
  cost.cpu_bytes = cpu.caching_stats().allocated_bytes.allocated - cpu_before;
  return cost;
}
}  // namespace

TEST_CASE("meta tensors: a DefaultDeviceScope makes factories build on its device, for its lifetime") {
  CHECK(empty({2}).device() == Device::cpu());
  {
    const DefaultDeviceScope on_meta(Device::meta());
    CHECK(empty({2}).device() == Device::meta());
    CHECK(zeros({}, {.dtype = DType::i64}).device() == Device::meta());  // options naming no device too
    CHECK(empty({2}, {.device = Device::cpu()}).device() == Device::cpu());  // a device named wins
    {
      const DefaultDeviceScope on_cpu(Device::cpu());
      CHECK(ones({2}).device() == Device::cpu());
    }
    CHECK(ones({2}).device() == Device::meta());
  }
  CHECK(empty({2}).device() == Device::cpu());
}

TEST_CASE("the planner: a million classes are planned without their memory") {
  // MobileNetV2's classifier at 1 000 000 classes: 1280 x 10^6 weights, 5.1 GB of f32, which the
  // planner once built on the CPU (and initialised) before moving it to the meta device.
  train::TrainOptions o = full_mobilenet();
  o.batch_size = 2;
  train::MemoryPlan plan;
  const Cost cost = cost_of([&] { plan = train::plan_memory(o, {.in_channels = 1, .num_classes = 1'000'000}); });
  CHECK(plan.layers.back().name == "classifier.1");
  CHECK(plan.layers.back().param_bytes == std::int64_t{1280 + 1} * 1'000'000 * 4);  // planned at full size all the same
  CHECK(cost.cpu_bytes < (1 << 20));
  CHECK(meta_allocated() == 0);
}

TEST_CASE("the planner: a plan's work does not grow with the batch or the image") {
  // A million 4096x4096 images: 64 TiB per batch. On the meta device no op loops over the samples
  // or the pixels, so the plan makes about as many heap allocations as at batch 64 of 32x32 (the
  // convolutions once looped over the samples there, making views for each: 4.3 billion heap
  // allocations, 2 minutes).
  train::TrainOptions small = full_mobilenet(), huge = full_mobilenet();
  small.batch_size = 64;
  huge.batch_size = std::int64_t{1} << 20;
  huge.image_size = 4096;
  train::MemoryPlan huge_plan;
  const Cost small_cost = cost_of([&] { train::plan_memory(small); });
  const Cost huge_cost = cost_of([&] { huge_plan = train::plan_memory(huge); });
  MESSAGE("heap allocations: ", small_cost.heap_allocations, " at batch 64 of 32x32, ", huge_cost.heap_allocations,
          " at batch 2^20 of 4096x4096");
  CHECK(huge_plan.data_bytes >= (std::int64_t{1} << 46));  // the batch was planned at its size
  CHECK(huge_cost.heap_allocations < 2 * small_cost.heap_allocations);
  CHECK(huge_cost.cpu_bytes < (1 << 20));
}

TEST_CASE("the planner: a data-parallel rank needs less with each ZeRO stage, and each is offered as a fix") {
  train::TrainOptions o = full_mobilenet();
  o.ddp = true;
  o.ranks = 4;
  std::int64_t previous = train::plan_memory(o).peak_bytes;
  for (const int stage : {1, 2, 3}) {
    CAPTURE(stage);
    train::TrainOptions sharded = o;
    sharded.zero = stage;
    const std::int64_t peak = train::plan_memory(sharded).peak_bytes;
    CHECK(peak < previous);
    previous = peak;
  }
  const std::vector<train::MemoryFix> fixes = train::planned_fixes(o, {});
  for (const char* flag : {"--zero 1: needs ", "--zero 2: needs ", "--zero 3: needs "})
    CHECK(std::any_of(fixes.begin(), fixes.end(), [&](const train::MemoryFix& f) { return f.text.rfind(flag, 0) == 0; }));
  // Not for one process, nor ZeRO-2 or -3 beside bucket views (they free the buckets those live in).
  o.bucket_views = true;
  const std::vector<train::MemoryFix> with_views = train::planned_fixes(o, {});
  CHECK_FALSE(std::any_of(with_views.begin(), with_views.end(), [](const train::MemoryFix& f) { return f.text.rfind("--zero 2", 0) == 0; }));
  o.ddp = false, o.ranks = 1, o.bucket_views = false;
  const std::vector<train::MemoryFix> alone = train::planned_fixes(o, {});
  CHECK_FALSE(std::any_of(alone.begin(), alone.end(), [](const train::MemoryFix& f) { return f.text.rfind("--zero", 0) == 0; }));
}
