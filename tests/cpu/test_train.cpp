// The training loop's library side (train/): options and their checks, checkpoints written and read
// back, and gradient accumulation against one large batch. What the command does end to end (resume
// bit for bit, SIGKILL while saving, out of memory, progress output) is checked by tests/train_check.sh.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/safetensors.h"
#include "tests/cpu/temp_dir.h"
#include "tests/cpu/test_files.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/planner.h"
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
  bad([](train::TrainOptions& o) { o.zero = 1; }, "--zero and --bucket-views need --ddp");
  bad([](train::TrainOptions& o) { o.ddp = true, o.zero = 4; }, "--zero must be 1, 2 or 3, got 4");
  bad([](train::TrainOptions& o) { o.ddp = true, o.zero = 2, o.bucket_views = true; }, "--zero 2 frees the buckets");
  bad([](train::TrainOptions& o) { o.ddp = true, o.bucket_cap_bytes = 10; }, "--bucket-cap must be at least 1 KiB");
  bad([](train::TrainOptions& o) { o.ddp = true, o.ddp_timeout = 0; }, "--ddp-timeout");
  bad([](train::TrainOptions& o) { o.optimizer_in_backward = true, o.accum = 2; }, "with --accum 2 a gradient is complete only");
  bad([](train::TrainOptions& o) { o.optimizer_in_backward = true, o.amp = DType::f16; }, "cannot run with --amp f16");
  bad([](train::TrainOptions& o) { o.optimizer_in_backward = true, o.ddp = true; }, "cannot run with --ddp");
  bad([](train::TrainOptions& o) { o.offload_optimizer = true, o.optimizer_in_backward = true; }, "two places for one update");
  bad([](train::TrainOptions& o) { o.offload_optimizer = true, o.ddp = true, o.ranks = 2, o.zero = 1; },
      "--zero 1 shards it");
  bad([](train::TrainOptions& o) { o.offload_activations = true, o.saving.compress = nn::SavedCompression::bf16; },
      "--offload activations moves saved feature maps to host memory whole");
  bad([](train::TrainOptions& o) { o.ddp = true, o.zero = 2, o.optimizer = train::OptimizerKind::adafactor; },
      "--zero 2 shards sgd's and adamw's state only");
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
  // The two keys no one flag sets are worded as the flags that set them.
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)) ==
        "--ddp on 2 ranks but the checkpoint has none");
  CHECK(train::identity_difference(train::run_identity_json(a), train::run_identity_json(b)) ==
        "the checkpoint has --ddp on 2 ranks, this run has none");
  train::TrainOptions c = b;
  c.ranks = 3;
  CHECK(train::identity_difference(train::run_identity_json(c), train::run_identity_json(b), "rank 0") ==
        "--ddp on 3 ranks but rank 0 has --ddp on 2 ranks");
  b.ranks = 1;
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)).empty());
  b.saving = {.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::int8};
  CHECK(train::identity_difference(train::run_identity_json(b), train::run_identity_json(a)) ==
        "--bn-from-output --bit-masks --compress-activations int8 but the checkpoint has none");
  c = a;
  c.saving = {.compress = nn::SavedCompression::bf16};
  CHECK(train::identity_difference(train::run_identity_json(c), train::run_identity_json(b)) ==
        "--compress-activations bf16 but the checkpoint has --bn-from-output --bit-masks --compress-activations int8");
  CHECK(train::identity_difference(train::run_identity_json(a), train::run_identity_json(c)) ==
        "the checkpoint has --compress-activations bf16, this run has none");
}

