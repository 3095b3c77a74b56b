// The weights of the torchvision model fixtures (tests/fixtures/models/), computed here as
// make_fixtures.py computes them, so the fixture files need not store them. Tensor k of a state dict
// (in its order: parameters and buffers), element i in C order, from splitmix64 of (k << 32) + i:
//   weight, rank >= 2 (conv, linear)   s * sqrt(6 / fan_in), fan_in = numel / shape[0]
//   weight, rank 1 (batch norm)        1 + 0.2 s
//   bias, running_mean                 0.1 s
//   running_var                        1 + 0.5 u
//   num_batches_tracked                5
// with u in [0, 1) the top 53 bits of splitmix64's output and s = 2u - 1; every value then rounded
// to float32 (the f64 reference runs use these same float32 values).
//
// Also here: the fixture's cases, and the comparison of one step's results with a reference file
// (tests/fixtures/models/README.md gives the rules), shared by the CPU suite (frugal run-step end to
// end) and the GPU suite (the same step on cuda:0); and the distance between two steps' gradients.
// Not here: reading the fixture files (nn/safetensors.h) or the models.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "models/registry.h"
#include "nn/state_dict.h"

namespace frugal::test {

// Element i of state-dict tensor k, named `name`, of shape `shape`: the value already rounded to
// float32 (5 for num_batches_tracked). ValueError for a name that no rule covers.
double fixture_weight_value(std::int64_t k, std::int64_t i, std::string_view name, const Shape& shape);

// Fresh CPU tensors with `like`'s names and shapes, in its order, filled by the formula: F32, and
// I64 for num_batches_tracked. `like` is typically a model's state_dict().
nn::StateDict fixture_weights(const nn::StateDict& like);

// One folder of tests/fixtures/models: the model, its options, and the same options as run-step flags.
struct FixtureCase {
  const char* folder;
  const char* model;
  models::ModelOptions options;
  std::vector<std::string> flags;
};
const std::vector<FixtureCase>& fixture_cases();
std::string fixture_folder(const FixtureCase& c);  // the absolute path of its folder

// |b - a| / |a| over every gradient of a step at once (one vector per parameter): compression rounds
// each saved value a little, and a gradient that is a sum of many cancelling terms (BatchNorm's
// weight's) can move by more than itself, so a per-parameter bound would say more about cancellation
// than about the compression. Shared by the CPU suite's and the GPU suite's steps below the minimum.
double relative_gradient_error(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b);

// A reference below this fraction of the step's largest gradient is zero by construction (a
// BatchNorm bias whose shift the next BatchNorm removes): it holds only rounding noise, so it is
// compared against the largest gradient instead of against itself.
inline constexpr double kZeroByConstruction = 1e-10;

// One result against its reference: the relative error (max |a - b| / max |b|, for a summary the
// worst of its samples, L2 norm and largest magnitude) and the tolerance it must meet.
struct ReferenceCheck {
  std::string name;
  double error = 0, tolerance = 0;
  bool zero_by_construction = false;
};

// Every result of `results` (a run_step's output in `dtype`, f64 or f32) against `reference` (a
// fixture's eval or train file). f64: 1e-9; f32: logits and loss max(1e-4, 8 e), the rest
// max(1e-3, 8 e), e being PyTorch's f32 error stored as f32err.NAME; 1e-3 for a tensor zero by
// construction. ValueError if a result has no reference or a reference no result.
std::vector<ReferenceCheck> compare_with_reference(const nn::StateDict& results, const nn::StateDict& reference,
                                                   DType dtype);

}  // namespace frugal::test
