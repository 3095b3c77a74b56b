// The models' memory options, checked on one training step: checkpoint_activations (or only some
// blocks, checkpoint_blocks) and inplace_activations = false give the very same loss, gradients and
// BatchNorm running statistics as the plain model (bit for bit: the same kernels run on the same
// values in the same order), while the allocator's activation tag shows what each keeps. Below the
// standard minimum (nn/saved_activations.h): BatchNorm from its output gives the same results to
// rounding, bit masks the very same, compression close ones, each keeping less. Names and shapes:
// test_models.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/random.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/saved_activations.h"
#include "tests/cpu/model_fixture.h"

using namespace frugal;
namespace F = frugal::functional;

namespace {

Stat activation_stat() { return allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(MemoryTag::activation)]; }

// What one training step leaves behind, and what its forward kept.
struct Step {
  double loss = 0;
  std::vector<std::vector<double>> grads;    // per parameter, in parameters() order
  std::vector<std::vector<double>> buffers;  // running statistics and batch counts, in buffers() order
  std::int64_t saved_bytes = 0;    // activation bytes alive at the end of the forward
  std::int64_t forward_peak = 0;   // the most activation bytes alive during the forward
  std::int64_t step_peak = 0;      // and during the whole step, backward's recomputations included
};

enum class Draws : std::uint8_t { own_generator, default_generator };

// Builds the model from `seed` (its weights and MobileNetV2's dropout masks come from a generator of
// the model's own, or from the default generator seeded so) and takes one training step at f64 on a
// batch drawn from another generator.
Step train_step(const std::string& name, models::ModelOptions options, Shape batch, std::uint64_t seed,
                Draws draws = Draws::own_generator, DType dtype = DType::f64, const nn::ActivationSaving& saving = {}) {
  Generator weights(seed), data(seed + 1);
  options.num_classes = 10;
  options.in_channels = batch[1];
  options.generator = draws == Draws::own_generator ? &weights : nullptr;
  manual_seed(seed);
  const auto model = models::make_model(name, options);
  model->to(dtype);
  model->train();
  const Tensor images = normal(batch, 0.0, 1.0, {.dtype = dtype}, &data);
  const Tensor labels = randint(0, 10, {batch[0]}, {.dtype = DType::i64}, &data);
  Step step;
  allocator_for(Device::cpu()).reset_peak_stats();
  const std::int64_t before = activation_stat().current;
  {
    const nn::ActivationSavingGuard saving_guard(saving);
    const Tensor loss = F::cross_entropy((*model)(images), labels);
    step.saved_bytes = activation_stat().current - before;
    step.forward_peak = activation_stat().peak - before;
    step.loss = loss.item<double>();
    autograd::backward(loss);
  }
  step.step_peak = activation_stat().peak - before;
  for (const Tensor& p : model->parameters()) step.grads.push_back(autograd::grad(p).to_vector<double>());
  for (const Tensor& b : model->buffers()) step.buffers.push_back(b.to_vector<double>());
  return step;
}

void check_same_results(const Step& a, const Step& b) {
  CHECK(a.loss == b.loss);
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) CHECK_MESSAGE(a.grads[i] == b.grads[i], "gradient of parameter ", i);
  REQUIRE(a.buffers.size() == b.buffers.size());
  for (std::size_t i = 0; i < a.buffers.size(); ++i) CHECK_MESSAGE(a.buffers[i] == b.buffers[i], "buffer ", i);
}

struct Case {
  const char* name;
  models::ModelOptions options;
  Shape batch;
  double checkpoint_factor;  // plain saved bytes over checkpointed, at least
  bool copy_raises_peak;     // out of place, the forward's peak is higher (else equal: see below)
};

}  // namespace

