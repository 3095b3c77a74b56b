// Reductions on the CPU against hand-computed values and PyTorch's semantics, and their accuracy
// in f32. The CUDA kernel is compared with these in tests/cpu/test_kernels_emulated.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/random.h"
#include "kernels/reduce.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(std::vector<double> v, Shape shape = {}) { return from_vector(v, std::move(shape)); }
}  // namespace

TEST_CASE("sum, mean, var over chosen dims, with and without keepdim") {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(values(sum(x)) == std::vector<double>{21});
  CHECK(sum(x).dim() == 0);
  CHECK(values(sum(x, {0})) == std::vector<double>{5, 7, 9});
  CHECK(values(sum(x, {-1})) == std::vector<double>{6, 15});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  CHECK(values(mean(x, {1})) == std::vector<double>{2, 5});
  CHECK(values(mean(x.t(), {0})) == std::vector<double>{2, 5});  // strided input
  CHECK(values(var(x, {1})) == std::vector<double>{1, 1});          // unbiased: divides by n - 1
  CHECK(values(var(x, {1}, 0)) == std::vector<double>{2.0 / 3, 2.0 / 3});  // biased, as BatchNorm normalises
  CHECK(values(var(x)) == std::vector<double>{3.5});
  const Tensor cube = arange(24).view({2, 3, 4}).to(DType::f64);
  CHECK(values(sum(cube, {0, 2})) == std::vector<double>{60, 92, 124});
  CHECK_THROWS_WITH_AS(sum(cube, {1, -2}), doctest::Contains("dim 1 appears twice"), IndexError);
  CHECK_THROWS_AS(sum(cube, {3}), IndexError);
  CHECK_THROWS_AS(sum(zeros({2}, {.dtype = DType::i32})), DTypeError);
}

TEST_CASE("reductions of nothing: sums are 0, mean and var NaN, max an error") {
  const Tensor nothing = zeros({3, 0});
  CHECK(values(sum(nothing, {1})) == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(values(mean(nothing, {1}))[0]));
  CHECK(std::isnan(values(var(f64({5.0})))[0]));  // one element has no unbiased variance
  CHECK_THROWS_AS(max(nothing, 1), ShapeError);
  CHECK(sum(nothing, {0}).shape() == Shape{0});
}

TEST_CASE("max and argmax: first occurrence, NaN wins") {
  const Tensor x = f64({3, 7, 7, 1, -2, 9}, {2, 3});
  const MaxResult r = max(x, 1);
  CHECK(values(r.values) == std::vector<double>{7, 9});
  CHECK(r.indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});  // the first 7
  CHECK(r.indices.dtype() == DType::i64);
  CHECK(argmax(x, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1});
  CHECK(values(max(x)) == std::vector<double>{9});
  const Tensor with_nan = f64({1, std::numeric_limits<double>::quiet_NaN(), 5});
  CHECK(std::isnan(values(max(with_nan))[0]));
  CHECK(argmax(with_nan, 0).item<std::int64_t>() == 1);
}

TEST_CASE("accumulation in double: an f32 sum of a million small values stays exact") {
  // 2^20 values of 0.1f: a float accumulator drifts by about 1e-3 relative; a compensated double one
  // returns the correctly rounded f32 of the exact sum.
  const Tensor x = full({1 << 20}, 0.1, {.dtype = DType::f32});
  const double exact = static_cast<double>(0.1f) * (1 << 20);
  CHECK(values(sum(x))[0] == static_cast<double>(static_cast<float>(exact)));
  CHECK(values(mean(x))[0] == static_cast<double>(0.1f));
  // Welford keeps the variance of large, close values: naive E[x^2] - E[x]^2 would cancel to noise.
  const Tensor shifted = f64({1e9 - 1, 1e9, 1e9 + 1});
  CHECK(values(var(shifted, {}, 0))[0] == doctest::Approx(2.0 / 3.0).epsilon(1e-6));
}
