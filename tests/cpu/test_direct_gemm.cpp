// direct_gemm (kernels/cpu/direct_gemm.h), the 1x1 convolutions' GEMM on the CPU: against a product
// summed in double, for shapes whose rows and columns end inside a tile, panel or vector, with A
// row-major and transposed, with strided B and C (columns past n left alone), and k = 0; each
// element's bits the same however the columns are cut into calls (what makes the convolution's
// result independent of the thread count); a 1x1 convolution through it against the reference
// GEMM (the blocked one, set_gemm_impl); on 1x1 maps its gradients without gathering on every path
// (meta included); and a 1x1 convolution's bits on any slice of the batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/random.h"
#include "kernels/conv.h"
#include "kernels/cpu/direct_gemm.h"
#include "kernels/gemm.h"
#include "tests/cpu/seeded_values.h"
#include "tests/cpu/thread_scopes.h"

using namespace frugal;

namespace {

using test::seeded_values;

// Every element within 1e-4 of the expected one, relative to its magnitude (or absolute below 1):
// two summation orders of the same products in f32.
template <typename T>
bool close(const std::vector<T>& got, const std::vector<T>& expected) {
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - expected[i]) > T(1e-4) * (T(1) + std::fabs(expected[i]))) return false;
  return true;
}

struct Case {
  std::int64_t m, n, k;
  bool transposed;  // A given as its transpose [k, m]
  std::int64_t ldb, ldc;
};

// Runs direct_gemm on C filled with a sentinel; checks every element against a double sum (within the
// rounding of a k-term f32 sum) and that columns past n kept the sentinel.
void check_against_double(const Case& t) {
  const std::vector<float> a = seeded_values(t.m * t.k, 1), b = seeded_values(t.k * t.ldb, 2);
  constexpr float kSentinel = -12345.0f;
  std::vector<float> c(static_cast<std::size_t>(t.m * t.ldc), kSentinel);
  const std::int64_t a_row = t.transposed ? 1 : t.k, a_column = t.transposed ? t.m : 1;
  cpu::direct_gemm(t.m, t.n, t.k, a.data(), a_row, a_column, b.data(), t.ldb, c.data(), t.ldc);
  for (std::int64_t i = 0; i < t.m; ++i) {
    for (std::int64_t j = 0; j < t.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t p = 0; p < t.k; ++p) {
        const double term = static_cast<double>(a[i * a_row + p * a_column]) * b[p * t.ldb + j];
        sum += term;
        magnitude += std::fabs(term);
      }
      const double error = std::fabs(c[i * t.ldc + j] - sum);
      // A sum of k terms rounds at most 2k times (a multiply and an add each without FMA): each
      // rounding is within 2^-24 of the running magnitude.
      if (error > 2.0 * static_cast<double>(t.k + 1) * 0x1p-24 * magnitude)
        FAIL("m ", t.m, " n ", t.n, " k ", t.k, " transposed ", t.transposed, ": C[", i, "][", j, "] = ",
             c[i * t.ldc + j], ", expected ", sum);
    }
    for (std::int64_t j = t.n; j < t.ldc; ++j) REQUIRE(c[i * t.ldc + j] == kSentinel);
  }
}

}  // namespace

TEST_CASE("direct_gemm: every element is the product's, rows and columns ending anywhere in a tile") {
  for (const std::int64_t m : {1, 5, 6, 8, 9, 13, 24})
    for (const std::int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 47, 64, 100})
      for (const std::int64_t k : {0, 1, 3, 16, 37})
        for (const bool transposed : {false, true}) check_against_double({m, n, k, transposed, n, n});
}

TEST_CASE("direct_gemm: strided B and C, the columns past n untouched") {
  check_against_double({8, 40, 12, false, 72, 50});
  check_against_double({7, 33, 5, true, 33, 64});
}

TEST_CASE("direct_gemm: an element's bits do not depend on how the columns are cut into calls") {
  const std::int64_t m = 19, n = 97, k = 29;  // a row remainder for every tile height, columns past every panel
  const std::vector<float> a = seeded_values(m * k, 3), b = seeded_values(k * n, 4);
  std::vector<float> whole(static_cast<std::size_t>(m * n)), pieces(whole.size());
  cpu::direct_gemm(m, n, k, a.data(), k, 1, b.data(), n, whole.data(), n);
  const std::int64_t cuts[] = {0, 3, 8, 41, 64, 90, n};  // pieces of 3, 5, 33, 23, 26 and 7 columns
  for (std::size_t piece = 0; piece + 1 < std::size(cuts); ++piece) {
    const std::int64_t begin = cuts[piece], end = cuts[piece + 1];
    cpu::direct_gemm(m, end - begin, k, a.data(), k, 1, b.data() + begin, n, pieces.data() + begin, n);
  }
  CHECK(std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)) == 0);
}

