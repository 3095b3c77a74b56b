// Softmax and log-softmax: hand-computed values, stability with large inputs, and their backward
// against double-precision finite differences.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace frugal;

TEST_CASE("softmax and log-softmax: values, rows summing to one, no overflow") {
  const Tensor x = from_vector<double>({1, 2, 3, 1000, 1000, 1000}, {2, 3});
  const auto p = softmax(x, 1).to_vector<double>();
  const double e = std::exp(1.0), z = 1 + e + e * e;
  CHECK(p[0] == doctest::Approx(1 / z));
  CHECK(p[2] == doctest::Approx(e * e / z));
  for (int i = 3; i < 6; ++i) CHECK(p[i] == doctest::Approx(1.0 / 3));  // exp(1000) would overflow unshifted
  CHECK(sum(softmax(x, 0), {0}).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(log_softmax(x, -1).to_vector<double>()[0] == doctest::Approx(1 - std::log(e * z)));
  CHECK_THROWS_AS(softmax(zeros({2, 0}), 1), ShapeError);
}

TEST_CASE("softmax backward and log-softmax backward against finite differences") {
  Generator g(9);
  const Tensor x = uniform({3, 4}, -2.0, 2.0, {.dtype = DType::f64}, &g);
  const Tensor upstream = uniform({3, 4}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  for (bool use_log : {false, true}) {
    auto loss = [&](const Tensor& input) {
      return sum(mul(upstream, use_log ? log_softmax(input, 1) : softmax(input, 1))).item<double>();
    };
    const Tensor y = use_log ? log_softmax(x, 1) : softmax(x, 1);
    const auto analytic = (use_log ? log_softmax_backward(upstream, y, 1) : softmax_backward(upstream, y, 1)).to_vector<double>();
    const auto base = x.to_vector<double>();
    for (std::size_t i = 0; i < base.size(); ++i) {
      auto plus = base, minus = base;
      plus[i] += 1e-6;
      minus[i] -= 1e-6;
      const double numeric = (loss(from_vector(plus, {3, 4})) - loss(from_vector(minus, {3, 4}))) / 2e-6;
      CHECK(analytic[i] == doctest::Approx(numeric).epsilon(1e-7));
    }
  }
}
