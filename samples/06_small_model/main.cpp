// Sample 06: a smaller model. MobileNetV2 against ResNet-18 and ResNet-50 on the same batch, every
// figure measured by the allocator's per-tag books:
//   1. per model: parameters, the bytes of parameters and buffers, of the gradients (.grad), of SGD's
//      momentum, the activations saved for backward per sample (tag `activation` alive at the end of
//      the forward, divided by the batch), and the peak of one training step;
//      on the CPU at 32x32 and 224x224, and on cuda:0 too when a GPU is usable.
//   2. MobileNetV2 at 32x32, one channel, f32, with the standard and the CIFAR stem: the measured
//      activations per sample beside the analytic minimum (two tensors per convolution: its output,
//      which BatchNorm needs, and one tensor shared by BatchNorm's output, ReLU6 and the next
//      convolution, or the block's output), and what makes any difference, tensor kind by tensor kind.
//      The goal is to stay within 5% of that minimum: the sample exits 1 when a stem misses it
//      (samples/checks.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator_registry.h"
#include "core/cuda_status.h"
#include "core/random.h"
#include "models/mobilenet_v2.h"
#include "models/registry.h"
#include "train/step_memory.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "kernels/cpu_runtime.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::int64_t tag_now(Device device, MemoryTag tag) {
  return allocator_for(device).stats().tag_bytes[static_cast<int>(tag)].current;
}

struct Measured {
  std::int64_t parameters = 0;   // learnable values
  std::int64_t state_bytes = 0;  // parameters and buffers (tag param)
  train::StepMemory step;       // activations saved for backward, gradients, momentum, the step's peak
};

// One SGD step (momentum 0.9) of `model` on a batch of random images.
Measured train_one_step(nn::Module& model, Device device, std::int64_t batch, std::int64_t channels, std::int64_t side) {
  Generator generator(6);
  const Tensor images = normal({batch, channels, side, side}, 0.0, 1.0, {}, &generator).to(device);
  const Tensor labels = zeros({batch}, {.dtype = DType::i64}).to(device);
  nn::SGD optimizer(model.parameters(), 0.01, 0.9);
  return {model.parameter_count(), tag_now(device, MemoryTag::param), train::training_step(model, optimizer, images, labels)};
}

void compare_models(Device device, std::int64_t side, std::int64_t batch) {
  std::printf("\n%s, batch %lld of 3x%lldx%lld images, 1000 classes, f32, SGD with momentum\n",
              device.str().c_str(), static_cast<long long>(batch), static_cast<long long>(side),
              static_cast<long long>(side));
  std::printf("   %-13s %11s %11s %11s %11s %15s %11s\n", "model", "parameters", "weights", "grads", "momentum",
              "saved/sample", "step peak");
  for (const char* name : {"mobilenet_v2", "resnet18", "resnet50"}) {
    const auto model = models::make_model(name);
    model->to(device);
    const Measured m = train_one_step(*model, device, batch, 3, side);
    std::printf("   %-13s %11lld %8.2f MiB %7.2f MiB %7.2f MiB %11.2f MiB %7.1f MiB\n", name,
                static_cast<long long>(m.parameters), m.state_bytes / kMiB, m.step.grad_bytes / kMiB,
                m.step.optimizer_bytes / kMiB, m.step.activation_bytes / kMiB / static_cast<double>(batch),
                m.step.peak_bytes / kMiB);
  }
}

// The analytic minimum per sample: two tensors per convolution (its output for BatchNorm, and the
// tensor BatchNorm, ReLU6 and the next layer share, or the block's output), found by running each
// block of `features` once and reading each convolution's output shape from its options.
double analytic_minimum_per_sample(const models::MobileNetV2& model, std::int64_t side) {
  const auto& features = dynamic_cast<const nn::Sequential&>(*model.named_children()[0].second);
  std::int64_t size = side, floats = 0;
  for (std::size_t b = 0; b < features.size(); ++b)
    for (const auto& [name, module] : features[b]->named_modules())
      if (const auto* conv = dynamic_cast<const nn::Conv2d*>(module)) {
        const Conv2dOptions& o = conv->options();
        const std::int64_t kernel = conv->weight().size(2);
        size = (size + 2 * o.padding[0] - o.dilation[0] * (kernel - 1) - 1) / o.stride[0] + 1;
        floats += 2 * conv->weight().size(0) * size * size;
      }
  return static_cast<double>(floats) * 4;
}

