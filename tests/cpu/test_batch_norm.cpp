// Batch norm on the CPU: a hand-computed two-channel example (batch statistics, the biased variance
// in the output, the unbiased one in the running variance), eval mode, no affine parameters, no
// running statistics, strided input, f16/bf16 input with f32 parameters, the fused ReLU6, finite
// differences in double for every gradient in both modes, and the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/cuda_status.h"
#include "core/random.h"
#include "kernels/batch_norm.h"
#include "kernels/batch_norm_ops.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(std::vector<double> v, Shape shape = {}) { return from_vector(v, std::move(shape)); }

void check_values(const Tensor& t, const std::vector<double>& expected) {
  const auto got = values(t);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(got[i] == doctest::Approx(expected[i]).epsilon(1e-12), "element ", i);
}

// x [2, 2, 1, 2]: channel 0 holds 1, 2, 3, 6 (mean 3, squared deviations 4 + 1 + 0 + 9 = 14, so
// biased variance 3.5 and unbiased 14/3); channel 1 holds 6, 9, 11, 14 (mean 10, 16 + 1 + 1 + 16 = 34,
// 8.5 and 34/3). With eps 0.5, var + eps is 4 and 9: invstd 1/2 and 1/3.
Tensor two_channels() { return f64({1, 2, 6, 9, 3, 6, 11, 14}, {2, 2, 1, 2}); }
constexpr double kEps = 0.5;
}  // namespace

TEST_CASE("batch norm training: a hand-computed two-channel example") {
  const Tensor x = two_channels(), weight = f64({2, -1}), bias = f64({1, 0.5});
  const Tensor running_mean = f64({0, 1}), running_var = f64({1, 1});
  const auto mean_version = running_mean.storage()->version(), var_version = running_var.storage()->version();
  const BatchNormOutput out = batch_norm_train(x, weight, bias, running_mean, running_var, 0.1, kEps);
  // channel 0: xhat = (x - 3) / 2, y = 2 xhat + 1; channel 1: xhat = (x - 10) / 3, y = 0.5 - xhat
  check_values(out.output, {-1, 0, 11.0 / 6, 5.0 / 6, 1, 4, 1.0 / 6, -5.0 / 6});
  CHECK(out.output.shape() == x.shape());
  check_values(out.save_mean, {3, 10});
  check_values(out.save_invstd, {0.5, 1.0 / 3});
  CHECK(out.save_mean.dtype() == DType::f64);
  // running = 0.9 running + 0.1 batch, the variance unbiased
  check_values(running_mean, {0.3, 1.9});
  check_values(running_var, {0.9 + 0.1 * 14 / 3, 0.9 + 0.1 * 34 / 3});
  CHECK(running_mean.storage()->version() == mean_version + 1);
  CHECK(running_var.storage()->version() == var_version + 1);

  // Fused ReLU6, with weight 4 on channel 0 so that one output (7) goes above 6 and two below 0.
  const BatchNormOutput fused = batch_norm_train(x, f64({4, -1}), bias, Tensor(), Tensor(), 0.1, kEps, true);
  check_values(fused.output, {0, 0, 11.0 / 6, 5.0 / 6, 1, 6, 1.0 / 6, 0});

  // Without affine parameters the output is xhat; without running statistics nothing else changes.
  check_values(batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, kEps).output,
               {-1, -0.5, -4.0 / 3, -1.0 / 3, 0, 1.5, 1.0 / 3, 4.0 / 3});
  check_values(batch_norm_train(x, weight, bias, Tensor(), Tensor(), 0.1, kEps).output, values(out.output));
}

