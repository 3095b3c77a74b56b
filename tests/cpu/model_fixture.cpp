// The fixture weight formula (see model_fixture.h); tests/fixtures/models/make_fixtures.py is the
// same formula in Python, and each step below is written in the same order so both round alike.
#include "tests/cpu/model_fixture.h"

#include <algorithm>
#include <cmath>
#include <map>
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

// ---- the cases and the comparison

const std::vector<FixtureCase>& fixture_cases() {
  static const std::vector<FixtureCase> cases = {
      {"mobilenet_v2_w050_c1", "mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width_mult = 0.5, .dropout = 0.0},
       {"--num-classes", "10", "--in-channels", "1", "--width", "0.5", "--dropout", "0"}},
      {"mobilenet_v2_w100_c3_cifar", "mobilenet_v2",
       {.num_classes = 10, .in_channels = 3, .width_mult = 1.0, .dropout = 0.0, .cifar_stem = true},
       {"--num-classes", "10", "--in-channels", "3", "--width", "1.0", "--dropout", "0", "--cifar-stem"}},
      {"resnet18_c3", "resnet18", {.num_classes = 10, .in_channels = 3}, {"--num-classes", "10", "--in-channels", "3"}},
      {"resnet50_c3", "resnet50", {.num_classes = 10, .in_channels = 3}, {"--num-classes", "10", "--in-channels", "3"}},
  };
  return cases;
}

std::string fixture_folder(const FixtureCase& c) {
  return std::string(FRUGAL_SOURCE_DIR) + "/tests/fixtures/models/" + c.folder;
}

namespace {

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// max |a - b| / scale, with the scale floored so that an all-zero reference compares absolutely.
double relative_error(const std::vector<double>& got, const std::vector<double>& expected, double scale) {
  FRUGAL_CHECK_VALUE(got.size() == expected.size(), "fixture: ", got.size(), " values against ", expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
  return worst / std::max(scale, 1e-30);
}

class Reference {
 public:
  explicit Reference(const nn::StateDict& tensors) {
    for (const auto& [name, tensor] : tensors) tensors_.emplace(name, tensor);
    for (const auto& [name, tensor] : tensors_)  // f32err.grad.X names every gradient, whole or summarised
      if (name.rfind("f32err.grad.", 0) == 0) largest_gradient_ = std::max(largest_gradient_, max_abs_of(name.substr(7)));
  }
  bool has(const std::string& name) const { return tensors_.count("f32err." + name) != 0; }
  double pytorch_f32_error(const std::string& name) const { return at("f32err." + name).item<double>(); }
  double largest_gradient() const { return largest_gradient_; }
  bool zero_by_construction(const std::string& name) const {
    return max_abs_of(name) < kZeroByConstruction * largest_gradient_;
  }
  std::size_t size() const {
    return static_cast<std::size_t>(
        std::count_if(tensors_.begin(), tensors_.end(), [](const auto& t) { return t.first.rfind("f32err.", 0) == 0; }));
  }

  // The error of `got` against the reference `name`, whole or summarised.
  double error(const std::vector<double>& got, const std::string& name) const {
    if (zero_by_construction(name)) return relative_error(got, std::vector<double>(got.size(), 0.0), largest_gradient_);
    if (const auto whole = tensors_.find(name); whole != tensors_.end()) {
      const auto reference = whole->second.to_vector<double>();
      return relative_error(got, reference, max_abs(reference));
    }
    const auto samples = at(name + ":sample").to_vector<double>();
    const double l2 = at(name + ":l2").item<double>(), maxabs = at(name + ":maxabs").item<double>();
    std::vector<double> picked;
    const auto numel = static_cast<std::int64_t>(got.size()), count = static_cast<std::int64_t>(samples.size());
    for (std::int64_t j = 0; j < count; ++j) picked.push_back(got[static_cast<std::size_t>(j * numel / count)]);
    double squares = 0;
    for (double v : got) squares += v * v;
    return std::max({relative_error(picked, samples, maxabs), std::abs(std::sqrt(squares) - l2) / std::max(l2, 1e-30),
                     std::abs(max_abs(got) - maxabs) / std::max(maxabs, 1e-30)});
  }

 private:
  const Tensor& at(const std::string& name) const {
    const auto it = tensors_.find(name);
    FRUGAL_CHECK_VALUE(it != tensors_.end(), "fixture: the reference has no ", name);
    return it->second;
  }
  double max_abs_of(const std::string& name) const {
    if (const auto whole = tensors_.find(name); whole != tensors_.end()) return max_abs(whole->second.to_vector<double>());
    return at(name + ":maxabs").item<double>();
  }

  std::map<std::string, Tensor> tensors_;
  double largest_gradient_ = 0;
};

}  // namespace

constexpr double kF32NoiseFactor = 8.0;  // see compare_with_reference

std::vector<ReferenceCheck> compare_with_reference(const nn::StateDict& results, const nn::StateDict& reference,
                                                   DType dtype) {
  const Reference expected(reference);
  FRUGAL_CHECK_VALUE(results.size() == expected.size(), "fixture: ", results.size(), " results against ", expected.size(),
                     " reference tensors");
  std::vector<ReferenceCheck> checks;
  for (const auto& [name, tensor] : results) {
    FRUGAL_CHECK_VALUE(expected.has(name), "fixture: the reference has no ", name);
    ReferenceCheck check{name, expected.error(tensor.to_vector<double>(), name), 1e-9, expected.zero_by_construction(name)};
    if (dtype == DType::f32) {
      const bool output = name == "logits" || name == "loss";
      // For a tensor zero by construction PyTorch's f32err is relative to noise, so it says nothing.
      // Otherwise f32err is one draw of rounding noise, large where a gradient is a sum that nearly
      // cancels; a different summation order draws again: OpenBLAS's AVX-512 kernels against its
      // SSE3 ones moved one such gradient (a late depthwise BatchNorm's bias, PyTorch's own error
      // 1.8%) from under 4x to 4.2x PyTorch's error, hence the factor 8.
      check.tolerance = check.zero_by_construction
                            ? 1e-3
                            : std::max(output ? 1e-4 : 1e-3, kF32NoiseFactor * expected.pytorch_f32_error(name));
    }
    checks.push_back(check);
  }
  return checks;
}

double relative_gradient_error(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  FRUGAL_CHECK_SHAPE(a.size() == b.size(), "relative_gradient_error: ", a.size(), " gradients against ", b.size());
  double error = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    FRUGAL_CHECK_SHAPE(a[i].size() == b[i].size(), "relative_gradient_error: gradient ", i, " has ", a[i].size(),
                       " values against ", b[i].size());
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      error += (a[i][j] - b[i][j]) * (a[i][j] - b[i][j]);
      norm += a[i][j] * a[i][j];
    }
  }
  return std::sqrt(error / norm);
}

}  // namespace frugal::test
