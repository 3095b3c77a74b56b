// Training steps on one random batch, for the samples that measure what a way of training holds
// (16, 18, 19), and what the allocators saw while they ran: the model `frugal train` would build, the recipe it would make (train/recipe.h) and the
// trainer's own step (train/step.h), so what a sample measures is what the flag does. Memory does not
// depend on the pixels, so no dataset is needed. Shared so that each sample times and trains alike.
// Not here: what a sample reads from the allocators, or judges (samples/checks.h).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "models/registry.h"
#include "train/recipe.h"
#include "train/step.h"

namespace frugal::samples {

struct RandomSteps {
  std::shared_ptr<nn::Module> model;  // after the last step, on o.device
  double fastest_step_seconds = 0;    // of the steps after the first (the first makes the optimizer's state)
};

// `steps` optimizer steps of `o` (one micro-batch each) on one batch of normal images and uniform
// labels, from the weights `seed` gives, every time the same.
inline RandomSteps train_random_steps(const train::TrainOptions& o, std::int64_t in_channels, std::int64_t classes,
                                      std::int64_t steps, std::uint64_t seed) {
  manual_seed(seed);
  RandomSteps result;
  result.model = models::make_model(o.model, train::model_options(o, in_channels, classes));
  result.model->to(o.device);
  result.model->train();
  const train::Recipe recipe = train::make_recipe(*result.model, nullptr, o, steps);
  Generator data(seed + 1);
  const Tensor images = normal({o.batch_size, in_channels, o.image_size, o.image_size}, 0.0, 1.0, {}, &data).to(o.device);
  const Tensor labels = randint(0, classes, {o.batch_size}, {.dtype = DType::i64}, &data).to(o.device);
  const train::StepHooks hooks{.next_batch = [&] { return data::Batch{images, labels, {}}; }};
  result.fastest_step_seconds = 1e9;
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    train::optimizer_step(recipe.parts(*result.model, nullptr), train::step_recipe(o), 1, o.batch_size, hooks);
    if (o.device.is_cuda()) cuda_synchronize(o.device.index());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) result.fastest_step_seconds = std::min(result.fastest_step_seconds, seconds);
  }
  return result;
}

struct MeasuredSteps {
  std::int64_t peak_bytes = 0;                          // allocated on the device, beyond what was before the run
  std::array<std::int64_t, kNumMemoryTags> tag_peak{};  // the most bytes of each tag alive at once on the device
  std::int64_t host_bytes = 0;                          // the pinned host allocator's peak of requested bytes
  double step_seconds = 0;                              // the fastest step after the first
  std::vector<std::vector<float>> weights;              // after the last step, per parameter, on the CPU

  std::int64_t tag(MemoryTag t) const { return tag_peak[static_cast<std::size_t>(t)]; }
};

// train_random_steps, with the device's and the pinned host allocator's peaks reset before and read after.
inline MeasuredSteps measure_random_steps(const train::TrainOptions& o, std::int64_t in_channels, std::int64_t classes,
                                          std::int64_t steps, std::uint64_t seed) {
  CachingAllocator& allocator = default_caching_allocator(o.device);
  CachingAllocator& host = pinned_host_allocator();
  allocator.reset_peak_stats();
  host.reset_peak_stats();
  const std::int64_t before = allocator.caching_stats().allocated_bytes.current;
  const std::int64_t host_before = host.stats().requested_bytes.current;
  const RandomSteps run = train_random_steps(o, in_channels, classes, steps, seed);
  MeasuredSteps m;
  m.step_seconds = run.fastest_step_seconds;
  m.peak_bytes = allocator.caching_stats().allocated_bytes.peak - before;
  for (int t = 0; t < kNumMemoryTags; ++t) m.tag_peak[static_cast<std::size_t>(t)] = allocator.stats().tag_bytes[t].peak;
  m.host_bytes = host.stats().requested_bytes.peak - host_before;
  for (const Tensor& p : run.model->parameters()) m.weights.push_back(p.to(Device::cpu()).to_vector<float>());
  return m;
}

}  // namespace frugal::samples