TEST_CASE("model memory options: checkpointing and out-of-place activations change memory, not results") {
  const Case cases[] = {
      {"mobilenet_v2", {.width_mult = 0.35}, {4, 1, 32, 32}, 6.0, false},
      {"resnet18", {}, {2, 1, 32, 32}, 1.8, true},
      {"cnn", {}, {2, 1, 16, 16}, 4.0, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Step plain = train_step(c.name, c.options, c.batch, 7);
    models::ModelOptions checkpointed = c.options, out_of_place = c.options;
    checkpointed.checkpoint_activations = true;
    out_of_place.inplace_activations = false;
    const Step recomputed = train_step(c.name, checkpointed, c.batch, 7);
    const Step copied = train_step(c.name, out_of_place, c.batch, 7);
    check_same_results(plain, recomputed);
    check_same_results(plain, copied);
    CHECK(plain.saved_bytes > c.checkpoint_factor * static_cast<double>(recomputed.saved_bytes));
    CHECK(recomputed.step_peak < plain.step_peak);
    // Every in-place activation here follows an op that does not save its output (BatchNorm, the
    // residual sum, a convolution), so out of place that output dies as soon as the activation is
    // computed: the tensors kept for backward are as many and as large either way. What in place
    // saves is the second copy alive for a moment, which raises the forward's peak only where
    // nothing else alive at another moment outweighs it (at 32x32, MobileNetV2's last activations
    // are small).
    CHECK(copied.saved_bytes == plain.saved_bytes);
    if (c.copy_raises_peak) CHECK(copied.forward_peak > plain.forward_peak);
    else CHECK(copied.forward_peak == plain.forward_peak);
  }
}

TEST_CASE("model memory options: checkpointing some blocks gives the same results, keeping less than none and more than all") {
  const Case cases[] = {
      {"mobilenet_v2", {.width_mult = 0.35}, {4, 1, 32, 32}, 1.0, false},
      {"resnet18", {}, {2, 1, 32, 32}, 1.0, false},
      {"cnn", {}, {2, 1, 16, 16}, 1.0, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    models::ModelOptions some = c.options, all = c.options;
    some.checkpoint_blocks = models::BlockSelection::parse("1-2");
    all.checkpoint_activations = true;
    const Step plain = train_step(c.name, c.options, c.batch, 5);
    const Step partial = train_step(c.name, some, c.batch, 5);
    const Step every = train_step(c.name, all, c.batch, 5);
    check_same_results(plain, partial);
    CHECK(partial.saved_bytes < plain.saved_bytes);
    CHECK(partial.saved_bytes > every.saved_bytes);
  }
  // "all" as a selection is checkpoint_activations.
  models::ModelOptions all_blocks{.checkpoint_blocks = models::BlockSelection::all()};
  CHECK(train_step("cnn", all_blocks, {2, 1, 16, 16}, 5).saved_bytes ==
        train_step("cnn", {.checkpoint_activations = true}, {2, 1, 16, 16}, 5).saved_bytes);
}

TEST_CASE("model memory options: MobileNetV2's dropout from the default generator draws the same mask checkpointed") {
  // The classifier's dropout runs after the checkpointed blocks; their recomputation in backward
  // replays the default generator's state and puts it back, so the mask and the next draws agree.
  const models::ModelOptions options{.width_mult = 0.35, .dropout = 0.5};
  models::ModelOptions checkpointed = options;
  checkpointed.checkpoint_activations = true;
  const Shape batch{4, 1, 32, 32};
  const Step plain = train_step("mobilenet_v2", options, batch, 11, Draws::default_generator);
  const GeneratorState after_plain = default_generator().state();
  const Step recomputed = train_step("mobilenet_v2", checkpointed, batch, 11, Draws::default_generator);
  check_same_results(plain, recomputed);
  CHECK(default_generator().state() == after_plain);
  // And the mask mattered: without dropout the loss differs.
  models::ModelOptions no_dropout = options;
  no_dropout.dropout = 0.0;
  CHECK(train_step("mobilenet_v2", no_dropout, batch, 11, Draws::default_generator).loss != plain.loss);
}

TEST_CASE("model memory options: full-width MobileNetV2 on 1x32x32 images keeps a fraction of the activations checkpointed") {
  // The figures models/README.md quotes: f32, batch 8, 10 classes, the standard stem.
  const models::ModelOptions plain_options{};
  models::ModelOptions checkpointed = plain_options, out_of_place = plain_options;
  checkpointed.checkpoint_activations = true;
  out_of_place.inplace_activations = false;
  const Shape batch{8, 1, 32, 32};
  const Step plain = train_step("mobilenet_v2", plain_options, batch, 3, Draws::own_generator, DType::f32);
  const Step recomputed = train_step("mobilenet_v2", checkpointed, batch, 3, Draws::own_generator, DType::f32);
  const Step copied = train_step("mobilenet_v2", out_of_place, batch, 3, Draws::own_generator, DType::f32);
  check_same_results(plain, recomputed);
  CHECK(plain.saved_bytes > 8 * recomputed.saved_bytes);
  CHECK(recomputed.step_peak < plain.step_peak);
  CHECK(copied.saved_bytes == plain.saved_bytes);
  CHECK(copied.forward_peak == plain.forward_peak);
}

namespace {

// The largest difference between two steps' gradients, relative to each parameter's largest gradient.
double largest_gradient_difference(const Step& a, const Step& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    double scale = 0.0, difference = 0.0;
    for (std::size_t j = 0; j < a.grads[i].size(); ++j) {
      scale = std::max(scale, std::abs(a.grads[i][j]));
      difference = std::max(difference, std::abs(a.grads[i][j] - b.grads[i][j]));
    }
    if (scale > 0.0) worst = std::max(worst, difference / scale);
  }
  return worst;
}

double relative_gradient_error(const Step& a, const Step& b) { return test::relative_gradient_error(a.grads, b.grads); }

const nn::ActivationSaving kFromOutput{.bn_from_output = true};
const nn::ActivationSaving kBitMasks{.bit_masks = true};

}  // namespace

TEST_CASE("below the minimum: BatchNorm from its output gives the standard step to rounding, keeping about half") {
  const Case cases[] = {
      {"mobilenet_v2", {.width_mult = 0.35}, {4, 1, 32, 32}, 0.55, false},
      {"mobilenet_v2", {.width_mult = 0.35, .cifar_stem = true}, {4, 1, 32, 32}, 0.55, false},
      {"resnet18", {}, {2, 1, 32, 32}, 1.0, false},  // its ReLU runs in place on BatchNorm's output: no rebuild
      {"cnn", {}, {2, 1, 16, 16}, 1.0, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CAPTURE(c.options.cifar_stem);
    const Step plain = train_step(c.name, c.options, c.batch, 9);
    const Step rebuilt = train_step(c.name, c.options, c.batch, 9, Draws::own_generator, DType::f64, kFromOutput);
    CHECK(rebuilt.loss == doctest::Approx(plain.loss).epsilon(1e-12));
    CHECK(largest_gradient_difference(plain, rebuilt) < 1e-10);
    CHECK(rebuilt.buffers == plain.buffers);  // the same batch statistics, so the same running ones
    CHECK(static_cast<double>(rebuilt.saved_bytes) <= c.checkpoint_factor * static_cast<double>(plain.saved_bytes));
  }
}

TEST_CASE("below the minimum: bit masks give the very same step, and a mask alone no longer holds an output") {
  const Case cases[] = {
      {"mobilenet_v2", {.width_mult = 0.35}, {4, 1, 32, 32}, 1.0, false},
      {"resnet18", {}, {2, 1, 32, 32}, 1.0, false},
      {"cnn", {}, {2, 1, 16, 16}, 1.0, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Step plain = train_step(c.name, c.options, c.batch, 4);
    const Step bits = train_step(c.name, c.options, c.batch, 4, Draws::own_generator, DType::f64, kBitMasks);
    check_same_results(plain, bits);
    // ResNet's stem ReLU feeds a max pool, which keeps indices, not its input: that output is freed.
    if (std::string(c.name) == "resnet18") CHECK(bits.saved_bytes < plain.saved_bytes);
  }
}

TEST_CASE("below the minimum: saved feature maps in bf16 or 8-bit codes, compute in f32, gradients close") {
  const models::ModelOptions options{.width_mult = 0.35};
  const Shape batch{8, 1, 32, 32};
  const Step plain = train_step("mobilenet_v2", options, batch, 2, Draws::own_generator, DType::f32);
  const Step from_output = train_step("mobilenet_v2", options, batch, 2, Draws::own_generator, DType::f32, kFromOutput);
  struct Compressed {
    nn::SavedCompression compression;
    double saved_fraction, gradient_difference;  // at most, against the plain step
  };
  for (const Compressed& c : {Compressed{nn::SavedCompression::bf16, 0.35, 0.02}, Compressed{nn::SavedCompression::int8, 0.2, 0.05}}) {
    CAPTURE(nn::saved_compression_name(c.compression));
    const nn::ActivationSaving saving{.bn_from_output = true, .bit_masks = true, .compress = c.compression};
    const Step compressed = train_step("mobilenet_v2", options, batch, 2, Draws::own_generator, DType::f32, saving);
    CHECK(compressed.loss == plain.loss);  // the forward is computed in f32 as before: only what is kept changes
    CHECK(static_cast<double>(compressed.saved_bytes) <= c.saved_fraction * static_cast<double>(plain.saved_bytes));
    const double difference = relative_gradient_error(plain, compressed);
    MESSAGE("relative gradient error ", difference);
    CHECK(difference > relative_gradient_error(plain, from_output));  // rounding is more than f32's
    CHECK(difference < c.gradient_difference);
  }
}
