// pointwise_weight_gradient (kernels/cpu/pointwise_weight_grad.h), the 1x1 convolution's weight
// gradient on the CPU's 8x8 and larger maps: against a sum in double, for channel counts that end
// inside a register tile, one-vector planes, batches that end inside a group of samples and an empty
// batch; the same bits on 1, 2 and 3 threads; and conv2d_backward_weight routing an 8x8 map through
// it with its totals borrowed as workspace, the same bytes on the CPU and on the meta device (whose
// plans must count what the runs allocate), and 4x4 maps elsewhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/random.h"
#include "kernels/conv.h"
#include "kernels/cpu/pointwise_weight_grad.h"
#include "tests/cpu/seeded_values.h"
#include "tests/cpu/thread_scopes.h"

using namespace frugal;

namespace {

using test::seeded_values;

struct Case {
  std::int64_t batch, out_channels, in_channels, plane;
};

// The kernel's scratch: out_channels x in_channels x kDotLanes floats, 64-byte aligned, filled with
// garbage (the kernel must not read what it has not written).
std::unique_ptr<float, decltype(&std::free)> scratch_for(std::int64_t out_channels, std::int64_t in_channels) {
  const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, out_channels * in_channels)) *
                            cpu::kDotLanes * sizeof(float);
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  std::memset(p, 0x7f, bytes);
  return {p, &std::free};
}

std::vector<float> gradient(const Case& t, const std::vector<float>& dy, const std::vector<float>& x) {
  std::vector<float> dw(static_cast<std::size_t>(t.out_channels * t.in_channels), -12345.0f);
  const auto scratch = scratch_for(t.out_channels, t.in_channels);
  cpu::pointwise_weight_gradient(t.batch, t.out_channels, t.in_channels, t.plane, dy.data(), x.data(), dw.data(),
                                 scratch.get());
  return dw;
}

void check_against_double(const Case& t) {
  const std::vector<float> dy = seeded_values(t.batch * t.out_channels * t.plane, 1);
  const std::vector<float> x = seeded_values(t.batch * t.in_channels * t.plane, 2);
  const std::vector<float> dw = gradient(t, dy, x);
  const std::int64_t terms = t.batch * t.plane;
  for (std::int64_t o = 0; o < t.out_channels; ++o)
    for (std::int64_t i = 0; i < t.in_channels; ++i) {
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t n = 0; n < t.batch; ++n)
        for (std::int64_t p = 0; p < t.plane; ++p) {
          const double term = static_cast<double>(dy[(n * t.out_channels + o) * t.plane + p]) *
                              x[(n * t.in_channels + i) * t.plane + p];
          sum += term;
          magnitude += std::fabs(term);
        }
      // Each term's path to the total passes at most `terms` roundings (a lane's chain, the group
      // totals, the lanes' halves), each within 2^-24 of the running magnitude.
      const double error = std::fabs(dw[o * t.in_channels + i] - sum);
      if (error > 2.0 * static_cast<double>(terms + 1) * 0x1p-24 * magnitude)
        FAIL("batch ", t.batch, " [", t.out_channels, ", ", t.in_channels, "] plane ", t.plane, ": dW[", o, "][", i,
             "] = ", dw[o * t.in_channels + i], ", the double sum ", sum);
    }
}

}  // namespace

TEST_CASE("pointwise_weight_gradient: every element is the double sum's, channel counts ending anywhere in a tile") {
  for (const Case& t : std::vector<Case>{{3, 7, 13, 32},   // rows and columns past the last full 4 x 6 tile
                                         {2, 4, 6, 16},    // one full tile, planes of one vector
                                         {1, 1, 1, 16},    // a tile of one
                                         {5, 9, 25, 48},   // a piece's edges between whole tiles
                                         {20, 9, 14, 64},  // groups of 16 samples: 16, then 4
                                         {2, 30, 17, 1024}})
    check_against_double(t);
}

TEST_CASE("pointwise_weight_gradient: an empty batch writes zeros") {
  const std::vector<float> none;
  const std::vector<float> dw = gradient({0, 5, 3, 1024}, none, none);
  for (float v : dw) CHECK(v == 0.0f);
}

TEST_CASE("pointwise_weight_gradient: the same bits on 1, 2 and 3 threads") {
  const Case t{37, 40, 50, 64};  // groups of 16, 16 and 5 samples; pieces that change with the thread count
  const std::vector<float> dy = seeded_values(t.batch * t.out_channels * t.plane, 3);
  const std::vector<float> x = seeded_values(t.batch * t.in_channels * t.plane, 4);
  const std::vector<float> one = [&] {
    const test::OmpThreadsScope threads(1);
    return gradient(t, dy, x);
  }();
  for (int n : {2, 3}) {
    const test::OmpThreadsScope threads(n);
    const std::vector<float> many = gradient(t, dy, x);
    CHECK_MESSAGE(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0, n, " threads");
  }
}

TEST_CASE("conv2d_backward_weight takes the dot products on 8x8 maps in f32, its totals borrowed, meta included") {
  Generator generator(11);
  const Shape input{3, 16, 8, 8}, output{3, 24, 8, 8}, weight_shape{24, 16, 1, 1};
  const Tensor x = uniform(input, -1.0, 1.0, {}, &generator), dy = uniform(output, -1.0, 1.0, {}, &generator);
  const Tensor dw = conv2d_backward_weight(dy, x, weight_shape);
  const std::size_t totals = 24 * 16 * cpu::kDotLanes * sizeof(float);
  CHECK(last_conv2d_decision().algorithm == "1x1 gemm");
  CHECK(last_conv2d_decision().workspace_bytes == totals);
  std::vector<float> direct(24 * 16);
  const auto scratch = scratch_for(24, 16);
  cpu::pointwise_weight_gradient(3, 24, 16, 64, static_cast<const float*>(dy.data_ptr()),
                                 static_cast<const float*>(x.data_ptr()), direct.data(), scratch.get());
  CHECK(std::memcmp(direct.data(), dw.data_ptr(), direct.size() * sizeof(float)) == 0);

  const TensorOptions meta{.device = Device::meta()};
  conv2d_backward_weight(empty(output, meta), empty(input, meta), weight_shape);
  CHECK(last_conv2d_decision().workspace_bytes == totals);

  // 4x4 maps keep OpenBLAS's GEMMs on gathered samples: the same sums to rounding, other scratch.
  const Tensor small_x = x.narrow(2, 0, 4).narrow(3, 0, 4).contiguous();
  const Tensor small_dy = dy.narrow(2, 0, 4).narrow(3, 0, 4).contiguous();
  const Tensor small_dw = conv2d_backward_weight(small_dy, small_x, weight_shape);
  CHECK(last_conv2d_decision().workspace_bytes != totals);
  std::vector<float> dots(24 * 16);
  cpu::pointwise_weight_gradient(3, 24, 16, 16, static_cast<const float*>(small_dy.data_ptr()),
                                 static_cast<const float*>(small_x.data_ptr()), dots.data(), scratch.get());
  const float* blas = static_cast<const float*>(small_dw.data_ptr());
  for (std::size_t k = 0; k < dots.size(); ++k) CHECK(std::fabs(dots[k] - blas[k]) <= 1e-3f * (1.0f + std::fabs(blas[k])));
}
