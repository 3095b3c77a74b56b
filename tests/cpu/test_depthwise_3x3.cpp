// The CPU's fast depthwise 3x3 kernels (kernels/cpu/depthwise_3x3.h) against the reference loops of
// kernels/cpu/conv.cpp: forward, input gradient and weight gradient, stride 1 and 2, planes from 1x1
// to 32x32 with odd, even and vector-unaligned widths, batch 1, 3 and 7, 5 channels with bias and 20
// without, channel multiplier 1 and 3. They may differ by f32 rounding only: |fast - reference| <=
// 1e-5 x the sum of the terms' magnitudes (the reference run on absolute values), so cancellation
// cannot hide a wrong index. Then: the same bits for 1, 2 and 3 OpenMP threads (flat and small
// planes), and shapes outside the fast path left to the reference.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "core/cpu/parallel.h"
#include "core/random.h"
#include "kernels/conv_backends.h"
#include "kernels/cpu/depthwise_3x3.h"
#include "kernels/elementwise.h"

using namespace frugal;

namespace {
constexpr double kRelative = 1e-5;  // f32 sums of up to ~70 terms per lane, fused or not, stay far below

ConvGeometry geometry_3x3(std::int64_t channels, std::int64_t height, std::int64_t width, std::int64_t stride) {
  return {.channels = channels, .height = height, .width = width,
          .out_height = conv_output_size(height, 3, stride, 1, 1), .out_width = conv_output_size(width, 3, stride, 1, 1),
          .kernel_h = 3, .kernel_w = 3, .stride_h = stride, .stride_w = stride, .pad_h = 1, .pad_w = 1};
}

// The three kernels of one implementation (fast: cpu::depthwise_*, or the *_reference loops) on the
// same operands, their results concatenated: y, then dx, then dw. Counts the parallel regions the
// kernels open into *regions when given.
struct Operands {
  ConvGeometry g;
  std::int64_t batch, multiplier;
  Tensor x, w, bias, dy;
};

Operands make_operands(const ConvGeometry& g, std::int64_t batch, bool with_bias, std::int64_t multiplier = 1) {
  const std::int64_t out_channels = g.channels * multiplier;
  return {g, batch, multiplier, uniform({batch, g.channels, g.height, g.width}, -1.0, 1.0),
          uniform({out_channels, 1, 3, 3}, -1.0, 1.0), with_bias ? uniform({out_channels}, -1.0, 1.0) : Tensor(),
          uniform({batch, out_channels, g.out_height, g.out_width}, -1.0, 1.0)};
}

std::vector<float> run_all(const Operands& o, bool reference, std::uint64_t* regions = nullptr) {
  const ConvGeometry& g = o.g;
  Tensor y = zeros(o.dy.shape());
  Tensor dx = zeros(o.x.shape()), dw = zeros(o.w.shape());
  const void* bias = o.bias.defined() ? o.bias.data_ptr() : nullptr;
  auto forward = reference ? cpu::depthwise_forward_reference : cpu::depthwise_forward;
  auto input = reference ? cpu::depthwise_backward_input_reference : cpu::depthwise_backward_input;
  auto weight = reference ? cpu::depthwise_backward_weight_reference : cpu::depthwise_backward_weight;
  const std::uint64_t regions_before = cpu::parallel_regions_opened();
  forward(DType::f32, g, o.batch, o.multiplier, o.x.data_ptr(), o.w.data_ptr(), bias, y.data_ptr(), false);
  input(DType::f32, g, o.batch, o.multiplier, o.dy.data_ptr(), o.w.data_ptr(), dx.data_ptr());
  weight(DType::f32, g, o.batch, o.multiplier, o.dy.data_ptr(), o.x.data_ptr(), dw.data_ptr());
  if (regions) *regions = cpu::parallel_regions_opened() - regions_before;
  std::vector<float> all = y.to_vector<float>();
  for (const Tensor& t : {dx, dw}) {
    const auto v = t.to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}
// Every output of the fast path against the reference loops, each within kRelative of the
// magnitude of its terms.
void check_against_reference(const Operands& o) {
  const bool with_bias = o.bias.defined();
  const Operands magnitudes{o.g, o.batch, o.multiplier, abs(o.x), abs(o.w), with_bias ? abs(o.bias) : Tensor(),
                            abs(o.dy)};
  const auto fast = run_all(o, false), reference = run_all(o, true), scale = run_all(magnitudes, true);
  REQUIRE(fast.size() == reference.size());
  std::size_t worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    const double excess = std::abs(double(fast[i]) - reference[i]) - kRelative * scale[i];
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  INFO("worst element ", worst, ": fast ", fast[worst], ", reference ", reference[worst], ", terms' magnitude ",
       scale[worst]);
  CHECK(worst_excess <= 0.0);
}
}  // namespace

TEST_CASE("depthwise 3x3 fast path: the reference loops' results up to f32 rounding") {
  // Stacks of consecutive planes (kernels/cpu/depthwise_3x3.cpp) end short at batch 7 x 5 channels
  // and 16x16; small planes (16 output pixels or fewer, 64 input pixels or fewer: square, flat and
  // tall ones) take 16 channels per tile in all three kernels, so 5 and 20 channels leave lanes
  // empty; 20 channels stack the weight gradient's channels in blocks of 3 ending with 2; 32x32
  // flushes the weight gradient's lanes within a plane.
  const std::int64_t sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {7, 7}, {8, 8}, {4, 5}, {5, 4}, {2, 5}, {5, 2},
                                   {1, 3}, {3, 1}, {1, 16}, {2, 32}, {6, 17}, {17, 6}, {16, 16}, {32, 32}};
  for (std::int64_t stride : {1, 2})
    for (const auto& size : sizes)
      for (std::int64_t batch : {1, 3, 7})
        for (std::int64_t multiplier : {1, 3})  // 3: the forward and weight gradient's multiplier
          for (std::int64_t channels : {5, 20})
            for (bool with_bias : {false, true}) {  // a full tile's second octet of biases with 20
              const ConvGeometry g = geometry_3x3(channels, size[0], size[1], stride);
              CAPTURE(stride);
              CAPTURE(size[0]);
              CAPTURE(size[1]);
              CAPTURE(batch);
              CAPTURE(multiplier);
              CAPTURE(with_bias);
              CAPTURE(g.channels);
              REQUIRE(cpu::depthwise_3x3_applies(DType::f32, g));
              check_against_reference(make_operands(g, batch, with_bias, multiplier));
            }
}

