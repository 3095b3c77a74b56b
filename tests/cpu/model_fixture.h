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
// Not here: reading the fixture files (nn/safetensors.h) or the models.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/tensor.h"
#include "nn/state_dict.h"

namespace frugal::test {

// Element i of state-dict tensor k, named `name`, of shape `shape`: the value already rounded to
// float32 (5 for num_batches_tracked). ValueError for a name that no rule covers.
double fixture_weight_value(std::int64_t k, std::int64_t i, std::string_view name, const Shape& shape);

// Fresh CPU tensors with `like`'s names and shapes, in its order, filled by the formula: F32, and
// I64 for num_batches_tracked. `like` is typically a model's state_dict().
nn::StateDict fixture_weights(const nn::StateDict& like);

}  // namespace frugal::test
