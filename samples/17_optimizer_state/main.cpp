// Sample 17: what the optimizer keeps, and what keeping less costs.
//   MobileNetV2 (1x32x32 random images, batch 64) trained a few steps on one fixed batch with SGD
//   without momentum, SGD with momentum, AdamW, AdamW with 8-bit moments (Note [8-bit moments] in
//   kernels/optimizer_ops.h) and Adafactor (nn/optim.h): the optimizer's state in bytes per parameter, the planner's
//   predicted peak (train/planner.h) and the measured one, the step time, and the loss after the
//   steps against the loss before them (the same batch every step: how fast each one fits it).
// Random images and labels (the accuracy on real data is docs/memory-guide.md's, over several seeds),
// so it needs no dataset. The step and the optimizers are `frugal train`'s (train/step.h, train/recipe.h).
// On cuda:0 when a GPU is usable, else on the CPU.
// Checked (samples/checks.h; the sample exits 1 when one is false): each optimizer's state to the byte
// as nn/optim.h says (0, 4 and 8 bytes per parameter; two codes and two scales per 256; a value per
// row and per column), on the CPU each planned peak equal to the measured one, and every optimizer
// lowering the loss.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/cpu_runtime.h"
#include "kernels/optimizer.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "train/planner.h"
#include "train/recipe.h"
#include "train/step.h"
#include "samples/arguments.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

constexpr std::int64_t kBatch = 64, kClasses = 10;
constexpr std::uint64_t kSeed = 17;

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// What nn/optim.h says each keeps for a parameter, in bytes.
std::int64_t no_state(const Tensor&) { return 0; }
std::int64_t one_copy(const Tensor& p) { return p.numel() * 4; }
std::int64_t two_copies(const Tensor& p) { return p.numel() * 8; }
std::int64_t two_codes(const Tensor& p) { return 2 * (p.numel() + quant_blocks(p.numel()) * 4); }
std::int64_t row_and_column(const Tensor& p) { return (p.size(0) + p.numel() / p.size(0)) * 4; }  // [d0, numel / d0]

struct Way {
  const char* name;
  train::OptimizerKind optimizer;
  double momentum;  // SGD's momentum, AdamW's beta1 (Adafactor has no first moment)
  double lr;        // each optimizer's usual scale: SGD's steps are not Adam's; Adafactor's is relative
  std::int64_t (*expected_state)(const Tensor& parameter);
};

struct Measured {
  std::int64_t peak_bytes = 0;   // allocated, beyond what was allocated before the run
  std::size_t state_bytes = 0;   // the optimizer's state tensors (nn::Optimizer::state_bytes)
  std::int64_t parameters = 0;
  std::int64_t expected_state_bytes = 0;  // what nn/optim.h says the optimizer keeps for these parameters
  double first_loss = 0, last_loss = 0;
  double step_seconds = 0;       // the fastest step after the first
};

