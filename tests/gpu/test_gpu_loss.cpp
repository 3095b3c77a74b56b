// GPU suite: the fused softmax and cross-entropy kernels on cuda:0 against the CPU, on random odd
// shapes (rows of 7, 1001 and 3000 classes), strided inputs, every floating dtype, every reduction;
// and the IndexError a bad target raises through the CUDA kernels' flag.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/loss.h"
#include "kernels/softmax.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

namespace {
// Rows sum thousands of exponentials in float on both sides, in different orders.
Tolerance row_tolerance(DType dtype) { return dtype == DType::f32 ? Tolerance{2e-5, 2e-5} : elementwise_tolerance(dtype); }
}  // namespace

TEST_CASE("fused softmax on the GPU matches the CPU") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = uniform({3001, 7, 3}, -10.0, 10.0, {.dtype = dtype}).transpose(0, 2);  // [3, 7, 3001], strided
    const Tensor g = uniform({3, 7, 3001}, -1.0, 1.0, {.dtype = dtype});
    const Tensor xg = x.to(kGpu), gg = g.to(kGpu);
    for (std::int64_t dim : {2, 1, 0}) {
      CAPTURE(dim);
      check_close(softmax(xg, dim), softmax(x, dim), row_tolerance(dtype), "softmax");
      check_close(log_softmax(xg, dim), log_softmax(x, dim), row_tolerance(dtype), "log_softmax");
      const Tensor y = softmax(x, dim), log_y = log_softmax(x, dim);
      check_close(softmax_backward(gg, y.to(kGpu), dim), softmax_backward(g, y, dim), row_tolerance(dtype), "softmax_backward");
      check_close(log_softmax_backward(gg, log_y.to(kGpu), dim), log_softmax_backward(g, log_y, dim), row_tolerance(dtype),
                  "log_softmax_backward");
    }
  }
}

TEST_CASE("fused cross-entropy on the GPU matches the CPU, forward and backward") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{37, 1001}, {301, 7}, {5, 3000}}) {
      const std::int64_t rows = shape.first, classes = shape.second;
      CAPTURE(dtype);
      CAPTURE(classes);
      const Tensor logits = uniform({classes, rows}, -8.0, 8.0, {.dtype = dtype}).t();  // strided
      Tensor targets = randint(0, classes, {rows}, {.dtype = DType::i64});
      targets.data<std::int64_t>()[1] = -100;
      const Tensor lg = logits.to(kGpu), tg = targets.to(kGpu);
      for (LossReduction reduction : {LossReduction::none, LossReduction::mean, LossReduction::sum})
        for (double eps : {0.0, 0.1}) {
          const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = eps};
          check_close(cross_entropy(lg, tg, options), cross_entropy(logits, targets, options), row_tolerance(dtype), "cross_entropy");
          const Tensor grad = reduction == LossReduction::none ? uniform({rows}, 0.5, 2.0, {.dtype = dtype})
                                                               : full({}, 1.5, {.dtype = dtype});
          check_close(cross_entropy_backward(grad.to(kGpu), lg, tg, options), cross_entropy_backward(grad, logits, targets, options),
                      row_tolerance(dtype), "cross_entropy_backward");
        }
      CHECK(count_correct(lg, tg).item<std::int64_t>() == count_correct(logits, targets).item<std::int64_t>());
    }
}

TEST_CASE("cross-entropy on the GPU: a bad target is an IndexError naming its row, devices must match") {
  const Tensor logits = zeros({4, 10}, {.device = kGpu});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, from_vector<std::int64_t>({0, 9, 10, 3}, {4}, kGpu)),
                       doctest::Contains("target 10 of row 2"), IndexError);
  CHECK_THROWS_WITH_AS(cross_entropy_backward(full({}, 1.0, {.device = kGpu}), logits,
                                              from_vector<std::int64_t>({0, -5, 10, 3}, {4}, kGpu)),
                       doctest::Contains("target -5 of row 1"), IndexError);
  // The flag is cleared for the next call.
  CHECK(cross_entropy(logits, from_vector<std::int64_t>({0, 9, 1, 3}, {4}, kGpu)).item<double>() == doctest::Approx(std::log(10.0)));
  CHECK_THROWS_AS(cross_entropy(logits, from_vector<std::int64_t>({0, 1, 2, 3})), DeviceError);
}