// The tensors a training forward of MobileNetV2 keeps beyond the convolutions' pairs, per sample.
struct Extras {
  double batch_statistics = 0;  // BatchNorm's saved mean and inverse std: 2 x C floats per batch
  double head = 0;              // pooled features (Linear saves its input), logits, loss
};

Extras extras_per_sample(const models::MobileNetV2& model, std::int64_t batch, std::int64_t classes) {
  Extras e;
  for (const auto& [name, module] : model.named_modules())
    if (const auto* norm = dynamic_cast<const nn::BatchNorm2d*>(module))
      e.batch_statistics += 2.0 * static_cast<double>(norm->weight().numel()) * 4 / static_cast<double>(batch);
  e.head = static_cast<double>(model.last_channel() + classes) * 4 + 4.0 / static_cast<double>(batch);
  return e;
}

void saved_against_minimum(Device device, samples::Checks& checks) {
  constexpr std::int64_t kBatch = 8, kSide = 32, kClasses = 10;
  std::printf("\nMobileNetV2 at %lldx%lld, 1 channel, f32, batch %lld, %s: saved activations per sample\n",
              static_cast<long long>(kSide), static_cast<long long>(kSide), static_cast<long long>(kBatch),
              device.str().c_str());
  std::printf("   %-9s %12s %12s %8s   %s\n", "stem", "measured", "minimum", "ratio", "the difference, by kind");
  double worst_ratio = 0;
  for (bool cifar : {false, true}) {
    Generator generator(6);
    models::MobileNetV2 model({.num_classes = kClasses, .in_channels = 1, .cifar_stem = cifar, .generator = &generator});
    model.to(device);
    const Measured m = train_one_step(model, device, kBatch, 1, kSide);
    const double measured = static_cast<double>(m.step.activation_bytes) / kBatch;
    const double minimum = analytic_minimum_per_sample(model, kSide);
    const Extras extras = extras_per_sample(model, kBatch, kClasses);
    const double unexplained = measured - minimum - extras.batch_statistics - extras.head;
    std::printf("   %-9s %8.3f MiB %8.3f MiB %8.4f   BN batch statistics %.1f KiB, head %.1f KiB, other %.1f KiB\n",
                cifar ? "CIFAR" : "standard", measured / kMiB, minimum / kMiB, measured / minimum,
                extras.batch_statistics / 1024, extras.head / 1024, unexplained / 1024);
    worst_ratio = std::max(worst_ratio, measured / minimum);
  }
  std::printf("   goal: within 5%% of the minimum; %s (worst %.1f%% above)\n", worst_ratio <= 1.05 ? "met" : "NOT met",
              (worst_ratio - 1) * 100);
  checks.expect(worst_ratio <= 1.05, "MobileNetV2 saves within 5% of the analytic minimum on " + device.str());
}

}  // namespace

int main(int, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::printf("Sample 06: a smaller model, measured by the allocator (models/README.md explains the figures)\n");
  samples::Checks checks;
  compare_models(Device::cpu(), 32, 8);
  compare_models(Device::cpu(), 224, 2);
  saved_against_minimum(Device::cpu(), checks);
  if (cuda_available()) {
    compare_models(Device::cuda(0), 224, 32);
    saved_against_minimum(Device::cuda(0), checks);
  } else {
    std::printf("\n(no usable GPU: %s; the CUDA rows are not shown)\n", cuda_status().reason.c_str());
  }
  return checks.exit_code("06_small_model");
}