TEST_CASE("checkpoints: every part and the position come back as saved, other files are refused") {
  TempDir dir;
  train::Checkpoint c;
  c.model = {{"w", full({2, 3}, 1.5)}, {"bn.num_batches_tracked", full({}, 7, {.dtype = DType::i64})}};
  c.optimizer = {{"state.0.step", full({}, 3, {.dtype = DType::i64})}};
  c.schedule = {{"last_epoch", full({}, 14, {.dtype = DType::i64})}};
  c.position = {.epoch = 1, .batch = 4, .global_step = 14, .generator = {0xFFFFFFFFFFFFFFFFull, 123},
                .loss_sum = 0.1, .correct = 5, .samples = 64};
  c.run_identity = train::run_identity_json({});
  c.data = {.samples = 640, .fingerprint = "0123abcd"};
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
  CHECK(back.data == c.data);

  nn::write_safetensors(dir / "plain.safetensors", c.model);
  CHECK_FALSE(train::is_checkpoint(dir / "plain.safetensors"));
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "plain.safetensors"), doctest::Contains("not a frugal checkpoint"),
                       ValueError);
  nn::write_safetensors(dir / "old.safetensors", c.model,
                        {{"format", "frugal-checkpoint"}, {"version", "1"}, {"position", "{}"}, {"run", "{}"}});
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "old.safetensors"),
                       doctest::Contains("checkpoint version 1, this frugal reads version 2"), ValueError);
  nn::Metadata damaged = {{"format", "frugal-checkpoint"}, {"version", "2"}, {"position", "{\"epoch\": 1}"},
                          {"run", "{}"}, {"data", "{}"}, {"crc32", "{}"}};
  damaged.emplace_back("metadata_crc32", train::metadata_crc(damaged, "damaged"));
  nn::write_safetensors(dir / "damaged.safetensors", {}, damaged);
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "damaged.safetensors"),
                       doctest::Contains("checkpoint position is damaged"), ValueError);
  nn::write_safetensors(dir / "stray.safetensors", {{"extra", full({1}, 0.0)}}, damaged);
  CHECK_THROWS_WITH_AS(train::load_checkpoint(dir / "stray.safetensors"),
                       doctest::Contains("tensor 'extra' has no recorded CRC-32"), ValueError);
}

namespace {

// A small consistent checkpoint: two steps taken, the schedule and the optimizer agreeing.
train::Checkpoint small_checkpoint() {
  train::Checkpoint c;
  c.model = {{"w", full({4, 4}, 0.25)}, {"b", full({4}, -1.0)}};
  c.optimizer = {{"state.0.step", full({}, 2, {.dtype = DType::i64})}, {"state.0.exp_avg", full({4, 4}, 0.5)}};
  c.schedule = {{"last_epoch", full({}, 2, {.dtype = DType::i64})}};
  c.position = {.epoch = 0, .batch = 2, .global_step = 2, .generator = {1, 2}, .loss_sum = 3.5, .correct = 3, .samples = 8};
  c.run_identity = train::run_identity_json({});
  c.data = {.samples = 8, .fingerprint = "deadbeef"};
  return c;
}

// small_checkpoint's position as its metadata holds it, with the global step written as `step` (a
// JSON number's text: "2.5" is no count) and `correct` samples right.
std::string small_position(const std::string& step, int correct) {
  return R"({"epoch":0,"batch":2,"global_step":)" + step +
         R"(,"generator_seed":"1","generator_offset":"2","loss_sum":"3.5","correct":)" + std::to_string(correct) +
         R"(,"samples":8})";
}

// The file at `path` with metadata `key` set to `value`: its tensors (and so their CRC-32s) as they
// were, and with `record_crc` the metadata's CRC-32 recorded anew (an edit made on purpose).
void rewrite_metadata(const std::string& path, const std::string& key, const std::string& value, bool record_crc = true) {
  nn::SafetensorsFile file = nn::read_safetensors(path);
  for (auto& [k, v] : file.metadata)
    if (k == key) v = value;
  if (record_crc)
    for (auto& [k, v] : file.metadata)
      if (k == "metadata_crc32") v = train::metadata_crc(file.metadata, path);
  nn::write_safetensors(path, file.tensors, file.metadata);
}

// Two state dicts with the same names in the same order and the same values, bit for bit.
void check_same_bits(const nn::StateDict& mine, const nn::StateDict& theirs) {
  REQUIRE(mine.size() == theirs.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(mine[i].first);
    CHECK(mine[i].first == theirs[i].first);
    CHECK(mine[i].second.to_vector<double>() == theirs[i].second.to_vector<double>());
  }
}

// Options of a few fast steps of the small CNN on `data` (write_idx_folder's 12x12 images).
train::TrainOptions small_cnn_run(const std::string& data) {
  train::TrainOptions o;
  o.model = "cnn";
  o.data = data;
  o.image_size = 12;
  o.batch_size = 16;
  o.workers = 0;
  o.evaluate = false;
  return o;
}

}  // namespace

TEST_CASE("checkpoints: a flipped bit in any tensor is an error naming it, before anything is used") {
  TempDir dir;
  const std::string path = dir / "c.safetensors";
  train::save_checkpoint(path, small_checkpoint());
  const std::vector<std::uint8_t> good = test::read_bytes(path);
  const nn::SafetensorsHeader header = nn::read_safetensors_header(path);
  for (const nn::SafetensorsEntry& entry : header.entries) {
    if (entry.end == entry.begin) continue;
    std::vector<std::uint8_t> bad = good;
    bad[header.data_start + (entry.begin + entry.end) / 2] ^= 0x10;  // one bit in the middle of the tensor
    CHECK_THROWS_WITH_AS(train::parse_checkpoint(bad, "bad.safetensors"),
                         doctest::Contains(("tensor '" + entry.name + "' is damaged: its bytes' CRC-32 is").c_str()), ValueError);
  }
  CHECK_NOTHROW(train::parse_checkpoint(good, "good.safetensors"));
}