TEST_CASE("batch norm eval: normalises with the running statistics and leaves them alone") {
  const Tensor x = two_channels(), weight = f64({2, -1}), bias = f64({1, 0.5});
  const Tensor running_mean = f64({1, 2}), running_var = f64({3.5, 8.5});
  const auto version = running_mean.storage()->version();
  // channel 0: xhat = (x - 1) / 2, y = 2 xhat + 1; channel 1: xhat = (x - 2) / 3, y = 0.5 - xhat
  check_values(batch_norm_eval(x, weight, bias, running_mean, running_var, kEps),
               {1, 2, -5.0 / 6, -11.0 / 6, 3, 6, -2.5, -3.5});
  check_values(batch_norm_eval(x, weight, bias, running_mean, running_var, kEps, true), {1, 2, 0, 0, 3, 6, 0, 0});
  check_values(batch_norm_eval(x, Tensor(), Tensor(), running_mean, running_var, kEps),
               {0, 0.5, 4.0 / 3, 7.0 / 3, 1, 2.5, 3, 4});
  check_values(running_mean, {1, 2});
  CHECK(running_mean.storage()->version() == version);
  check_values(batch_norm_invstd(running_var, kEps), {0.5, 1.0 / 3});
  const Tensor empty_batch = zeros({0, 2, 3}, {.dtype = DType::f64});
  CHECK(batch_norm_eval(empty_batch, weight, bias, running_mean, running_var, kEps).shape() == Shape{0, 2, 3});
  // No channels at all: training has nothing to compute either, and calls no kernel.
  const Tensor no_channels = zeros({4, 0, 3, 3}, {.dtype = DType::f64}), none = zeros({0}, {.dtype = DType::f64});
  const BatchNormOutput trained = batch_norm_train(no_channels, none, none, none, none, 0.1, kEps);
  CHECK(trained.output.shape() == Shape{4, 0, 3, 3});
  CHECK(trained.save_mean.numel() == 0);
}