TEST_CASE("depthwise 3x3 fast path: a weight gradient job of several stacks, the last job short") {
  // 40 channels of 32x32 planes: one plane per stack (a padded plane fills it), 40 stacks in jobs of
  // 3 (Note [A job's channels in memory order]), the last job one stack.
  for (std::int64_t stride : {1, 2})
    for (std::int64_t multiplier : {1, 3}) {
      CAPTURE(stride);
      CAPTURE(multiplier);
      check_against_reference(make_operands(geometry_3x3(40, 32, 32, stride), 3, true, multiplier));
    }
}

TEST_CASE("depthwise 3x3 fast path: the same bits for 1, 2 and 3 threads") {
  // Flat padded planes (32x30), and small ones whose channels go across the lanes (4x4 and 2x2
  // inputs: outputs of 4x4 and 2x2 at stride 1, 2x2 and 1x1 at stride 2; 40 channels make blocks of
  // 16, 16 and 8); each big enough that every kernel opens a
  // parallel region (core/cpu/parallel.h).
  struct Case {
    std::int64_t channels, height, width, batch;
  };
  for (const Case& c : {Case{16, 32, 30, 3}, Case{40, 4, 4, 64}, Case{40, 2, 2, 128}}) {
    for (std::int64_t stride : {1, 2}) {
      CAPTURE(c.height);
      CAPTURE(stride);
      const Operands o = make_operands(geometry_3x3(c.channels, c.height, c.width, stride), c.batch, true);
      const int saved = omp_get_max_threads();
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::uint64_t regions = 0;
        results.push_back(run_all(o, false, &regions));
        CHECK(regions == 3);
      }
      omp_set_num_threads(saved);
      for (std::size_t i = 1; i < results.size(); ++i) {
        REQUIRE(results[i].size() == results[0].size());
        CHECK(std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("depthwise 3x3 fast path: other shapes and dtypes take the reference") {
  const ConvGeometry base = geometry_3x3(4, 6, 6, 1);
  CHECK(cpu::depthwise_3x3_applies(DType::f32, geometry_3x3(4, 6, 6, 2)));
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f64, base));
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::bf16, base));
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f16, base));
  ConvGeometry other = base;
  other.stride_w = 2;  // strides differ along H and W
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f32, other));
  other = geometry_3x3(4, 6, 6, 3);
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f32, other));
  other = base;
  other.pad_h = other.pad_w = 0, other.out_height = other.out_width = 4;
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f32, other));
  other = base;
  other.dilation_h = other.dilation_w = 2, other.out_height = other.out_width = 4;
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f32, other));
  other = base;
  other.kernel_h = other.kernel_w = 5, other.out_height = other.out_width = 4;
  CHECK_FALSE(cpu::depthwise_3x3_applies(DType::f32, other));
  // And the public kernels give the reference's bits there (here: stride 2 along W only).
  other = base;
  other.stride_w = 2, other.out_width = 3;
  const Operands o = make_operands(other, 2, true);
  CHECK(run_all(o, false) == run_all(o, true));
  // The input gradient with a channel multiplier is the reference's too.
  const Operands m = make_operands(base, 2, false, 2);
  Tensor fast = zeros(m.x.shape()), reference = zeros(m.x.shape());
  cpu::depthwise_backward_input(DType::f32, base, 2, 2, m.dy.data_ptr(), m.w.data_ptr(), fast.data_ptr());
  cpu::depthwise_backward_input_reference(DType::f32, base, 2, 2, m.dy.data_ptr(), m.w.data_ptr(), reference.data_ptr());
  CHECK(fast.to_vector<float>() == reference.to_vector<float>());
}