TEST_CASE("a 1x1 convolution through direct_gemm matches the blocked GEMM's, forward and input gradient") {
  // Planes of 1024 (a GEMM per sample), of 16 (samples gathered into chunks) and a batch of one (the
  // lone GEMM cut into pieces of rows and columns for the threads): the paths of pointwise_over_batch.
  // 70 output channels: more rows than a piece, and a last row tile of 6.
  for (const Shape& input : {Shape{3, 16, 32, 32}, Shape{20, 24, 4, 4}, Shape{1, 8, 16, 16}}) {
    const std::int64_t in_channels = input[1], out_channels = 70;
    Generator generator(7);
    const Tensor x = normal(input, 0.0, 1.0, {}, &generator);
    const Tensor w = normal({out_channels, in_channels, 1, 1}, 0.0, 1.0, {}, &generator);
    const Tensor dy = normal({input[0], out_channels, input[2], input[3]}, 0.0, 1.0, {}, &generator);
    const auto run = [&] {
      return std::pair{conv2d(x, w).to_vector<float>(), conv2d_backward_input(dy, w, input).to_vector<float>()};
    };
    const auto [y, dx] = run();
    CHECK(last_conv2d_decision().algorithm == "1x1 gemm");
    const auto [y_blocked, dx_blocked] = [&] {
      const test::CpuGemmScope blocked(GemmImpl::blocked);
      return run();
    }();
    CHECK(close(y, y_blocked));
    CHECK(close(dx, dx_blocked));
  }
}

TEST_CASE("a 1x1 convolution on the CPU in f32 gives each sample the same bits on any slice of the batch") {
  // What lets MobileNetV2's inference cut its batch anywhere (pointwise_bits_independent_of_samples):
  // planes of 4 (the batch of 24 gathered into one chunk), 1 (the forward gathered, the input gradient
  // on the [N, C] matrix) and 16 (in place); slices of 5 and 7 samples cut the whole batch's chunk
  // anywhere, the last slice short.
  CHECK(pointwise_bits_independent_of_samples(Device::cpu(), DType::f32));
  CHECK_FALSE(pointwise_bits_independent_of_samples(Device::cpu(), DType::f64));
  {
    const test::CpuGemmScope blocked(GemmImpl::blocked);
    CHECK_FALSE(pointwise_bits_independent_of_samples(Device::cpu(), DType::f32));
  }
  for (const Shape& input : {Shape{24, 40, 2, 2}, Shape{24, 72, 1, 1}, Shape{24, 16, 4, 4}}) {
    CAPTURE(shape_str(input));
    Generator generator(11);
    const Tensor x = normal(input, 0.0, 1.0, {}, &generator);
    const Tensor w = normal({56, input[1], 1, 1}, 0.0, 1.0, {}, &generator);
    const Tensor dy = normal({input[0], 56, input[2], input[3]}, 0.0, 1.0, {}, &generator);
    const Tensor y = conv2d(x, w), dx = conv2d_backward_input(dy, w, input);
    for (const std::int64_t slice : {5, 7}) {
      CAPTURE(slice);
      for (std::int64_t first = 0; first < input[0]; first += slice) {
        const std::int64_t count = std::min(slice, input[0] - first);
        Shape part = input;
        part[0] = count;
        CHECK(conv2d(x.narrow(0, first, count).contiguous(), w).to_vector<float>() ==
              y.narrow(0, first, count).to_vector<float>());
        CHECK(conv2d_backward_input(dy.narrow(0, first, count).contiguous(), w, part).to_vector<float>() ==
              dx.narrow(0, first, count).to_vector<float>());
      }
    }
  }
}

TEST_CASE("on 1x1 maps a 1x1 convolution's gradients read the tensors where they lie, on every path") {
  // Note [Maps of one pixel: the batch is the matrix]: [N, C, 1, 1] is the [N, C] matrix, so the
  // input and weight gradients borrow no gathering buffer: through direct_gemm (f32), the blocked
  // GEMM, OpenBLAS (f64), and on the meta device, whose plans must count what the runs allocate.
  Generator generator(13);
  const Shape input{20, 24, 1, 1}, weight_shape{70, 24, 1, 1}, output{20, 70, 1, 1};
  const Tensor x = normal(input, 0.0, 1.0, {}, &generator);
  const Tensor w = normal(weight_shape, 0.0, 1.0, {}, &generator);
  const Tensor dy = normal(output, 0.0, 1.0, {}, &generator);
  struct Results {
    std::vector<double> dx, dw;
  };
  const auto run = [&](DType dtype) {
    Results r;
    r.dx = conv2d_backward_input(dy.to(dtype), w.to(dtype), input).to(DType::f64).to_vector<double>();
    CHECK(last_conv2d_decision().workspace_bytes == 0);
    r.dw = conv2d_backward_weight(dy.to(dtype), x.to(dtype), weight_shape).to(DType::f64).to_vector<double>();
    CHECK(last_conv2d_decision().workspace_bytes == 0);
    return r;
  };
  const Results direct = run(DType::f32), in_double = run(DType::f64);
  const Results blocked = [&] {
    const test::CpuGemmScope scope(GemmImpl::blocked);
    return run(DType::f32);
  }();
  CHECK(close(direct.dx, in_double.dx));
  CHECK(close(direct.dw, in_double.dw));
  CHECK(close(blocked.dx, in_double.dx));
  CHECK(close(blocked.dw, in_double.dw));
  const TensorOptions meta{.device = Device::meta()};
  conv2d_backward_input(empty(output, meta), empty(weight_shape, meta), input);
  CHECK(last_conv2d_decision().workspace_bytes == 0);
  conv2d_backward_weight(empty(output, meta), empty(input, meta), weight_shape);
  CHECK(last_conv2d_decision().workspace_bytes == 0);
}
