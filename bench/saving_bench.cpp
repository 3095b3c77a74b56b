// `frugal bench saving`: MobileNetV2 training steps (10 classes, one input channel, a batch of 64
// 1x32x32 f32 images, standard and CIFAR stems) with each way of saving fewer activation bytes than
// the standard graph (nn/saved_activations.h), timed in turn on the same model and batch:
//   case                                       impls (one per way of saving)      unit
//   mobilenet_v2[_cifar]_b64                   standard, bn_from_output,          img/s
//                                              bn_from_output_bf16,
//                                              bn_from_output_bf16_bit_masks,
//                                              bn_from_output_int8_bit_masks
//   step_time_over_standard[_cifar]            the same                           x
//   activation_bytes_per_sample[_cifar]        the same                           MiB/sample
// With bit masks the ReLU6 masks are exact beside the compressed x-hat; without, they are read from
// the decompressed values. The steps of all impls alternate (alternating_seconds) so that each
// ratio to `standard` compares the same minutes; step_time_over_standard is the median over rounds
// of a way's step time over the standard step's in the same round, which the machine's drift from
// round to round moves less than the ratio of two img/s medians.
// Not here: the gradients' and accuracy's distance from the standard step (samples/13_below_the_minimum,
// tests/cpu/test_model_memory_options.cpp), the PyTorch comparison (`frugal bench train`).
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "models/registry.h"
#include "train/step_memory.h"
#include "nn/optim.h"
#include "nn/saved_activations.h"

namespace frugal::bench {

namespace {

struct Way {
  const char* impl;
  nn::ActivationSaving saving;
};

const std::vector<Way>& ways() {
  using nn::SavedCompression;
  static const std::vector<Way> all = {
      {"standard", {}},
      {"bn_from_output", {.bn_from_output = true}},
      {"bn_from_output_bf16", {.bn_from_output = true, .compress = SavedCompression::bf16}},
      {"bn_from_output_bf16_bit_masks", {.bn_from_output = true, .bit_masks = true, .compress = SavedCompression::bf16}},
      {"bn_from_output_int8_bit_masks", {.bn_from_output = true, .bit_masks = true, .compress = SavedCompression::int8}},
  };
  return all;
}

// As `frugal bench train`: at least 7 rounds and 3 s of each impl; quick: a batch of 4, one round.
struct Sizes {
  std::int64_t batch;
  int min_runs;
  double min_seconds;
};
constexpr Sizes kFullSizes{64, 7, 3.0}, kQuickSizes{4, 1, 0.0};
constexpr std::int64_t kSide = 32, kClasses = 10;
constexpr std::uint64_t kSeed = 6;
constexpr double kMiB = 1024.0 * 1024.0;

void stem_cases(bool cifar, const Options& options, const Sizes& sizes, std::vector<Result>& results) {
  Generator generator(kSeed);
  const auto model = models::make_model(
      "mobilenet_v2", {.num_classes = kClasses, .in_channels = 1, .cifar_stem = cifar, .generator = &generator});
  const Tensor images = normal({sizes.batch, 1, kSide, kSide}, 0.0, 1.0, {}, &generator).to(options.device);
  const Tensor labels = randint(0, kClasses, {sizes.batch}, {.dtype = DType::i64}, &generator).to(options.device);
  model->to(options.device);
  model->train();
  nn::SGD optimizer(model->parameters(), 0.01, 0.9);
  std::vector<std::int64_t> saved(ways().size());
  std::vector<std::function<double()>> runs;
  for (std::size_t i = 0; i < ways().size(); ++i)
    runs.push_back([&, i] {
      const auto start = std::chrono::steady_clock::now();
      saved[i] = train::training_step(*model, optimizer, images, labels, {.saving = ways()[i].saving}).activation_bytes;
      if (options.device.is_cuda()) cuda_synchronize(options.device.index());
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  const AlternatingTimes times = alternating_seconds(runs, sizes.min_runs, sizes.min_seconds);
  const std::vector<double> seconds = times.medians(), over_standard = times.median_ratios(0);
  const std::string stem = cifar ? "_cifar" : "";
  for (std::size_t i = 0; i < ways().size(); ++i) {
    results.push_back({"mobilenet_v2" + stem + "_b64", ways()[i].impl, static_cast<double>(sizes.batch) / seconds[i],
                       "img/s", true});
    results.push_back({"step_time_over_standard" + stem, ways()[i].impl, over_standard[i], "x", false});
    results.push_back({"activation_bytes_per_sample" + stem, ways()[i].impl,
                       static_cast<double>(saved[i]) / static_cast<double>(sizes.batch) / kMiB, "MiB/sample", false});
  }
}

}  // namespace

Report saving_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  Report report;
  for (const bool cifar : {false, true}) stem_cases(cifar, options, sizes, report.results);
  return report;
}

}  // namespace frugal::bench