TEST_CASE("checkpoints: a NaN or infinite loss sum is stored as text and reads back bit for bit") {
  TempDir dir;
  for (const double loss : {std::nan(""), HUGE_VAL, -HUGE_VAL, 0.1, 1e-300}) {
    train::Checkpoint c = small_checkpoint();
    c.position.loss_sum = loss;
    train::save_checkpoint(dir / "c.safetensors", c);
    const double back = train::load_checkpoint(dir / "c.safetensors").position.loss_sum;
    CHECK(std::memcmp(&back, &loss, sizeof loss) == 0);
  }
}

TEST_CASE("checkpoints: fields that disagree are refused when saved and when loaded") {
  TempDir dir;
  const std::string path = dir / "c.safetensors";
  train::Checkpoint c = small_checkpoint();
  c.schedule = {{"last_epoch", full({}, 1'000'000'000'000.0, {.dtype = DType::i64})}};
  CHECK_THROWS_WITH_AS(train::save_checkpoint(path, c), doctest::Contains("the schedule has taken 1000000000000 steps but the position says 2"),
                       ValueError);
  CHECK_FALSE(std::filesystem::exists(path));
  c = small_checkpoint();
  c.optimizer[0].second = full({}, 4611686018427387904.0, {.dtype = DType::i64});  // 2^62 steps
  CHECK_THROWS_WITH_AS(train::save_checkpoint(path, c), doctest::Contains("optimizer 'state.0.step' is"), ValueError);

  // Edited on disk, with the tensors' CRC-32s intact: the position no longer matches the schedule.
  train::save_checkpoint(path, small_checkpoint());
  rewrite_metadata(path, "position", small_position("3", 3));
  CHECK_THROWS_WITH_AS(train::load_checkpoint(path), doctest::Contains("the schedule has taken 2 steps but the position says 3"),
                       ValueError);
  train::save_checkpoint(path, small_checkpoint());
  rewrite_metadata(path, "position", small_position("2", 9));
  CHECK_THROWS_WITH_AS(train::load_checkpoint(path), doctest::Contains("9 correct of 8 samples"), ValueError);

  // The same edit without recording the metadata's CRC-32 anew: a flipped count is caught as damage.
  train::save_checkpoint(path, small_checkpoint());
  rewrite_metadata(path, "position", small_position("2", 2), /*record_crc=*/false);
  CHECK_THROWS_WITH_AS(train::load_checkpoint(path), doctest::Contains("the checkpoint's metadata is damaged: its CRC-32 is"),
                       ValueError);
  // A count that is no whole number.
  train::save_checkpoint(path, small_checkpoint());
  rewrite_metadata(path, "position", small_position("2.5", 2));
  CHECK_THROWS_WITH_AS(train::load_checkpoint(path), doctest::Contains("checkpoint position has a bad number"), ValueError);
}

TEST_CASE("checkpoints: the data's identity tells other data apart without reading it all") {
  TempDir a, b, c;
  write_idx_folder(a, 40);
  write_idx_folder(b, 40);
  write_idx_folder(c, 41);
  const auto identity = [](const TempDir& dir) {
    return train::data_identity(*train::open_run_data(dir.path, "", 32, false).splits.train);
  };
  CHECK(identity(a) == identity(b));
  CHECK(identity(a).samples == 40);
  CHECK(identity(c) != identity(a));
  // The same size, one sample's label changed (the last, always among the fingerprinted ones).
  test::Bytes labels = test::read_bytes(b / "train-labels-idx1-ubyte");
  labels.back() = static_cast<std::uint8_t>((labels.back() + 1) % 10);
  test::write_bytes(b / "train-labels-idx1-ubyte", labels);
  CHECK(identity(b).samples == identity(a).samples);
  CHECK(identity(b).fingerprint != identity(a).fingerprint);
}