TEST_CASE("batch norm reads strided input and [N, C] input") {
  const Tensor x = uniform({3, 4, 5, 2}, -2.0, 2.0, {.dtype = DType::f64}).permute({0, 1, 3, 2});  // [3, 4, 2, 5]
  REQUIRE_FALSE(x.is_contiguous());
  const Tensor w = uniform({4}, 0.5, 2.0, {.dtype = DType::f64}), b = uniform({4}, -1.0, 1.0, {.dtype = DType::f64});
  const BatchNormOutput strided = batch_norm_train(x, w, b, Tensor(), Tensor(), 0.1, 1e-5);
  const BatchNormOutput packed = batch_norm_train(x.contiguous(), w, b, Tensor(), Tensor(), 0.1, 1e-5);
  CHECK(values(strided.output) == values(packed.output));
  CHECK(strided.output.is_contiguous());
  const Tensor g = uniform(x.shape(), -1.0, 1.0, {.dtype = DType::f64});
  const Tensor strided_grad = g.transpose(2, 3).contiguous().transpose(2, 3);  // g's values, g's shape, other strides
  const BatchNormGrads from_strided = batch_norm_backward(strided_grad, x, w, strided.save_mean, strided.save_invstd, true);
  const BatchNormGrads from_packed = batch_norm_backward(g, x.contiguous(), w, packed.save_mean, packed.save_invstd, true);
  CHECK(values(from_strided.input) == values(from_packed.input));

  // [N, C]: channel 0 holds 0, 4 (mean 2, biased variance 4), channel 1 holds 1, 3 (mean 2, variance 1)
  const BatchNormOutput flat = batch_norm_train(f64({0, 1, 4, 3}, {2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 0.0);
  check_values(flat.output, {-1, -1, 1, 1});
}

TEST_CASE("batch norm: f16 and bf16 input with f32 (or 16-bit) parameters compute in float and round once") {
  // Both sides on the reference loops: f32 input would otherwise run the fast ones, whose sums round
  // differently (tests/cpu/test_batch_norm_fast.cpp compares the two).
  set_batch_norm_cpu_reference(true);
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const Tensor x = uniform({4, 3, 5, 5}, -3.0, 5.0, {.dtype = dtype});
    const Tensor w = uniform({3}, 0.5, 2.0), b = uniform({3}, -1.0, 1.0);
    const Tensor low_mean = zeros({3}), low_var = ones({3}), reference_mean = zeros({3}), reference_var = ones({3});
    const BatchNormOutput low = batch_norm_train(x, w, b, low_mean, low_var, 0.1, 1e-5, true);
    const BatchNormOutput reference = batch_norm_train(x.to(DType::f32), w, b, reference_mean, reference_var, 0.1, 1e-5, true);
    CHECK(low.output.dtype() == dtype);
    CHECK(low.save_mean.dtype() == DType::f32);
    CHECK(values(low.output) == values(reference.output.to(dtype)));
    CHECK(values(low.save_invstd) == values(reference.save_invstd));
    CHECK(values(low_var) == values(reference_var));

    // Parameters in the input's own dtype are read through f32 copies and written back rounded.
    const Tensor rm = zeros({3}, {.dtype = dtype}), rv = ones({3}, {.dtype = dtype});
    const BatchNormOutput all16 = batch_norm_train(x, w.to(dtype), b.to(dtype), rm, rv, 0.1, 1e-5);
    const Tensor rm32 = zeros({3}), rv32 = ones({3});
    const BatchNormOutput widened =
        batch_norm_train(x.to(DType::f32), w.to(dtype).to(DType::f32), b.to(dtype).to(DType::f32), rm32, rv32, 0.1, 1e-5);
    CHECK(values(all16.output) == values(widened.output.to(dtype)));
    CHECK(values(rv) == values(rv32.to(dtype)));

    const Tensor g = uniform(x.shape(), -1.0, 1.0, {.dtype = dtype});
    const BatchNormGrads grads = batch_norm_backward(g, x, w, low.save_mean, low.save_invstd, true, low.output);
    const BatchNormGrads expected = batch_norm_backward(g.to(DType::f32), x.to(DType::f32), w, reference.save_mean,
                                                        reference.save_invstd, true, low.output.to(DType::f32));
    CHECK(values(grads.input) == values(expected.input.to(dtype)));
    CHECK(values(grads.weight) == values(expected.weight));
    CHECK(grads.weight.dtype() == DType::f32);
  }
  set_batch_norm_cpu_reference(false);
}

namespace {
struct Params {
  Tensor x, weight, bias;
};

// Central differences of L = sum(r * forward(p)) for every element of p.x, p.weight and p.bias,
// against the analytic gradients.
void check_finite_differences(const Params& p, const Tensor& r, const std::function<Tensor(const Params&)>& forward,
                              const BatchNormGrads& grads) {
  constexpr double h = 1e-6;
  const auto weights = values(r);
  auto loss = [&](const Params& q) {
    const auto y = values(forward(q));
    double sum = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += weights[i] * y[i];
    return sum;
  };
  auto check = [&](Tensor Params::*member, const Tensor& analytic, const char* what) {
    const auto a = values(analytic);
    for (std::int64_t i = 0; i < (p.*member).numel(); ++i) {
      Params plus = p, minus = p;
      plus.*member = (p.*member).clone();
      minus.*member = (p.*member).clone();
      (plus.*member).data<double>()[i] += h;
      (minus.*member).data<double>()[i] -= h;
      const double numeric = (loss(plus) - loss(minus)) / (2 * h);
      CHECK_MESSAGE(a[i] == doctest::Approx(numeric).epsilon(1e-6), what, " element ", i);
    }
  };
  check(&Params::x, grads.input, "input");
  check(&Params::weight, grads.weight, "weight");
  check(&Params::bias, grads.bias, "bias");
}

// Inputs whose outputs keep clear of ReLU6's corners (0 and 6), where the function has no
// derivative, yet fall on both sides of them, so the gate is exercised.
Params relu6_params(Generator& generator) {
  return {uniform({3, 2, 2, 3}, -2.0, 2.0, {.dtype = DType::f64}, &generator),
          uniform({2}, 3.0, 4.0, {.dtype = DType::f64}, &generator), f64({3.0, 2.5})};
}
void require_clear_of_corners(const Tensor& y) {
  int clamped_low = 0, clamped_high = 0;
  for (double v : values(y)) {
    REQUIRE((std::abs(v) > 1e-3 && std::abs(v - 6) > 1e-3));
    clamped_low += v < 0;
    clamped_high += v > 6;
  }
  REQUIRE((clamped_low > 0 && clamped_high > 0));
}
}  // namespace

TEST_CASE("batch norm backward, training: finite differences in double, with and without the fused ReLU6") {
  Generator generator(5);
  const Params p = relu6_params(generator);
  require_clear_of_corners(batch_norm_train(p.x, p.weight, p.bias, Tensor(), Tensor(), 0.1, 1e-5).output);
  const Tensor r = uniform(p.x.shape(), -1.0, 1.0, {.dtype = DType::f64}, &generator);
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    auto forward = [&](const Params& q) {
      return batch_norm_train(q.x, q.weight, q.bias, Tensor(), Tensor(), 0.1, 1e-5, fused).output;
    };
    const BatchNormOutput out = batch_norm_train(p.x, p.weight, p.bias, Tensor(), Tensor(), 0.1, 1e-5, fused);
    const BatchNormGrads grads =
        batch_norm_backward(r, p.x, p.weight, out.save_mean, out.save_invstd, true, fused ? out.output : Tensor());
    check_finite_differences(p, r, forward, grads);
  }
}

