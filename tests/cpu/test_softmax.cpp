// Softmax and log-softmax: hand-computed values, stability with large inputs, and their backward
// against double-precision finite differences; the fused row kernel on strided input, along a dim
// that is not the last, with -inf entries, and in f16.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

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

TEST_CASE("fused softmax: strided input and a dim that is not the last match the row-major last-dim case") {
  Generator g(4);
  const Tensor x = uniform({3, 5, 4}, -3.0, 3.0, {.dtype = DType::f64}, &g);
  const Tensor strided = x.transpose(0, 2);  // [4, 5, 3], not contiguous
  CHECK(softmax(strided, 2).to_vector<double>() == softmax(strided.contiguous(), 2).to_vector<double>());
  // Along dim 1: the same numbers as moving dim 1 last by hand, and the result keeps x's shape.
  for (bool use_log : {false, true}) {
    const Tensor along = use_log ? log_softmax(x, 1) : softmax(x, 1);
    const Tensor by_hand = (use_log ? log_softmax(x.transpose(1, 2).contiguous(), 2) : softmax(x.transpose(1, 2).contiguous(), 2))
                               .transpose(1, 2);
    CHECK(along.shape() == x.shape());
    CHECK(along.to_vector<double>() == by_hand.to_vector<double>());
  }
  for (double total : sum(softmax(x, 1), {1}).to_vector<double>()) CHECK(total == doctest::Approx(1.0));
  // The backward along dim 0 against its composed formula y * (g - sum(g * y)).
  const Tensor upstream = uniform({3, 5, 4}, -1.0, 1.0, {.dtype = DType::f64}, &g);
  const Tensor y = softmax(x, 0);
  const auto fused = softmax_backward(upstream, y, 0).to_vector<double>();
  const auto composed = mul(y, sub(upstream, sum(mul(upstream, y), {0}, true))).to_vector<double>();
  for (std::size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == doctest::Approx(composed[i]).epsilon(1e-14));
  const auto log_fused = log_softmax_backward(upstream, log_softmax(x, 0), 0).to_vector<double>();
  const auto log_composed = sub(upstream, mul(exp(log_softmax(x, 0)), sum(upstream, {0}, true))).to_vector<double>();
  for (std::size_t i = 0; i < log_fused.size(); ++i) CHECK(log_fused[i] == doctest::Approx(log_composed[i]).epsilon(1e-14));
}

TEST_CASE("fused softmax: -inf entries get probability 0, a row of only -inf is NaN, as in PyTorch") {
  const double inf = std::numeric_limits<double>::infinity();
  const auto p = softmax(from_vector<double>({-inf, 0, 0, -inf, -inf, -inf}, {2, 3}), 1).to_vector<double>();
  CHECK(p[0] == 0.0);
  CHECK(p[1] == 0.5);
  CHECK(p[2] == 0.5);
  CHECK(std::isnan(p[3]));
}

TEST_CASE("fused softmax in f16: computed in float, returned in f16") {
  Generator g(6);
  const Tensor x = uniform({7, 33}, -8.0, 8.0, {.dtype = DType::f16}, &g);
  const Tensor exact = x.to(DType::f64);
  for (bool use_log : {false, true}) {
    const Tensor y = use_log ? log_softmax(x, 1) : softmax(x, 1);
    CHECK(y.dtype() == DType::f16);
    const auto got = y.to_vector<double>(), want = (use_log ? log_softmax(exact, 1) : softmax(exact, 1)).to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-3 * (1e-3 + std::abs(want[i])));
  }
  CHECK_THROWS_AS(softmax(zeros({2, 3}, {.dtype = DType::i64}), 1), DTypeError);
}