TEST_CASE("train: a non-finite loss stops the run and keeps the last good checkpoint, and --allow-nonfinite goes on") {
  TempDir dir;
  write_idx_folder(dir, 64);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.save = dir / "c.safetensors";
  o.steps = 2;
  train::train(o);
  const std::vector<std::uint8_t> good = test::read_bytes(o.save);
  o.resume = o.save;
  o.steps = 4;
  o.save_every = 1;
  train::TrainOptions diverging = o;
  diverging.resume.clear();
  diverging.lr = 1e30;
  diverging.save = dir / "d.safetensors";
  CHECK_THROWS_WITH_AS(train::train(diverging), doctest::Contains("at step"), train::TrainingDivergedError);
  if (std::filesystem::exists(diverging.save)) {  // whatever was kept holds no NaN
    const train::Checkpoint kept = train::load_checkpoint(diverging.save);
    CHECK(train::first_nonfinite(kept.model, kept.optimizer).empty());
  }
  diverging.allow_nonfinite = true;
  const train::TrainResult regardless = train::train(diverging);
  CHECK(regardless.steps == 4);
  CHECK(std::isnan(regardless.final_loss));
  CHECK_NOTHROW(train::load_checkpoint(diverging.save));  // non-finite numbers load back
  // A resumed run's final loss is its own steps' mean, and it took the steps it says.
  const train::TrainResult resumed = train::train(o);
  CHECK(resumed.steps == 4);
  CHECK(resumed.steps_taken == 2);
  CHECK(std::isfinite(resumed.final_loss));
  CHECK(test::read_bytes(o.save) != good);
}

TEST_CASE("train: a resume onto other data, or with --steps before the checkpoint, is refused naming it") {
  TempDir dir, other;
  write_idx_folder(dir, 64);
  write_idx_folder(other, 48);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.save = dir / "c.safetensors";
  o.steps = 3;
  train::train(o);
  o.resume = o.save;
  o.save.clear();
  o.steps = 2;
  CHECK_THROWS_WITH_AS(train::train(o), doctest::Contains("the checkpoint is at step 3, so --steps 2 leaves nothing to train"),
                       ValueError);
  o.steps = 5;
  o.data = other.path;
  CHECK_THROWS_WITH_AS(train::train(o), doctest::Contains("not the same data: the checkpoint's run trained on 64 samples"),
                       ValueError);
}

