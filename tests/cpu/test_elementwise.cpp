// Elementwise ops on the CPU against hand-computed values, their backward against double-precision
// finite differences, broadcasting and its errors; then the CUDA kernels in the emulator against the
// CPU kernels under two schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/random.h"
#include "kernels/elementwise.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(std::vector<double> v, Shape shape = {}) { return from_vector(v, std::move(shape)); }
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("unary ops: hand-computed values") {
  const Tensor x = f64({-2.0, 0.0, 0.5, 4.0, 7.0});
  CHECK(values(neg(x)) == std::vector<double>{2.0, -0.0, -0.5, -4.0, -7.0});
  CHECK(values(abs(x)) == std::vector<double>{2.0, 0.0, 0.5, 4.0, 7.0});
  CHECK(values(relu(x)) == std::vector<double>{0.0, 0.0, 0.5, 4.0, 7.0});
  CHECK(values(relu6(x)) == std::vector<double>{0.0, 0.0, 0.5, 4.0, 6.0});
  CHECK(values(clamp(x, -1.0, 1.0)) == std::vector<double>{-1.0, 0.0, 0.5, 1.0, 1.0});
  CHECK(values(add(x, 1.5)) == std::vector<double>{-0.5, 1.5, 2.0, 5.5, 8.5});
  CHECK(values(sub(x, 1.0)) == std::vector<double>{-3.0, -1.0, -0.5, 3.0, 6.0});
  CHECK(values(mul(x, -2.0)) == std::vector<double>{4.0, -0.0, -1.0, -8.0, -14.0});
  CHECK(values(div(x, 4.0)) == std::vector<double>{-0.5, 0.0, 0.125, 1.0, 1.75});
  const Tensor p = f64({1.0, 4.0, 9.0});
  CHECK(values(sqrt(p)) == std::vector<double>{1.0, 2.0, 3.0});
  CHECK(values(rsqrt(p)) == std::vector<double>{1.0, 0.5, 1.0 / 3.0});
  CHECK(values(pow(p, 1.5)) == std::vector<double>{1.0, 8.0, 27.0});
  CHECK(values(exp(f64({0.0, 1.0})))[1] == doctest::Approx(2.718281828459045));
  CHECK(values(log(f64({1.0, std::exp(2.0)}))) == std::vector<double>{0.0, 2.0});
  CHECK(values(sigmoid(f64({0.0})))[0] == 0.5);
  CHECK(values(sigmoid(f64({2.0})))[0] == doctest::Approx(1.0 / (1.0 + std::exp(-2.0))));
  CHECK(values(tanh(f64({0.5})))[0] == doctest::Approx(std::tanh(0.5)));
}

TEST_CASE("NaN passes through activations, clamps and maximum, as in PyTorch") {
  const Tensor x = f64({kNaN});
  for (const Tensor& r : {relu(x), relu6(x), clamp(x, 0.0, 1.0), abs(x), maximum(x, f64({1.0})), minimum(f64({1.0}), x)})
    CHECK(std::isnan(values(r)[0]));
}

TEST_CASE("binary ops broadcast from the right") {
  const Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  const Tensor b = f64({10, 20, 30, 40}, {4, 1});
  const Tensor sum = add(a, b);
  CHECK(sum.shape() == Shape{2, 4, 3});
  CHECK(sum.to(DType::f64).at<double>({1, 2, 0}) == 4 + 30);
  CHECK(values(sub(f64({5}), f64({1, 2, 3}))) == std::vector<double>{4, 3, 2});
  CHECK(values(mul(f64({1, 2}, {2, 1}), f64({3, 4}, {1, 2}))) == std::vector<double>{3, 4, 6, 8});
  CHECK(values(div(f64({1, 2}), f64({4, 8}))) == std::vector<double>{0.25, 0.25});
  CHECK(values(maximum(f64({1, 5}), f64({3, 2}))) == std::vector<double>{3, 5});
  CHECK(values(minimum(f64({1, 5}), f64({3, 2}))) == std::vector<double>{1, 2});
  CHECK_THROWS_WITH_AS(add(zeros({2, 3}), zeros({4, 3})),
                       doctest::Contains("shapes [2, 3] and [4, 3] cannot be broadcast (dim 0: 2 vs 4)"), ShapeError);
  CHECK(add(zeros({0, 3}), zeros({1, 3})).shape() == Shape{0, 3});
}

