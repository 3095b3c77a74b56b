// The meta device and the memory planner: meta tensors have shapes and counted allocations but no
// data; ops on them allocate what the CPU would; the planner's figures hold together (parameters
// as the model's, activations linear in the batch, checkpointing and bf16 saving what they should).
// How close the plan comes to a measured run is checked against `frugal train` (tests/train_check.sh
// plan_matches_train), since only a whole run measures what a run holds.
#include <doctest/doctest.h>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "kernels/conv.h"
#include "kernels/reduce.h"
#include "models/registry.h"
#include "train/planner.h"

using namespace frugal;

namespace {
std::int64_t meta_allocated() { return default_caching_allocator(Device::meta()).caching_stats().allocated_bytes.current; }

train::TrainOptions small_mobilenet(std::int64_t batch) {
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.width = 0.25;
  o.batch_size = batch;
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
