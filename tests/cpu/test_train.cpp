// The training loop's library side (train/): options and their checks, checkpoints written and read
// back, and gradient accumulation against one large batch. What the command does end to end (resume
// bit for bit, SIGKILL while saving, out of memory, progress output) is checked by tests/train_check.sh.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/safetensors.h"
#include "tests/cpu/temp_dir.h"
#include "tests/cpu/test_files.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/trainer.h"

using namespace frugal;
using frugal::test::TempDir;

namespace {

// `count` 12x12 images in IDX files named as Fashion-MNIST's (train and t10k): pixels from a fixed
// formula, labels cycling through 10 classes, so a model has something to fit.
void write_idx_folder(const TempDir& dir, std::uint32_t count) {
  test::Bytes images, labels;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t label = i % 10;
    for (std::uint32_t p = 0; p < 144; ++p) images.push_back(static_cast<std::uint8_t>((p * (label + 1) + 7 * i) % 256));
    labels.push_back(static_cast<std::uint8_t>(label));
  }
  for (const std::string split : {"train", "t10k"}) {
    test::write_bytes(dir / (split + "-images-idx3-ubyte"), test::idx_u8({count, 12, 12}, images));
    test::write_bytes(dir / (split + "-labels-idx1-ubyte"), test::idx_u8({count}, labels));
  }
}

nn::StateDict model_after(const train::TrainOptions& options) {
  train::train(options);
  return train::load_checkpoint(options.save).model;
}

}  // namespace

TEST_CASE("train options: each bad value is a ValueError naming its flag") {
  const auto bad = [](auto change, const char* flag) {
    train::TrainOptions o;
    change(o);
    CHECK_THROWS_WITH_AS(train::validate(o), doctest::Contains(flag), ValueError);
  };
  bad([](train::TrainOptions& o) { o.batch_size = 0; }, "--batch-size");
  bad([](train::TrainOptions& o) { o.lr = -1; }, "--lr");
  bad([](train::TrainOptions& o) { o.accum = 0; }, "--accum");
  bad([](train::TrainOptions& o) { o.warmup = 1.0; }, "--warmup");
  bad([](train::TrainOptions& o) { o.momentum = 1.0; }, "--momentum");
  bad([](train::TrainOptions& o) { o.amp = DType::f32; }, "--amp");
  bad([](train::TrainOptions& o) { o.save_every = 3; }, "--save-every needs --save");
  bad([](train::TrainOptions& o) { o.ranks = 2; }, "2 ranks need --ddp");
  bad([](train::TrainOptions& o) { o.zero1 = true; }, "--zero1 and --bucket-views need --ddp");
  bad([](train::TrainOptions& o) { o.ddp = true, o.bucket_cap_bytes = 10; }, "--bucket-cap must be at least 1 KiB");
  bad([](train::TrainOptions& o) { o.ddp = true, o.ddp_timeout = 0; }, "--ddp-timeout");
  CHECK_NOTHROW(train::validate(train::TrainOptions{}));
  CHECK_THROWS_AS(train::parse_optimizer("adam"), ValueError);
  CHECK(train::schedule_name(train::parse_schedule("onecycle")) == "onecycle");
}

TEST_CASE("train options: a resumed run must be the same run, and the difference names the flag") {
  train::TrainOptions a, b;
  b.lr = 0.5;
  CHECK(train::identity_difference(train::run_identity_json(a), train::run_identity_json(a)).empty());
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)) ==
        "--lr 0.5 but the checkpoint has 0.01");
  b = a;
  b.workers = 7;  // how the data is loaded does not change the numbers
  b.checkpoint_activations = true;
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)).empty());
  CHECK(train::identity_difference(train::run_identity_json(a), "{").find("not valid JSON") != std::string::npos);
  b = a;
  b.ddp = true;
  b.ranks = 2;  // two ranks of the same batch size are twice the batch
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)) ==
        "--ddp-ranks 2 but the checkpoint has none");
  CHECK(train::identity_difference(train::run_identity_json(a), train::run_identity_json(b)) ==
        "the checkpoint has --ddp-ranks 2, this run has none");
  b.ranks = 1;
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)).empty());
}

