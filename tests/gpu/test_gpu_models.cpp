// GPU suite: the models on cuda:0 against torchvision's float64 values, with the fixture's f32
// tolerances (tests/fixtures/models/README.md): each case of tests/fixtures/models, loaded with the
// fixture's weights, runs one eval and one training step on the GPU in f32 through models/run_step.h,
// the same step `frugal run-step --device cuda:0` takes. cuDNN's convolutions and batch norm, cuBLAS's
// GEMMs and the hand-written kernels all take part.
#include <doctest/doctest.h>

#include "models/registry.h"
#include "models/run_step.h"
#include "nn/safetensors.h"
#include "tests/cpu/model_fixture.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

namespace {
const Tensor& named(const nn::StateDict& tensors, const std::string& name) {
  for (const auto& [key, tensor] : tensors)
    if (key == name) return tensor;
  FRUGAL_THROW(ValueError, "fixture: no tensor ", name);
}
}  // namespace

TEST_CASE("models: MobileNetV2 and ResNet-18 on cuda:0 match torchvision's float64 values within the f32 tolerances") {
  for (const FixtureCase& c : fixture_cases()) {
    CAPTURE(c.folder);
    const auto model = models::make_model(c.model, c.options);
    model->load_state_dict(fixture_weights(model->state_dict()));
    model->to(kGpu);
    const nn::StateDict input = nn::read_safetensors(fixture_folder(c) + "/input.safetensors").tensors;
    for (const char* mode : {"eval", "train"}) {
      CAPTURE(mode);
      const auto step = std::string(mode) == "train" ? models::StepMode::train : models::StepMode::eval;
      const nn::StateDict results = models::run_step(*model, named(input, "x"), named(input, "y"), step, DType::f32, kGpu);
      const nn::StateDict reference = nn::read_safetensors(fixture_folder(c) + "/" + mode + ".safetensors").tensors;
      for (const ReferenceCheck& check : compare_with_reference(results, reference, DType::f32)) {
        CAPTURE(check.name);
        CHECK(check.error <= check.tolerance);
      }
    }
  }
}
