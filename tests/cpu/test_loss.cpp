// Cross-entropy on the CPU: hand-computed losses (label smoothing, ignore_index, every reduction),
// agreement with the composed definition, the backward against double-precision finite
// differences, huge logits, f16/bf16 logits, count_correct, and the errors for bad input.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/loss.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(std::vector<double> v, Shape shape) { return from_vector(v, std::move(shape)); }
Tensor classes(std::vector<std::int64_t> v) { return from_vector(v); }
Tensor scalar(double value, DType dtype = DType::f64) { return full({}, value, {.dtype = dtype}); }

// f(logits) = sum_i grad_i * loss_i (or grad * loss): the scalar whose gradient cross_entropy_backward gives.
double objective(const Tensor& logits, const Tensor& targets, const Tensor& grad, const CrossEntropyOptions& options) {
  const auto loss = values(cross_entropy(logits, targets, options)), g = values(grad);
  double total = 0;
  for (std::size_t i = 0; i < loss.size(); ++i) total += g[i] * loss[i];
  return total;
}
}  // namespace

TEST_CASE("cross-entropy: hand-computed losses, smoothing, ignore_index, every reduction") {
  // Rows [1,2,3] and [3,2,1] share log-sum-exp 3 + l, with l = log(1 + e^-1 + e^-2); [1,1,1] has 1 + log 3.
  const Tensor logits = f64({1, 2, 3, 1, 1, 1, 0, 0, 5, 3, 2, 1}, {4, 3});
  const Tensor targets = classes({2, 0, -100, 1});
  const double l = std::log(1 + std::exp(-1.0) + std::exp(-2.0)), l3 = std::log(3.0);
  const std::vector<double> plain{l, l3, 0, 1 + l};
  // eps = 0.1: 0.9 * (-log p_t) + 0.1 * mean_c(-log p_c); the rows' mean logit is 2 and 1.
  const std::vector<double> smoothed{0.9 * l + 0.1 * (1 + l), l3, 0, 0.9 * (1 + l) + 0.1 * (1 + l)};
  for (double eps : {0.0, 0.1}) {
    CAPTURE(eps);
    const std::vector<double>& expected = eps == 0.0 ? plain : smoothed;
    const auto none = values(cross_entropy(logits, targets, {.reduction = LossReduction::none, .label_smoothing = eps}));
    REQUIRE(none.size() == 4);
    for (int i = 0; i < 4; ++i) CHECK(none[i] == doctest::Approx(expected[i]).epsilon(1e-14));
    const double total = expected[0] + expected[1] + expected[3];
    const Tensor sum = cross_entropy(logits, targets, {.reduction = LossReduction::sum, .label_smoothing = eps});
    CHECK(sum.dim() == 0);
    CHECK(sum.item<double>() == doctest::Approx(total).epsilon(1e-14));
    CHECK(cross_entropy(logits, targets, {.label_smoothing = eps}).item<double>() == doctest::Approx(total / 3).epsilon(1e-14));
  }
  // ignore_index may name a real class: rows with target 0 then count for nothing.
  CHECK(values(cross_entropy(logits, classes({2, 0, 2, 0}), {.reduction = LossReduction::none, .ignore_index = 0}))[1] == 0.0);
  CHECK(cross_entropy(logits, classes({2, 0, 2, 0}), {.ignore_index = 0}).item<double>() ==
        doctest::Approx((l + std::log(1 + std::exp(-5.0) * 2)) / 2));
}