TEST_CASE("train: f16 loss scaling reports its scale and the steps it skipped") {
  TempDir dir;
  write_idx_folder(dir, 64);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.amp = DType::f16;
  o.steps = 3;
  std::vector<double> scales;
  train::TrainHooks hooks;
  hooks.on_step = [&](const train::StepInfo& s) { scales.push_back(s.loss_scale); };
  const train::TrainResult result = train::train(o, hooks);
  REQUIRE(result.loss_scale.has_value());
  CHECK(*result.loss_scale == scales.back());
  CHECK(result.skipped_steps == 0);  // a sane run overflows nothing at the initial scale of 2^16
  CHECK(*result.loss_scale == 65536.0);
  CHECK(scales.size() == 3);
  // An lr that blows the weights up: f16 logits overflow, every later step is skipped and halves
  // the scale, and each is counted.
  o.lr = 1e30;
  o.steps = 6;
  o.allow_nonfinite = true;
  const train::TrainResult blown = train::train(o);
  CHECK(blown.skipped_steps >= 1);
  CHECK(*blown.loss_scale == doctest::Approx(65536.0 / std::exp2(static_cast<double>(blown.skipped_steps))));
  o.amp.reset();
  CHECK_FALSE(train::train(o).loss_scale.has_value());
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

TEST_CASE("train: --optimizer-in-backward trains the same weights bit for bit with fewer gradient bytes") {
  TempDir dir;
  write_idx_folder(dir, 96);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.steps = 3;
  o.batch_size = 32;
  o.save = dir / "ordinary.safetensors";
  const train::TrainResult ordinary = train::train(o);
  o.optimizer_in_backward = true;
  o.save = dir / "in_backward.safetensors";
  const train::TrainResult in_backward = train::train(o);
  // Read after both runs: weights read back are live tensors that a run's peak would count.
  const nn::StateDict ordinary_weights = train::load_checkpoint(dir / "ordinary.safetensors").model;
  const nn::StateDict in_backward_weights = train::load_checkpoint(o.save).model;
  check_same_bits(ordinary_weights, in_backward_weights);
  CHECK(in_backward.final_loss == ordinary.final_loss);
  const auto grad = static_cast<std::size_t>(MemoryTag::grad);
  CHECK(in_backward.peak_bytes_by_tag[grad] < ordinary.peak_bytes_by_tag[grad]);
  CHECK(in_backward.peak_allocated_bytes < ordinary.peak_allocated_bytes);
}

TEST_CASE("train: --offload optimizer trains the same weights and state bit for bit, with no optimizer bytes on the device") {
  TempDir dir;
  write_idx_folder(dir, 96);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.steps = 3;
  o.batch_size = 32;
  o.save = dir / "in_place.safetensors";
  const train::TrainResult in_place = train::train(o);
  o.offload_optimizer = true;
  o.save = dir / "offloaded.safetensors";
  const train::TrainResult offloaded = train::train(o);
  // The checkpoints are the same: weights and the optimizer's state, whichever side held it.
  const train::Checkpoint a = train::load_checkpoint(dir / "in_place.safetensors"), b = train::load_checkpoint(o.save);
  check_same_bits(a.model, b.model);
  check_same_bits(a.optimizer, b.optimizer);
  CHECK(offloaded.final_loss == in_place.final_loss);
  const auto state = static_cast<std::size_t>(MemoryTag::optimizer);
  CHECK(in_place.peak_bytes_by_tag[state] > 0);
  CHECK(offloaded.peak_bytes_by_tag[state] == 0);
  CHECK(offloaded.peak_allocated_bytes < in_place.peak_allocated_bytes);
  CHECK(offloaded.peak_pinned_host_bytes > in_place.peak_bytes_by_tag[state]);  // the state and the copies
  // It resumes from either, and the in-place run from its checkpoint.
  o.resume = dir / "in_place.safetensors";
  o.steps = 4;
  o.save = dir / "resumed.safetensors";
  CHECK_NOTHROW(train::train(o));
}

TEST_CASE("train: --offload activations trains the same weights bit for bit, its saved feature maps in host memory as planned") {
  TempDir dir;
  write_idx_folder(dir, 96);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.steps = 3;
  o.batch_size = 32;
  o.accum = 2;  // each micro-batch's forward offloads, its backward brings them back
  o.save = dir / "on_device.safetensors";
  const train::TrainResult on_device = train::train(o);
  o.offload_activations = true;
  o.save = dir / "offloaded.safetensors";
  const train::TrainResult offloaded = train::train(o);
  const train::Checkpoint a = train::load_checkpoint(dir / "on_device.safetensors"), b = train::load_checkpoint(o.save);
  check_same_bits(a.model, b.model);
  check_same_bits(a.optimizer, b.optimizer);
  CHECK(offloaded.final_loss == on_device.final_loss);
  const auto activation = static_cast<std::size_t>(MemoryTag::activation);
  CHECK(offloaded.peak_bytes_by_tag[activation] < on_device.peak_bytes_by_tag[activation]);
  CHECK(offloaded.peak_allocated_bytes <= on_device.peak_allocated_bytes);  // this small CNN peaks in its optimizer step
  CHECK(on_device.peak_pinned_host_bytes == 0);
  // The host side is what the planner counts on the meta device, to the byte; the device side is
  // checked by the run itself (its planned peak, as for every run).
  const train::MemoryPlan plan = train::plan_memory(o);
  CHECK(plan.activation_host_bytes > 0);
  CHECK(static_cast<std::int64_t>(offloaded.peak_pinned_host_bytes) == plan.host_bytes);
}

TEST_CASE("train: --optimizer adamw8bit keeps under a third of AdamW's state and trains near it, adafactor a tenth") {
  TempDir dir;
  write_idx_folder(dir, 96);
  train::TrainOptions o = small_cnn_run(dir.path);
  o.steps = 3;
  o.batch_size = 32;
  const train::TrainResult adamw = train::train(o);
  o.optimizer = train::OptimizerKind::adamw8bit;
  const train::TrainResult eight_bit = train::train(o);
  const auto state = static_cast<std::size_t>(MemoryTag::optimizer);
  CAPTURE(adamw.peak_bytes_by_tag[state]);
  CAPTURE(eight_bit.peak_bytes_by_tag[state]);
  // 2 bytes and two scales per 256 parameters against 8; the small CNN's biases each take a whole
  // 512-byte block, which is why not a quarter.
  CHECK(3 * eight_bit.peak_bytes_by_tag[state] < adamw.peak_bytes_by_tag[state]);
  CHECK(eight_bit.final_loss == doctest::Approx(adamw.final_loss).epsilon(0.02));
  // Adafactor: a value per row and per column of each weight, against AdamW's two per element.
  o.optimizer = train::OptimizerKind::adafactor;
  const train::TrainResult adafactor = train::train(o);
  CAPTURE(adafactor.peak_bytes_by_tag[state]);
  CHECK(10 * adafactor.peak_bytes_by_tag[state] < adamw.peak_bytes_by_tag[state]);
  CHECK(std::isfinite(adafactor.final_loss));
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
