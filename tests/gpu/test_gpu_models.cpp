// GPU suite: the models on cuda:0 against torchvision's float64 values, with the fixture's f32
// tolerances (tests/fixtures/models/README.md): each case of tests/fixtures/models, loaded with the
// fixture's weights, runs one eval and one training step on the GPU in f32 through train/run_step.h,
// the same step `frugal run-step --device cuda:0` takes. cuDNN's convolutions and batch norm, cuBLAS's
// GEMMs and the hand-written kernels all take part. Then one training step of a small MobileNetV2
// under each way of saving below the minimum (nn/saved_activations.h) against the same step on the CPU.
#include <doctest/doctest.h>

#include <vector>

#include "core/random.h"
#if FRUGAL_CUDA_EMULATED
#include "emu/emulator.h"
#endif
#include "models/registry.h"
#include "train/run_step.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/saved_activations.h"
#include "nn/safetensors.h"
#include "tests/cpu/model_fixture.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

namespace {
#if FRUGAL_CUDA_EMULATED
// In the emulated CUDA build whole models run in the kernel emulator, without its shared-memory race
// checks (most of its time): each kernel they launch is race-checked by its own case of this suite.
emu::Options without_race_checks() {
  emu::Options options = emu::options();
  options.check_hazards = false;
  return options;
}
#define FRUGAL_WHOLE_MODEL_SCOPE const emu::OptionsScope whole_model(without_race_checks())
#else
#define FRUGAL_WHOLE_MODEL_SCOPE static_cast<void>(0)
#endif

const Tensor& named(const nn::StateDict& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return tensor;
  FRUGAL_THROW(ValueError, "fixture: no tensor ", name);
}
}  // namespace

TEST_CASE("models: MobileNetV2, ResNet-18 and ResNet-50 on cuda:0 match torchvision's float64 values within the f32 tolerances") {
  FRUGAL_WHOLE_MODEL_SCOPE;
  for (const FixtureCase& c : fixture_cases()) {
    CAPTURE(c.folder);
    const auto model = models::make_model(c.model, c.options);
    model->load_state_dict(fixture_weights(model->state_dict()));
    model->to(kGpu);
    const nn::StateDict input = nn::read_safetensors(fixture_folder(c) + "/input.safetensors").tensors;
    for (const char* mode : {"eval", "train"}) {
      CAPTURE(mode);
      const auto step = std::string(mode) == "train" ? train::StepMode::train : train::StepMode::eval;
      const nn::StateDict results = train::run_step(*model, named(input, "x"), named(input, "y"), step, DType::f32, kGpu);
      const nn::StateDict reference = nn::read_safetensors(fixture_folder(c) + "/" + mode + ".safetensors").tensors;
      for (const ReferenceCheck& check : compare_with_reference(results, reference, DType::f32)) {
        CAPTURE(check.name);
        CHECK(check.error <= check.tolerance);
      }
    }
  }
}

namespace {
// One training step of a MobileNetV2 (width 0.35, batch 4x1x32x32) in f64 on `device` under `saving`:
// the loss and every parameter's gradient, on the host.
struct SavingStep {
  double loss = 0.0;
  std::vector<std::vector<double>> grads;
};

SavingStep saving_step(bool cifar_stem, Device device, const nn::ActivationSaving& saving) {
  Generator weights(5), data(6);
  // No dropout: the devices draw their own random numbers.
  const auto model = models::make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width_mult = 0.35,
                                                         .dropout = 0.0, .cifar_stem = cifar_stem, .generator = &weights});
  model->to(DType::f64);
  model->to(device);
  model->train();
  const Tensor images = normal({4, 1, 32, 32}, 0.0, 1.0, {.dtype = DType::f64}, &data).to(device);
  const Tensor labels = randint(0, 10, {4}, {.dtype = DType::i64}, &data).to(device);
  SavingStep step;
  {
    const nn::ActivationSavingGuard guard(saving);
    const Tensor loss = functional::cross_entropy((*model)(images), labels);
    step.loss = loss.item<double>();
    autograd::backward(loss);
  }
  for (const Tensor& p : model->parameters()) step.grads.push_back(autograd::grad(p).to_vector<double>());
  return step;
}

double relative_gradient_error(const SavingStep& a, const SavingStep& b) { return test::relative_gradient_error(a.grads, b.grads); }
}  // namespace

// Below the minimum on the GPU: the ways of saving of nn/saved_activations.h, end to end through the
// graph (x-hat saved, rebuilt, compressed by the graph, masks as bits), against the same step on the
// CPU. BatchNorm's own compact passes (f32 only) are compared with the GPU in
// test_gpu_batch_norm.cpp. In f64: at batch 4 the deep layers' BatchNorm sums a few values per channel,
// whose cancellation makes f32 steps of two devices (or of the CPU's two BatchNorm kernels, measured)
// differ by 0.5% in their gradients, as much as bf16 compression itself moves them. In f64 the plain
// steps agree to 1e-10. The compressed ones are held to 1e-6: the devices' f64 difference, amplified
// ~1e5 by those BatchNorms to ~1e-11 in the deep layers, can still carry a value across a bf16
// rounding now and then, and an 8-bit code's per-channel low and step are f32, so a channel's codes
// can move by an f32 step (~6e-8) -- each such event moves the gradients by far less than 1e-6 and
// far more than 1e-10. Compression itself moves the GPU's gradients by ~1e-2 (checked > 1e-4, so
// that a GPU that silently kept f64 would fail).
TEST_CASE("below the minimum on cuda:0: MobileNetV2's step with BatchNorm from its output, bit masks and bf16 or int8 is the CPU's") {
  FRUGAL_WHOLE_MODEL_SCOPE;
  const nn::ActivationSaving from_output{.bn_from_output = true};
  const nn::ActivationSaving compressed[] = {
      {.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::bf16},
      {.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::int8}};
  for (bool cifar_stem : {false, true}) {
    CAPTURE(cifar_stem);
    const SavingStep plain = saving_step(cifar_stem, kGpu, {});
    const SavingStep gpu_from_output = saving_step(cifar_stem, kGpu, from_output);
    CHECK(relative_gradient_error(plain, gpu_from_output) < 1e-10);
    CHECK(relative_gradient_error(saving_step(cifar_stem, Device::cpu(), from_output), gpu_from_output) < 1e-10);
    for (const nn::ActivationSaving& saving : compressed) {
      CAPTURE(saving.str());
      const SavingStep cpu = saving_step(cifar_stem, Device::cpu(), saving);
      const SavingStep gpu = saving_step(cifar_stem, kGpu, saving);
      CHECK(gpu.loss == doctest::Approx(cpu.loss).epsilon(1e-12));
      REQUIRE(gpu.grads.size() == cpu.grads.size());
      const double error = relative_gradient_error(cpu, gpu), compression = relative_gradient_error(plain, gpu);
      MESSAGE("relative gradient error, GPU against CPU: ", error, "; compression on the GPU: ", compression);
      CHECK(error < 1e-6);
      CHECK(compression > 1e-4);
    }
  }
}