TEST_CASE("batch norm backward, eval: finite differences in double, with and without the fused ReLU6") {
  Generator generator(6);
  const Params p = relu6_params(generator);
  const Tensor running_mean = f64({0.2, -0.1}), running_var = f64({1.5, 0.8});
  require_clear_of_corners(batch_norm_eval(p.x, p.weight, p.bias, running_mean, running_var, 1e-5));
  const Tensor r = uniform(p.x.shape(), -1.0, 1.0, {.dtype = DType::f64}, &generator);
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    auto forward = [&](const Params& q) {
      return batch_norm_eval(q.x, q.weight, q.bias, running_mean, running_var, 1e-5, fused);
    };
    const Tensor y = forward(p);
    const BatchNormGrads grads = batch_norm_backward(r, p.x, p.weight, running_mean, batch_norm_invstd(running_var, 1e-5),
                                                     false, fused ? y : Tensor());
    check_finite_differences(p, r, forward, grads);
  }
  // Without affine parameters there are no parameter gradients.
  const BatchNormGrads plain = batch_norm_backward(r, p.x, Tensor(), running_mean, batch_norm_invstd(running_var, 1e-5), false);
  CHECK_FALSE(plain.weight.defined());
  CHECK_FALSE(plain.bias.defined());
}

TEST_CASE("ChannelWalk visits a channel's elements as (n, s) with additions only") {
  for (const BatchNormShape shape : {BatchNormShape{7, 2, 5}, BatchNormShape{9, 3, 1}, BatchNormShape{2, 1, 300}})
    for (std::int64_t step : {1, 3, 7, 256})
      for (std::int64_t first = 0; first < std::min<std::int64_t>(step, 4); ++first) {
        std::int64_t r = first;
        for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance(), r += step) {
          REQUIRE(w.n == r / shape.spatial);
          REQUIRE(w.s == r % shape.spatial);
        }
        CHECK(r >= shape.per_channel());
      }
}

TEST_CASE("batch norm: the implementation switch, and the CPU's one implementation") {
  // The library by default where the build links cuDNN; frugal's kernels where it cannot (a build
  // without CUDA, or the emulated CUDA build: core/cuda_status.h's kCudaLibraries).
  const BatchNormImpl by_default = kCudaLibraries ? BatchNormImpl::cudnn : BatchNormImpl::native;
  CHECK(batch_norm_impl() == by_default);
  CHECK(batch_norm_impl_name(BatchNormImpl::native) == "native");
  const Tensor x = two_channels();
  const Tensor before = batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, kEps).output;
  set_batch_norm_impl(BatchNormImpl::native);
  CHECK(batch_norm_impl() == BatchNormImpl::native);
  CHECK(values(batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, kEps).output) == values(before));
  set_batch_norm_impl(by_default);
}