TEST_CASE("checkpoints: every part and the position come back as saved, other files are refused") {
  TempDir dir;
  train::Checkpoint c;
  c.model = {{"w", full({2, 3}, 1.5)}, {"bn.num_batches_tracked", full({}, 7, {.dtype = DType::i64})}};
  c.optimizer = {{"state.0.step", full({}, 3, {.dtype = DType::i64})}};
  c.schedule = {{"last_epoch", full({}, 3, {.dtype = DType::i64})}};
  c.position = {.epoch = 1, .batch = 4, .global_step = 14, .generator = {0xFFFFFFFFFFFFFFFFull, 123},
                .loss_sum = 0.1, .correct = 5, .samples = 64};
  c.run_identity = train::run_identity_json({});
  train::save_checkpoint(dir / "c.safetensors", c);
  CHECK(train::is_checkpoint(dir / "c.safetensors"));
  const train::Checkpoint back = train::load_checkpoint(dir / "c.safetensors");
  REQUIRE(back.model.size() == 2);
  CHECK(back.model[0].first == "w");
  CHECK(back.model[0].second.to_vector<double>() == std::vector<double>(6, 1.5));
  CHECK(back.optimizer.size() == 1);
  CHECK(back.scaler.empty());
  CHECK(back.position.generator == c.position.generator);  // all 64 bits of the seed
  CHECK(back.position.global_step == 14);
  CHECK(back.position.loss_sum == 0.1);
  CHECK(back.run_identity == c.run_identity);

  nn::write_safetensors(dir / "plain.safetensors", c.model);
  CHECK_FALSE(train::is_checkpoint(dir / "plain.safetensors"));
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "plain.safetensors"), doctest::Contains("not a frugal checkpoint"),
                       ValueError);
  nn::write_safetensors(dir / "damaged.safetensors", c.model,
                        {{"format", "frugal-checkpoint"}, {"version", "1"}, {"position", "{\"epoch\": 1}"}, {"run", "{}"}});
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "damaged.safetensors"),
                       doctest::Contains("checkpoint position is damaged"), ValueError);
  nn::write_safetensors(dir / "stray.safetensors", {{"extra", full({1}, 0.0)}},
                        {{"format", "frugal-checkpoint"}, {"version", "1"}, {"position", "{}"}, {"run", "{}"}});
  CHECK_THROWS_AS(train::load_checkpoint(dir / "stray.safetensors"), ValueError);
}

TEST_CASE("train: K accumulated micro-batches give the parameters of one batch K times larger") {
  // The small CNN has no BatchNorm, so the two differ only by f32 rounding of the summed gradients.
  TempDir dir;
  write_idx_folder(dir, 96);
  train::TrainOptions o;
  o.model = "cnn";
  o.data = dir.path;
  o.image_size = 16;
  o.workers = 0;
  o.steps = 3;
  o.optimizer = train::OptimizerKind::sgd;  // AdamW would magnify rounding in gradients near 0
  o.lr = 1e-2;
  o.batch_size = 32;
  o.save = dir / "big.safetensors";
  const nn::StateDict big = model_after(o);
  o.batch_size = 8;
  o.accum = 4;
  o.save = dir / "accumulated.safetensors";
  const nn::StateDict accumulated = model_after(o);
  REQUIRE(big.size() == accumulated.size());
  for (std::size_t i = 0; i < big.size(); ++i) {
    CAPTURE(big[i].first);
    const auto a = big[i].second.to_vector<double>(), b = accumulated[i].second.to_vector<double>();
    double largest = 0, difference = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      largest = std::max(largest, std::abs(a[k]));
      difference = std::max(difference, std::abs(a[k] - b[k]));
    }
    CHECK(difference <= 1e-5 * largest);
  }
}

TEST_CASE("train: a run without a leak reports none, an out-of-memory leaves with the explanation of what filled the device") {
  TempDir dir;
  write_idx_folder(dir, 64);
  train::TrainOptions o;
  o.model = "cnn";
  o.data = dir.path;
  o.image_size = 16;
  o.workers = 0;
  o.batch_size = 16;
  o.steps = 3;
  CHECK_FALSE(train::train(o).leak.has_value());

  // 4 MiB of device: the model fits (433 KiB), a step at batch 64 does not (frugal plan: 7.9 MiB).
  struct Unlimited {  // the CPU's default allocator serves every later test
    ~Unlimited() { set_memory_limit(Device::cpu(), kUnlimited); }
  } restore;
  o.memory_limit = 4 << 20;
  o.batch_size = 64;
  std::int64_t planned_for = 0;
  train::TrainHooks hooks;
  hooks.plan_fixes = [&](const train::TrainOptions& failing) {
    planned_for = failing.batch_size;
    return std::vector<train::MemoryFix>{{"a planner's fix", 1, false}};
  };
  try {
    train::train(o, hooks);
    FAIL("4 MiB held the run");
  } catch (const train::TrainingOutOfMemoryError& error) {
    const train::OomExplanation& e = error.explanation();
    std::size_t tags = 0;
    for (std::size_t bytes : e.tag_bytes) tags += bytes;
    CHECK(tags == e.allocated);
    CHECK(tags + e.cache + e.fragmentation == e.reserved);
    CHECK_FALSE(e.largest.empty());
    CHECK(planned_for == 64);
    REQUIRE_FALSE(e.fixes.empty());
    CHECK(e.fixes.back().text == "a planner's fix");
  }
}
