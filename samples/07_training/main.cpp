// Sample 07: the training loop as a library (train/trainer.h), what `frugal train` runs.
//   1. A short run of the small CNN on Fashion-MNIST: loss, accuracy, speed and peak memory by tag.
//   2. The same run stopped half-way with a checkpoint and resumed: every parameter bit-identical
//      to the run that never stopped, on the CPU.
//   3. The batch split into 4 accumulated micro-batches: the same parameters (up to f32 rounding),
//      a quarter of the activation memory.
// Needs Debian's dataset-fashion-mnist (it says so and exits 0 when missing); runs on cuda:0 when a GPU
// is usable, else on the CPU. Parts 2 and 3 are checked (samples/checks.h): the sample exits 1 when
// the resumed run is not bit-identical (on the CPU), the accumulated one differs beyond f32 rounding,
// or its activation memory is not about a quarter.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "data/idx.h"
#include "kernels/cpu_runtime.h"
#include "samples/checks.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace frugal;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kSteps = 40;  // enough to show the effects; the sample also runs as a test, under ASan too
// How far two runs that sum the same gradients in another order end apart, relative to each tensor's
// largest value: f32 rounding carried along kSteps steps (4e-4 measured for 4 micro-batches). A
// micro-batch weighted wrongly moves the parameters by far more.
constexpr double kRounding = 5e-3;

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void print_run(const char* name, const train::TrainResult& r) {
  std::printf("   %-26s %4lld steps  loss %.4f  %7.0f img/s  peak %6.1f MiB (activations %5.1f MiB)\n", name,
              static_cast<long long>(r.steps), r.final_loss, r.images_per_sec, mib(r.peak_allocated_bytes),
              mib(r.peak_bytes_by_tag[static_cast<int>(MemoryTag::activation)]));
}

// The largest difference between two state dicts, relative to each tensor's largest magnitude.
double largest_difference(const nn::StateDict& a, const nn::StateDict& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].second.to_vector<double>(), y = b[i].second.to_vector<double>();
    double scale = 0.0, difference = 0.0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      scale = std::max(scale, std::abs(x[k]));
      difference = std::max(difference, std::abs(x[k] - y[k]));
    }
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::printf("Sample 07: the training loop (train/trainer.h), as `frugal train` runs it\n\n");
  if (!fs::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  const fs::path dir = fs::temp_directory_path() / ("frugal-sample-07-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  train::TrainOptions o;
  o.model = "cnn";
  o.steps = kSteps;
  o.batch_size = 32;
  o.optimizer = train::OptimizerKind::sgd;  // AdamW would magnify f32 rounding where a gradient is near 0
  o.lr = 0.05;
  o.evaluate = false;  // the test pass would dominate so short a run; `frugal train` evaluates
  o.device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::printf("small CNN on Fashion-MNIST (32x32), SGD with Nesterov momentum, batch %lld, on %s\n", static_cast<long long>(o.batch_size),
              o.device.str().c_str());

  o.save = (dir / "straight.safetensors").string();
  const train::TrainResult straight = train::train(o);
  print_run("straight", straight);

  o.steps = kSteps / 2;
  o.save = (dir / "half.safetensors").string();
  print_run("stopped half-way", train::train(o));
  o.steps = kSteps;
  o.resume = o.save;
  o.save = (dir / "resumed.safetensors").string();
  print_run("resumed to the end", train::train(o));
  const double resumed_difference = largest_difference(train::load_checkpoint((dir / "straight.safetensors").string()).model,
                                                       train::load_checkpoint(o.save).model);
  std::printf("   resumed against straight: largest parameter difference %g (%s)\n", resumed_difference,
              resumed_difference == 0.0 ? "bit-identical" : "differs");
  samples::Checks checks;
  // The CPU kernels are deterministic; a GPU's cuDNN may sum with atomics in any order.
  if (o.device.is_cpu())
    checks.expect(resumed_difference == 0.0, "the resumed run is bit-identical to the straight one");
  else
    checks.expect(resumed_difference <= kRounding, "the resumed run matches the straight one to f32 rounding");
  std::printf("\n");

  o.resume.clear();
  o.batch_size = 8;
  o.accum = 4;
  o.save = (dir / "accumulated.safetensors").string();
  const train::TrainResult accumulated = train::train(o);
  print_run("4 micro-batches of 8", accumulated);
  const double accum_difference = largest_difference(train::load_checkpoint((dir / "straight.safetensors").string()).model,
                                                     train::load_checkpoint(o.save).model);
  const double smaller = static_cast<double>(straight.peak_bytes_by_tag[static_cast<int>(MemoryTag::activation)]) /
                        static_cast<double>(accumulated.peak_bytes_by_tag[static_cast<int>(MemoryTag::activation)]);
  std::printf("   against one batch of 32: largest relative parameter difference %.2g (f32 rounding of the summed\n"
              "   gradients); activation memory %.1fx smaller\n",
              accum_difference, smaller);
  checks.expect(accum_difference <= kRounding, "4 micro-batches of 8 end where one batch of 32 does, to f32 rounding");
  // A batch of 8 keeps a quarter of what a batch of 32 keeps, less what does not grow with the batch.
  checks.expect(smaller >= 3.5, "4 micro-batches keep about a quarter of the activations");
  fs::remove_all(dir);
  return checks.exit_code("07_training");
}