TEST_CASE("batch norm names the op and the operands on bad input") {
  const Tensor x = two_channels(), w = f64({1, 1}), b = f64({0, 0}), rm = f64({0, 0}), rv = f64({1, 1});
  CHECK_THROWS_WITH_AS(batch_norm_train(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5),
                       doctest::Contains("expected more than 1 value per channel when training, got input of shape [1, 3]"),
                       ValueError);
  CHECK_THROWS_AS(batch_norm_train(zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5), ValueError);
  CHECK(batch_norm_eval(zeros({1, 3}), Tensor(), Tensor(), zeros({3}), ones({3}), 1e-5).shape() == Shape{1, 3});
  CHECK_THROWS_WITH_AS(batch_norm_train(x, f64({1, 1, 1}), f64({0, 0, 0}), rm, rv, 0.1, 1e-5),
                       doctest::Contains("weight of shape [3] does not match the 2 channels of an input of shape [2, 2, 1, 2]"),
                       ShapeError);
  CHECK_THROWS_AS(batch_norm_eval(x, w, b, f64({0}), rv, 1e-5), ShapeError);
  CHECK_THROWS_AS(batch_norm_train(x, w.to(DType::f32), b, rm, rv, 0.1, 1e-5), DTypeError);
  CHECK_THROWS_AS(batch_norm_train(x.to(DType::f32), w, b, Tensor(), Tensor(), 0.1, 1e-5), DTypeError);
  CHECK_THROWS_AS(batch_norm_train(x.to(DType::f32), w.to(DType::f16), b.to(DType::f16), Tensor(), Tensor(), 0.1, 1e-5),
                  DTypeError);  // 16-bit parameters only with 16-bit input
  CHECK_THROWS_AS(batch_norm_train(x.to(DType::f16), w, b, Tensor(), Tensor(), 0.1, 1e-5), DTypeError);  // f64 with f16
  CHECK_THROWS_AS(batch_norm_train(x.to(DType::i64), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5), DTypeError);
  CHECK_THROWS_AS(batch_norm_train(f64({1, 2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5), ShapeError);
  CHECK_THROWS_AS(batch_norm_train(x, w, Tensor(), rm, rv, 0.1, 1e-5), ValueError);   // weight without bias
  CHECK_THROWS_AS(batch_norm_train(x, w, b, rm, Tensor(), 0.1, 1e-5), ValueError);    // mean without variance
  CHECK_THROWS_AS(batch_norm_eval(x, w, b, Tensor(), Tensor(), 1e-5), ValueError);    // eval needs running statistics
  CHECK_THROWS_AS(batch_norm_train(x, w, b, rm, rv, 0.1, -1.0), ValueError);          // negative eps
  CHECK_THROWS_AS(batch_norm_train(Tensor(), w, b, rm, rv, 0.1, 1e-5), ValueError);
  const BatchNormOutput out = batch_norm_train(x, w, b, rm, rv, 0.1, 1e-5);
  CHECK_THROWS_AS(batch_norm_backward(zeros({2, 2, 2, 1}, {.dtype = DType::f64}), x, w, out.save_mean, out.save_invstd, true),
                  ShapeError);
  CHECK_THROWS_AS(batch_norm_backward(zeros(x.shape()), x, w, out.save_mean, out.save_invstd, true), DTypeError);
  CHECK_THROWS_AS(batch_norm_backward(x, x, w, f64({0, 0, 0}), out.save_invstd, true), ShapeError);
  CHECK_THROWS_AS(batch_norm_backward(x, x, w, out.save_mean, out.save_invstd, true, zeros({8}, {.dtype = DType::f64})),
                  ShapeError);
  CHECK_THROWS_AS(batch_norm_backward(x, x, w, Tensor(), out.save_invstd, true), ValueError);
}
