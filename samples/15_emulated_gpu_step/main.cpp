// 15_emulated_gpu_step: a whole training step on cuda:0 in the emulated CUDA build (FRUGAL_CUDA=emulated),
// where cuda:0 is frugal's emulated CUDA runtime on the CPU: the trainer's step (train/step.h) on a
// small CNN, once on cuda:0 and once on the CPU from the same weights and batches, step by step. For
// each step it prints what the emulated GPU did (kernel launches, copies each way, the waits that made
// queued work run, the longest queue) and what the caching allocator on cuda:0 holds, and checks that
// the two devices' losses agree to f32 rounding and that the allocator's books on cuda:0 are the CPU's.
// See README.md; docs/cuda-emulator.md explains the runtime.
// Not here: speed (the emulator checks logic, not performance) or NVIDIA's libraries (cuBLAS, cuDNN,
// NCCL need a GPU: this build runs frugal's own kernels).
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "emu/runtime/emulated_runtime.h"
#include "models/registry.h"
#include "samples/arguments.h"
#include "samples/checks.h"
#include "train/recipe.h"
#include "train/step.h"
#include "train/trainer.h"

using namespace frugal;
namespace runtime = frugal::emu::runtime;

namespace {

constexpr std::int64_t kBatch = 16;
// Losses of one step on two devices: the same f32 sums in another order (the GPU kernels' tiles
// against the CPU's blocked loops), a few units in the 7th digit, amplified a little by each step.
constexpr double kLossTolerance = 1e-5;

struct Run {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  Device device;

  Run(Device on, const train::TrainOptions& options) : device(on) {
    manual_seed(options.seed);  // the same initial weights on both devices
    model = models::make_model("cnn", train::model_options(options, 1, 10));
    model->to(device);
    model->train();
    optimizer = train::make_optimizer(*model, options);
  }

  double step(const Tensor& images, const Tensor& labels) {
    const train::StepHooks hooks{.next_batch = [&] { return data::Batch{images.to(device), labels.to(device), {}}; }};
    const train::StepResult result =
        train::optimizer_step({.model = *model, .optimizer = optimizer.get()}, {}, 1, images.size(0), hooks);
    return result.totals.loss_sum / result.totals.samples;
  }
};

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<std::int64_t> steps_given = samples::steps_argument(argc, argv, "15_emulated_gpu_step", 1, 1000, 3);
  if (!steps_given) return 2;
  const std::int64_t steps = *steps_given;
  samples::Checks checks;
  const CudaStatus& status = cuda_status();
  std::printf("CUDA: %s\n", status.emulated ? "the emulated runtime (FRUGAL_CUDA=emulated): cuda:0 runs on the CPU"
                                            : status.reason.c_str());
  if (!checks.expect(status.usable && status.emulated, "cuda:0 is the emulated device")) return checks.exit_code("15_emulated_gpu_step");
  const CudaDeviceInfo info = cuda_device_info(0);
  std::printf("cuda:0: %s, compute %d.%d, %s of device memory\n\n", info.name.c_str(), info.compute_major,
              info.compute_minor, mib(static_cast<std::int64_t>(info.total_bytes)).c_str());

  train::TrainOptions options;
  options.batch_size = kBatch;
  Run gpu(Device::cuda(0), options), cpu(Device::cpu(), options);
  CachingAllocator& gpu_memory = default_caching_allocator(Device::cuda(0));
  CachingAllocator& cpu_memory = default_caching_allocator(Device::cpu());
  Generator data(7);
  std::printf("step  loss cuda:0   loss cpu     launches  copies in/out  waits  longest queue  cuda:0 allocated (cpu)\n");
  for (std::int64_t s = 1; s <= steps; ++s) {
    const Tensor images = normal({kBatch, 1, 28, 28}, 0.0, 1.0, {}, &data);
    const Tensor labels = randint(0, 10, {kBatch}, {.dtype = DType::i64}, &data);
    runtime::reset_statistics();
    const double gpu_loss = gpu.step(images, labels);
    const runtime::Statistics r = runtime::statistics();
    const double cpu_loss = cpu.step(images, labels);
    const std::int64_t gpu_allocated = gpu_memory.caching_stats().allocated_bytes.current;
    const std::int64_t cpu_allocated = cpu_memory.caching_stats().allocated_bytes.current;
    std::printf("%4lld  %.7f  %.7f  %8lld  %6lld/%-6lld  %5lld  %13lld  %s (%s)\n", static_cast<long long>(s), gpu_loss,
                cpu_loss, static_cast<long long>(r.kernel_launches), static_cast<long long>(r.copies_host_to_device),
                static_cast<long long>(r.copies_device_to_host), static_cast<long long>(r.waits),
                static_cast<long long>(r.most_pending), mib(gpu_allocated).c_str(), mib(cpu_allocated).c_str());
    checks.expect(std::abs(gpu_loss - cpu_loss) <= kLossTolerance * std::abs(cpu_loss),
                  "step " + std::to_string(s) + ": the losses agree to f32 rounding (1e-5 relative)");
    checks.expect(r.kernel_launches > 0 && r.waits > 0, "the step launched kernels and waited for them");
  }
  const CachingStats g = gpu_memory.caching_stats(), c = cpu_memory.caching_stats();
  // Between steps the CPU's allocator also holds this loop's batch, made on the CPU; at the peak
  // (inside backward) the two hold the same tensors.
  std::printf("\npeak allocated: cuda:0 %s, cpu %s; peak reserved: cuda:0 %s, cpu %s\n", mib(g.allocated_bytes.peak).c_str(),
              mib(c.allocated_bytes.peak).c_str(), mib(g.reserved_bytes.peak).c_str(), mib(c.reserved_bytes.peak).c_str());
  checks.expect(g.allocated_bytes.peak == c.allocated_bytes.peak, "the allocator's books on cuda:0 are the CPU's: the same peak allocated");
  return checks.exit_code("15_emulated_gpu_step");
}