TEST_CASE("strided and low-precision operands give what contiguous f32 gives, rounded") {
  const Tensor x = uniform({4, 5}, -3.0, 3.0), y = uniform({5, 4}, -3.0, 3.0).t();
  CHECK(values(mul(x, y)) == values(mul(x, y.contiguous())));
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor xs = x.to(dtype), ys = y.to(dtype);
    const Tensor expected = mul(xs.to(DType::f32), ys.to(DType::f32)).to(dtype);  // compute in float, round once
    CHECK(values(mul(xs, ys)) == values(expected));
    CHECK(values(sigmoid(xs)) == values(sigmoid(xs.to(DType::f32)).to(dtype)));
  }
}

TEST_CASE("where picks per element, with broadcasting") {
  const Tensor condition = from_vector<bool>({true, false, true}, {3});
  CHECK(values(where(condition, f64({1, 2, 3}), f64({-1}))) == std::vector<double>{1, -1, 3});
  CHECK_THROWS_AS(where(f64({1, 0, 1}), f64({1, 2, 3}), f64({0})), DTypeError);
}

TEST_CASE("in-place activations write through and bump the version") {
  Tensor x = f64({-1.0, 3.0, 8.0});
  const auto version = x.storage()->version();
  relu6_(x);
  CHECK(values(x) == std::vector<double>{0.0, 3.0, 6.0});
  CHECK(x.storage()->version() == version + 1);
  Tensor expanded = f64({1.0}).expand({4});
  CHECK_THROWS_AS(relu_(expanded), ValueError);
}

TEST_CASE("activation backward: masks at the edges and finite differences in double") {
  const Tensor x = f64({-1.0, 0.0, 3.0, 6.0, 7.0});
  const Tensor g = f64({1.0, 1.0, 1.0, 1.0, 1.0});
  CHECK(values(relu6_backward(g, x)) == std::vector<double>{0.0, 0.0, 1.0, 0.0, 0.0});  // 0 < x < 6 only
  CHECK(values(relu_backward(g, x)) == std::vector<double>{0.0, 0.0, 1.0, 1.0, 1.0});
  // A NaN input passes the gradient on, as in PyTorch (its mask compares false both ways).
  const Tensor nan = f64({std::nan(""), -1.0}), ones2 = f64({2.0, 2.0});
  CHECK(values(relu_backward(ones2, nan)) == std::vector<double>{2.0, 0.0});
  CHECK(values(relu6_backward(ones2, nan)) == std::vector<double>{2.0, 0.0});
  const std::vector<double> points{-2.0, -0.3, 0.1, 1.7};
  const double h = 1e-6;
  for (double p : points) {
    const Tensor at = f64({p}), grad = f64({0.7});
    const double numeric_sigmoid =
        (values(sigmoid(f64({p + h})))[0] - values(sigmoid(f64({p - h})))[0]) / (2 * h);
    CHECK(values(sigmoid_backward(grad, sigmoid(at)))[0] == doctest::Approx(0.7 * numeric_sigmoid).epsilon(1e-8));
    const double numeric_tanh = (values(tanh(f64({p + h})))[0] - values(tanh(f64({p - h})))[0]) / (2 * h);
    CHECK(values(tanh_backward(grad, tanh(at)))[0] == doctest::Approx(0.7 * numeric_tanh).epsilon(1e-8));
  }
}

TEST_CASE("elementwise ops name the op and both operands when they disagree") {
  CHECK_THROWS_WITH_AS(relu(zeros({2}, {.dtype = DType::i64})), doctest::Contains("needs a floating dtype, got i64"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(add(zeros({2}), zeros({2}, {.dtype = DType::f64})),
                       doctest::Contains("binary op: dtype mismatch: first operand (shape [2]) is f32, second (shape [2]) is f64"),
                       DTypeError);
  CHECK_THROWS_AS(add(Tensor(), zeros({2})), ValueError);
}