Measured train_steps(const train::TrainOptions& o, const Way& way, std::int64_t steps) {
  CachingAllocator& allocator = default_caching_allocator(o.device);
  allocator.reset_peak_stats();
  const std::int64_t before = allocator.caching_stats().allocated_bytes.current;
  manual_seed(kSeed);
  const auto model = models::make_model(o.model, train::model_options(o, 1, kClasses));
  model->to(o.device);
  model->train();
  const train::Recipe recipe = train::make_recipe(*model, nullptr, o, steps);
  Generator data(kSeed + 1);
  const Tensor images = normal({kBatch, 1, o.image_size, o.image_size}, 0.0, 1.0, {}, &data).to(o.device);
  const Tensor labels = randint(0, kClasses, {kBatch}, {.dtype = DType::i64}, &data).to(o.device);
  const train::StepHooks hooks{.next_batch = [&] { return data::Batch{images, labels, {}}; }};
  Measured m;
  m.step_seconds = 1e9;
  for (std::int64_t step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const train::StepResult result = train::optimizer_step(recipe.parts(*model, nullptr), train::step_recipe(o), 1, kBatch, hooks);
    if (o.device.is_cuda()) cuda_synchronize(o.device.index());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) m.step_seconds = std::min(m.step_seconds, seconds);
    const double loss = result.totals.loss_sum / result.totals.samples;
    if (step == 0) m.first_loss = loss;
    m.last_loss = loss;
  }
  m.peak_bytes = allocator.caching_stats().allocated_bytes.peak - before;
  m.state_bytes = recipe.optimizer->state_bytes();
  for (const Tensor& p : model->parameters()) {
    m.parameters += p.numel();
    m.expected_state_bytes += way.expected_state(p);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  const auto steps = samples::steps_argument(argc, argv, "17_optimizer_state", 2, 10000, 20);
  if (!steps) return 2;
  std::printf("Sample 17: the optimizer's state (nn/optim.h), planned and measured\n\n");
  train::TrainOptions o;
  o.model = "mobilenet_v2";
  o.batch_size = kBatch;
  o.workers = 0;  // no loader here: the planner counts one batch, the one trained on
  o.weight_decay = 0.0;
  o.schedule = train::ScheduleKind::constant;
  o.warmup = 0.0;
  o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::printf("MobileNetV2 on one random batch of %lld 1x32x32 images, 10 classes, %lld steps on %s\n\n",
              static_cast<long long>(kBatch), static_cast<long long>(*steps), o.device.str().c_str());
  const std::vector<Way> ways = {{"SGD", train::OptimizerKind::sgd, 0.0, 0.05, no_state},
                                 {"SGD, momentum 0.9", train::OptimizerKind::sgd, 0.9, 0.05, one_copy},
                                 {"AdamW", train::OptimizerKind::adamw, 0.9, 1e-3, two_copies},
                                 {"AdamW, 8-bit moments", train::OptimizerKind::adamw8bit, 0.9, 1e-3, two_codes},
                                 {"Adafactor", train::OptimizerKind::adafactor, 0.0, 1e-2, row_and_column}};
  std::printf("   %-22s %11s %12s %15s %14s %9s %17s\n", "optimizer", "state", "per param", "predicted peak",
              "measured peak", "step", "loss first -> last");
  samples::Checks checks;
  for (const Way& way : ways) {
    train::TrainOptions run = o;
    run.optimizer = way.optimizer;
    run.momentum = way.momentum;
    run.lr = way.lr;
    const std::int64_t predicted = train::plan_memory(run).peak_bytes;
    const Measured m = train_steps(run, way, *steps);
    const double per_parameter = static_cast<double>(m.state_bytes) / static_cast<double>(m.parameters);
    std::printf("   %-22s %7.2f MiB %8.2f B %11.2f MiB %10.2f MiB %6.0f ms %8.3f -> %.3f\n", way.name,
                mib(static_cast<std::int64_t>(m.state_bytes)), per_parameter, mib(predicted), mib(m.peak_bytes),
                1000 * m.step_seconds, m.first_loss, m.last_loss);
    // The state tensors' own bytes (nbytes, before the allocator rounds each up to its blocks).
    checks.expect(static_cast<std::int64_t>(m.state_bytes) == m.expected_state_bytes,
                  std::string(way.name) + " keeps the state nn/optim.h says, to the byte");
    if (o.device.is_cpu())
      checks.expect(predicted == m.peak_bytes, std::string(way.name) + ": the planner predicts the peak to the byte");
    checks.expect(m.last_loss < m.first_loss, std::string(way.name) + " lowers the loss on its batch");
  }
  std::printf("   (state: the optimizer's tensors; per param: their bytes per parameter; the peaks count the\n"
              "   allocator's blocks, 512 bytes at least, so a small tensor's 8-bit state costs more than its bytes)\n");
  return checks.exit_code("17_optimizer_state");
}
