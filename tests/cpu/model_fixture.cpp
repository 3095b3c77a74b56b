// The fixture weight formula (see model_fixture.h); tests/fixtures/models/make_fixtures.py is the
// same formula in Python, and each step below is written in the same order so both round alike.
#include "tests/cpu/model_fixture.h"

#include <cmath>
#include <string>

namespace frugal::test {

namespace {
// splitmix64 (Steele, Lea and Flood 2014) of x = (k << 32) + i, its top 53 bits as u in [0, 1).
double unit(std::int64_t k, std::int64_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(k) << 32) + static_cast<std::uint64_t>(i);
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;  // 53 bits: exact in a double
}

bool is_batch_counter(std::string_view name) { return name.ends_with("num_batches_tracked"); }
}  // namespace

double fixture_weight_value(std::int64_t k, std::int64_t i, std::string_view name, const Shape& shape) {
  constexpr double kBatchesTracked = 5.0;  // the fixtures' BN counters; a train step makes them 6
  if (is_batch_counter(name)) return kBatchesTracked;
  const double u = unit(k, i);
  const double s = 2.0 * u - 1.0;
  double value = 0.0;
  if (name.ends_with("weight") && shape.size() >= 2) {
    const std::int64_t fan_in = shape_numel(shape) / shape[0];
    value = s * std::sqrt(6.0 / static_cast<double>(fan_in));
  } else if (name.ends_with("weight") && shape.size() == 1) {
    value = 1.0 + 0.2 * s;
  } else if (name.ends_with("bias") || name.ends_with("running_mean")) {
    value = 0.1 * s;
  } else if (name.ends_with("running_var")) {
    value = 1.0 + 0.5 * u;
  } else {
    FRUGAL_THROW(ValueError, "fixture weights: no rule for state-dict entry ", name, " of shape ", shape_str(shape));
  }
  return static_cast<double>(static_cast<float>(value));
}

nn::StateDict fixture_weights(const nn::StateDict& like) {
  nn::StateDict result;
  for (std::size_t k = 0; k < like.size(); ++k) {
    const auto& [name, tensor] = like[k];
    const Shape& shape = tensor.shape();
    if (is_batch_counter(name)) {
      result.emplace_back(name, full(shape, fixture_weight_value(0, 0, name, shape), {.dtype = DType::i64}));
      continue;
    }
    std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(
          fixture_weight_value(static_cast<std::int64_t>(k), static_cast<std::int64_t>(i), name, shape));
    result.emplace_back(name, from_vector(values, shape));
  }
  return result;
}

}  // namespace frugal::test