TEST_CASE("cross-entropy: every row ignored gives a NaN mean, a zero sum and zero losses") {
  const Tensor logits = f64({1, 2, 3, 4}, {2, 2});
  const Tensor targets = classes({-100, -100});
  CHECK(std::isnan(cross_entropy(logits, targets).item<double>()));
  CHECK(cross_entropy(logits, targets, {.reduction = LossReduction::sum}).item<double>() == 0.0);
  CHECK(values(cross_entropy(logits, targets, {.reduction = LossReduction::none})) == std::vector<double>{0, 0});
  CHECK(values(cross_entropy_backward(scalar(1.0), logits, targets)) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("cross-entropy agrees with -(1 - eps) * gather(log_softmax) - eps * mean(log_softmax)") {
  Generator g(5);
  const std::int64_t n = 6, c = 11;
  const Tensor logits = uniform({n, c}, -6.0, 6.0, {.dtype = DType::f64}, &g);
  const Tensor targets = randint(0, c, {n}, {.dtype = DType::i64}, &g);
  const auto lsm = values(log_softmax(logits, 1)), mean_lsm = values(mean(log_softmax(logits, 1), {1}));
  const auto t = targets.to_vector<std::int64_t>();
  for (double eps : {0.0, 0.25}) {
    const auto got = values(cross_entropy(logits, targets, {.reduction = LossReduction::none, .label_smoothing = eps}));
    for (std::int64_t i = 0; i < n; ++i)
      CHECK(got[i] == doctest::Approx(-(1 - eps) * lsm[i * c + t[i]] - eps * mean_lsm[i]).epsilon(1e-13));
  }
}

TEST_CASE("cross-entropy reads strided logits and targets like contiguous ones") {
  Generator g(8);
  const Tensor logits = uniform({9, 5}, -3.0, 3.0, {}, &g).t();                       // [5, 9], transposed
  const Tensor targets = randint(0, 9, {10}, {.dtype = DType::i64}, &g).slice(0, 0, 10, 2);  // stride 2
  for (LossReduction reduction : {LossReduction::none, LossReduction::mean}) {
    const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = 0.1};
    CHECK(values(cross_entropy(logits, targets, options)) == values(cross_entropy(logits.contiguous(), targets.contiguous(), options)));
    const Tensor grad = reduction == LossReduction::none ? uniform({5}, -1.0, 1.0, {}, &g) : scalar(0.5, DType::f32);
    CHECK(values(cross_entropy_backward(grad, logits, targets, options)) ==
          values(cross_entropy_backward(grad, logits.contiguous(), targets.contiguous(), options)));
  }
}

TEST_CASE("cross-entropy backward against finite differences: every reduction, smoothing, ignored rows") {
  Generator g(13);
  const Tensor logits = uniform({4, 5}, -2.0, 2.0, {.dtype = DType::f64}, &g);
  const Tensor targets = classes({3, -100, 0, 4});
  const auto base = values(logits);
  for (LossReduction reduction : {LossReduction::none, LossReduction::mean, LossReduction::sum})
    for (double eps : {0.0, 0.2}) {
      CAPTURE(static_cast<int>(reduction));
      CAPTURE(eps);
      const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
      const Tensor grad = reduction == LossReduction::none ? uniform({4}, -1.0, 1.0, {.dtype = DType::f64}, &g) : scalar(0.7);
      const auto analytic = values(cross_entropy_backward(grad, logits, targets, options));
      for (std::size_t i = 0; i < base.size(); ++i) {
        auto plus = base, minus = base;
        plus[i] += 1e-6;
        minus[i] -= 1e-6;
        const double numeric =
            (objective(f64(plus, {4, 5}), targets, grad, options) - objective(f64(minus, {4, 5}), targets, grad, options)) / 2e-6;
        CHECK(analytic[i] == doctest::Approx(numeric).epsilon(1e-7));
      }
      for (std::size_t i = 5; i < 10; ++i) CHECK(analytic[i] == 0.0);  // row 1 is ignored
    }
}

TEST_CASE("cross-entropy of huge logits (1e4) stays finite and exact") {
  const double l = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    const Tensor logits = f64({1e4, 0, -1e4, 1e4, 1e4 + 1, 1e4 - 1}, {2, 3}).to(dtype);
    const Tensor targets = classes({1, 0});
    for (double eps : {0.0, 0.1}) {  // for these rows smoothing happens to change nothing (see the hand-computed case)
      const auto loss = values(cross_entropy(logits, targets, {.reduction = LossReduction::none, .label_smoothing = eps}));
      CHECK(loss[0] == doctest::Approx(1e4));
      CHECK(loss[1] == doctest::Approx(1 + l).epsilon(1e-6));
    }
    // Row 0: softmax (1, 0, 0) against target 1; row 1's largest logit is its target 0's neighbour.
    const auto grad = values(cross_entropy_backward(scalar(1.0, dtype), logits, targets));
    const double e = std::exp(1.0), z = 1 + e + 1 / e;
    const std::vector<double> expected{0.5, -0.5, 0, (1 / z - 1) / 2, e / z / 2, 1 / e / z / 2};
    for (int i = 0; i < 6; ++i) CHECK(grad[i] == doctest::Approx(expected[i]).epsilon(1e-6));
  }
}

TEST_CASE("cross-entropy of f16 and bf16 logits: computed in float, returned in their dtype") {
  Generator g(3);
  const Tensor targets = classes({0, 6, -100, 2, 5});
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const Tensor logits = uniform({5, 7}, -4.0, 4.0, {.dtype = dtype}, &g);
    const Tensor exact = logits.to(DType::f64);  // the same values, computed in double
    const double tolerance = dtype == DType::f16 ? 2e-3 : 1e-2;
    for (LossReduction reduction : {LossReduction::none, LossReduction::mean}) {
      const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = 0.1};
      const Tensor loss = cross_entropy(logits, targets, options);
      CHECK(loss.dtype() == dtype);
      const auto got = values(loss), want = values(cross_entropy(exact, targets, options));
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tolerance));
      const Tensor grad = reduction == LossReduction::none ? ones({5}, {.dtype = dtype}) : scalar(1.0, dtype);
      const auto dx = values(cross_entropy_backward(grad, logits, targets, options));
      const auto dx_exact = values(cross_entropy_backward(grad.to(DType::f64), exact, targets, options));
      for (std::size_t i = 0; i < dx.size(); ++i) CHECK(std::abs(dx[i] - dx_exact[i]) <= tolerance * (1e-2 + std::abs(dx_exact[i])));
    }
  }
}

TEST_CASE("count_correct counts rows whose argmax is the target") {
  // argmax 2, 0 (target 1: wrong), 0 (a tie: the first), 1 (ignored with -100: never counted).
  const Tensor logits = f64({0, 1, 2, 5, 1, 1, 1, 1, 1, 0, 3, 0}, {4, 3});
  const Tensor correct = count_correct(logits, classes({2, 1, 0, -100}));
  CHECK(correct.dim() == 0);
  CHECK(correct.dtype() == DType::i64);
  CHECK(correct.item<std::int64_t>() == 2);
  CHECK(count_correct(logits, classes({2, 0, 0, 1})).item<std::int64_t>() == 4);
}

namespace {
// Serves "cuda:0" from host memory, so a CPU-only build can hold a tensor that claims to live on a
// GPU; the device checks reject it before anything reads it.
class PretendCudaAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cuda(0); }
  std::string_view name() const override { return "pretend-cuda"; }

 protected:
  void* raw_allocate(std::size_t bytes, Stream) override { return ::operator new(bytes); }
  void raw_deallocate(void* ptr, std::size_t) noexcept override { ::operator delete(ptr); }
};
}  // namespace

TEST_CASE("cross-entropy rejects bad targets, dtypes, shapes, options and devices") {
  const Tensor logits = zeros({3, 4});
  // A bad target names its row and its value, in both directions.
  CHECK_THROWS_WITH_AS(cross_entropy(logits, classes({0, 3, 4})), doctest::Contains("target 4 of row 2"), IndexError);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, classes({0, -1, 7})), doctest::Contains("target -1 of row 1"), IndexError);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(scalar(1.0, DType::f32), logits, classes({9, 0, 0})),
                       doctest::Contains("target 9 of row 0"), IndexError);
  CHECK_THROWS_AS(cross_entropy(logits, classes({0, 1, 5}), {.reduction = LossReduction::none}), IndexError);
  CHECK_THROWS_AS(cross_entropy(logits, zeros({3}, {.dtype = DType::i32})), DTypeError);
  CHECK_THROWS_AS(cross_entropy(zeros({3, 4}, {.dtype = DType::i64}), classes({0, 1, 2})), DTypeError);
  CHECK_THROWS_AS(cross_entropy(zeros({4}), classes({0})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(logits, classes({0, 1})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(logits, zeros({3, 1}, {.dtype = DType::i64})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(zeros({3, 0}), classes({0, 1, 2})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(logits, classes({0, 1, 2}), {.label_smoothing = -0.1}), ValueError);
  CHECK_THROWS_AS(cross_entropy(logits, classes({0, 1, 2}), {.label_smoothing = 1.5}), ValueError);
  CHECK_THROWS_AS(cross_entropy_backward(zeros({3}), logits, classes({0, 1, 2})), ShapeError);  // mean wants 0-dim
  CHECK_THROWS_AS(cross_entropy_backward(scalar(1.0, DType::f32), logits, classes({0, 1, 2}), {.reduction = LossReduction::none}),
                  ShapeError);
  CHECK_THROWS_AS(cross_entropy_backward(scalar(1.0), logits, classes({0, 1, 2})), DTypeError);  // f64 grad, f32 logits
  PretendCudaAllocator pretend;
  set_allocator(Device::cuda(0), &pretend);
  {
    const Tensor on_gpu = empty({3}, {.dtype = DType::i64, .device = Device::cuda(0)});
    CHECK_THROWS_AS(cross_entropy(logits, on_gpu), DeviceError);
    CHECK_THROWS_AS(count_correct(logits, on_gpu), DeviceError);
  }
  set_allocator(Device::cuda(0), nullptr);
}
