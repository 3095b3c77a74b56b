// Convolution on the CPU: a hand-computed case; every path (depthwise, 1x1, im2col) exact on small
// integers against a seven-loop reference, through strides, padding, dilation, groups, bias and
// non-contiguous inputs; both backward passes against double-precision finite differences; the
// im2col workspace it reports and borrows; and the errors. The CUDA kernels are compared in
// tests/cpu/test_conv_emulated.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "core/random.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

using namespace frugal;

namespace {
Tensor small_ints(Shape shape, DType dtype = DType::f32) {  // products and sums exact in f32
  return randint(-3, 4, std::move(shape), {.dtype = DType::i64}).to(dtype);
}

// y[n][oc][oh][ow] = b[oc] + sum over the group's input channels and taps, straight from the definition.
std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o) {
  const Shape out = conv2d_output_shape(x.shape(), w.shape(), o);
  const auto xv = x.contiguous().to_vector<double>(), wv = w.contiguous().to_vector<double>();
  const std::int64_t C = x.size(1), H = x.size(2), W = x.size(3), KH = w.size(2), KW = w.size(3);
  const std::int64_t cin_g = w.size(1), cout_g = out[1] / o.groups;
  std::vector<double> y;
  for (std::int64_t n = 0; n < out[0]; ++n)
    for (std::int64_t oc = 0; oc < out[1]; ++oc)
      for (std::int64_t oh = 0; oh < out[2]; ++oh)
        for (std::int64_t ow = 0; ow < out[3]; ++ow) {
          double total = bias.defined() ? bias.to_vector<double>()[oc] : 0.0;
          for (std::int64_t ci = 0; ci < cin_g; ++ci)
            for (std::int64_t kh = 0; kh < KH; ++kh)
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t h = oh * o.stride[0] - o.padding[0] + kh * o.dilation[0];
                const std::int64_t ww = ow * o.stride[1] - o.padding[1] + kw * o.dilation[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                const std::int64_t c = oc / cout_g * cin_g + ci;
                total += xv[((n * C + c) * H + h) * W + ww] * wv[((oc * cin_g + ci) * KH + kh) * KW + kw];
              }
          y.push_back(total);
        }
  return y;
}

struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions options;
  const char* path;  // what last_conv2d_decision() should report
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"3x3 pad 1", {2, 3, 7, 6}, {4, 3, 3, 3}, {.padding = {1, 1}}, "im2col+gemm"},
      {"stride 2, odd sizes", {2, 3, 9, 8}, {5, 3, 3, 2}, {.stride = {2, 3}, .padding = {1, 0}}, "im2col+gemm"},
      {"dilation 2", {1, 2, 9, 9}, {3, 2, 3, 3}, {.padding = {2, 1}, .dilation = {2, 3}}, "im2col+gemm"},
      {"groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, "im2col+gemm"},
      {"1x1", {3, 5, 4, 3}, {7, 5, 1, 1}, {}, "1x1 gemm"},
      {"1x1 on 1x1 maps", {5, 6, 1, 1}, {7, 6, 1, 1}, {}, "1x1 gemm"},  // the [N, C] matrix itself
      {"1x1 stride 2", {2, 5, 5, 5}, {3, 5, 1, 1}, {.stride = {2, 2}}, "im2col+gemm"},
      {"depthwise 3x3 stride 2", {2, 6, 7, 7}, {6, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}, "depthwise"},
      {"depthwise multiplier 2", {2, 3, 5, 6}, {6, 1, 3, 3}, {.padding = {1, 1}, .dilation = {1, 2}, .groups = 3}, "depthwise"},
      {"one input channel", {2, 1, 6, 6}, {4, 1, 2, 2}, {}, "depthwise"},
  };
  return all;
}

// sum(conv(x) * r): a scalar loss whose gradients are conv2d_backward_* of r.
double loss(const Tensor& x, const Tensor& w, const Tensor& r, const Conv2dOptions& o) {
  return sum(mul(conv2d(x, w, Tensor(), o), r)).item<double>();
}

// Central differences of `loss` with respect to every element of `t` (x or w, f64), against `grad`.
void check_finite_differences(Tensor t, const Tensor& grad, const std::function<double()>& f, const char* what) {
  constexpr double kStep = 1e-6;  // the loss is linear in t: the difference is exact up to rounding
  const auto analytic = grad.to_vector<double>();
  double* data = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double saved = data[i];
    data[i] = saved + kStep;
    const double up = f();
    data[i] = saved - kStep;
    const double down = f();
    data[i] = saved;
    REQUIRE_MESSAGE(std::abs((up - down) / (2 * kStep) - analytic[i]) <= 1e-6 * (1 + std::abs(analytic[i])),
                    what, " element ", i);
  }
}
}  // namespace

TEST_CASE("conv2d: a hand-computed case") {
  // x = 1..9 as a 3x3 image; the kernel [[1, 0], [0, -1]] subtracts the lower-right neighbour: -4 everywhere.
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const Tensor w = from_vector<float>({1, 0, 0, -1}, {1, 1, 2, 2});
  CHECK(conv2d(x, w).to_vector<double>() == std::vector<double>{-4, -4, -4, -4});
  // Two input channels (the im2col path): the second channel's kernel [[0, 0], [0, 2]] adds 2 * its
  // lower-right pixel, here x + 10; padding 1 and bias 0.5 exercise both.
  const Tensor x2 = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19}, {1, 2, 3, 3});
  const Tensor w2 = from_vector<float>({1, 0, 0, -1, 0, 0, 0, 2}, {1, 2, 2, 2});
  const Tensor y = conv2d(x2, w2, from_vector<float>({0.5f}, {1}), {.stride = {2, 2}, .padding = {1, 1}});
  // Window (oh, ow) starts at input pixel (2 oh - 1, 2 ow - 1): its top-left tap lands in the padding
  // except for (1, 1), where it reads 5; its bottom-right tap reads pixel (2 oh, 2 ow) of both channels.
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{-1 + 2 * 11 + 0.5, -3 + 2 * 13 + 0.5, -7 + 2 * 17 + 0.5,
                                                     5 - 9 + 2 * 19 + 0.5});
}

TEST_CASE("conv2d: every path exact on small integers against the definition") {
  for (const Case& c : cases()) {
    INFO(std::string(c.name));
    const Tensor x = small_ints(c.x), w = small_ints(c.w), bias = small_ints({c.w[0]});
    CHECK(conv2d(x, w, Tensor(), c.options).to_vector<double>() == reference(x, w, Tensor(), c.options));
    CHECK(last_conv2d_decision().algorithm == c.path);
    CHECK(conv2d(x, w, bias, c.options).to_vector<double>() == reference(x, w, bias, c.options));
    // A non-contiguous input (a channels-last tensor viewed as NCHW) and a strided weight.
    const Tensor xt = small_ints({c.x[0], c.x[2], c.x[3], c.x[1]}).permute({0, 3, 1, 2});
    const Tensor wt = small_ints({c.w[0], c.w[1], c.w[2], 2 * c.w[3]}).slice(3, 0, 2 * c.w[3], 2);
    CHECK(conv2d(xt, wt, bias, c.options).to_vector<double>() == reference(xt, wt, bias, c.options));
    for (DType dtype : {DType::f64, DType::f16, DType::bf16}) {  // sums of small integers are exact in all of them
      const Tensor xd = x.to(dtype), wd = w.to(dtype);
      CHECK(conv2d(xd, wd, Tensor(), c.options).to_vector<double>() == reference(xd, wd, Tensor(), c.options));
    }
  }
}

TEST_CASE("conv2d backward: input and weight gradients against finite differences, bias as a sum") {
  for (const Case& c : cases()) {
    INFO(std::string(c.name));
    const TensorOptions f64{.dtype = DType::f64};
    const Tensor x = uniform(c.x, -1.0, 1.0, f64), w = uniform(c.w, -1.0, 1.0, f64);
    const Tensor r = uniform(conv2d_output_shape(c.x, c.w, c.options), -1.0, 1.0, f64);
    const Tensor dx = conv2d_backward_input(r, w, c.x, c.options);
    CHECK(last_conv2d_decision().algorithm == c.path);
    check_finite_differences(x, dx, [&] { return loss(x, w, r, c.options); }, "input");
    const Tensor dw = conv2d_backward_weight(r, x, c.w, c.options);
    check_finite_differences(w, dw, [&] { return loss(x, w, r, c.options); }, "weight");
    CHECK(conv2d_backward_bias(r).to_vector<double>() == sum(r, {0, 2, 3}).to_vector<double>());
  }
}

TEST_CASE("conv2d: an empty batch gives empty outputs and a zero weight gradient") {
  const Tensor x = empty({0, 3, 5, 5}), w = uniform({4, 3, 3, 3}, -1.0, 1.0);
  CHECK(conv2d(x, w).shape() == Shape{0, 4, 3, 3});
  CHECK(conv2d_backward_input(empty({0, 4, 3, 3}), w, x.shape()).shape() == x.shape());
  CHECK(sum(abs(conv2d_backward_weight(empty({0, 4, 3, 3}), x, w.shape()))).item<double>() == 0.0);
}

TEST_CASE("conv2d: the im2col workspace is one sample's, borrowed under the tag 'workspace'") {
  // [8, 16, 20, 20] x 3x3: one sample's column matrix is 16*9 rows x 400 columns of f32 = 230400
  // bytes; the whole batch's would be 8 times that.
  const Tensor x = uniform({8, 16, 20, 20}, -1.0, 1.0), w = uniform({32, 16, 3, 3}, -1.0, 1.0);
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak_stats();
  const std::int64_t before = allocator.stats().tag_bytes[static_cast<int>(MemoryTag::workspace)].current;
  conv2d(x, w, Tensor(), {.padding = {1, 1}});
  const ConvDecision& decision = last_conv2d_decision();
  CHECK(decision.impl == ConvImpl::native);
  CHECK(decision.algorithm == "im2col+gemm");
  CHECK(decision.workspace_bytes == 16 * 9 * 400 * sizeof(float));
  const Stat workspace = allocator.stats().tag_bytes[static_cast<int>(MemoryTag::workspace)];
  CHECK(workspace.peak - before == static_cast<std::int64_t>(decision.workspace_bytes));
  CHECK(workspace.current == before);  // returned after the call
  conv2d(x, uniform({32, 16, 1, 1}, -1.0, 1.0));
  CHECK(last_conv2d_decision().workspace_bytes == 0);  // 1x1: the input is the GEMM operand
}

TEST_CASE("conv2d: bad input names the op and the shapes") {
  const Tensor x = uniform({2, 6, 8, 8}, -1.0, 1.0), w = uniform({4, 6, 3, 3}, -1.0, 1.0);
  CHECK_THROWS_AS(conv2d(x, uniform({4, 2, 3, 3}, -1.0, 1.0), Tensor(), {.groups = 4}), ShapeError);  // 4 does not divide 6
  CHECK_THROWS_WITH_AS(conv2d(x, uniform({4, 3, 3, 3}, -1.0, 1.0), Tensor(), {.groups = 3}),
                       doctest::Contains("groups = 3 must divide"), ShapeError);  // 3 does not divide C_out 4
  CHECK_THROWS_WITH_AS(conv2d(x, uniform({4, 5, 3, 3}, -1.0, 1.0)), doctest::Contains("weight [4, 5, 3, 3]"), ShapeError);
  CHECK_THROWS_AS(conv2d(x.select(0, 0), w), ShapeError);  // 3-D input
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.stride = {0, 1}}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.padding = {-1, 0}}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.dilation = {4, 1}}), ShapeError);  // spans 9 > 8 pixels
  CHECK_THROWS_AS(conv2d(x, w.to(DType::f64)), DTypeError);
  CHECK_THROWS_AS(conv2d(x.to(DType::i32), w.to(DType::i32)), DTypeError);
  CHECK_THROWS_AS(conv2d(x, w, uniform({3}, -1.0, 1.0)), ShapeError);
  CHECK_THROWS_AS(conv2d(uniform({2, 6, 0, 8}, -1.0, 1.0), w), ShapeError);
  CHECK_THROWS_AS(conv2d_backward_input(uniform({2, 4, 5, 5}, -1.0, 1.0), w, x.shape()), ShapeError);  // output is 6x6
  CHECK_THROWS_AS(conv2d_backward_weight(uniform({2, 4, 6, 6}, -1.0, 1.0), x, {4, 6, 3}), ShapeError);
  CHECK_THROWS_AS(set_conv_impl(DeviceType::CPU, ConvImpl::cudnn), ValueError);
  CHECK_THROWS_AS(parse_conv_impl("winograd"), ValueError);
  CHECK(parse_conv_impl("cudnn") == ConvImpl::cudnn);
}

TEST_CASE("conv2d backward weight in bf16 sums the batch in f32, not in the 16-bit gradient") {
  // 1024 samples whose products are ~1 each (corner taps ~0.44): a bf16 running total stalls at 256
  // (or 128), where the spacing of bf16 numbers reaches 2 and adding ~1 rounds back to the total;
  // an f32 sum is rounded once, at the end.
  const std::int64_t batch = 1024;
  const Tensor x = full({batch, 2, 3, 3}, 1.0, {.dtype = DType::bf16});
  const Tensor dy = full({batch, 4, 3, 3}, 1.0 / 9.0, {.dtype = DType::bf16});
  for (const Shape& weight : {Shape{4, 2, 3, 3}, Shape{4, 2, 1, 1}}) {  // im2col, and the 1x1 path
    CAPTURE(shape_str(weight));
    const std::int64_t pad = weight[2] / 2;
    const Tensor dw = conv2d_backward_weight(dy, x, weight, {.padding = {pad, pad}});
    // The f32 sum and one sample's 16-bit product are scratch, reported beside any columns.
    CHECK(last_conv2d_decision().workspace_bytes >= static_cast<std::size_t>(shape_numel(weight)) * (4 + 2));
    const Tensor reference =
        conv2d_backward_weight(dy.to(DType::f32), x.to(DType::f32), weight, {.padding = {pad, pad}});
    const std::vector<float> got = dw.to(DType::f32).to_vector<float>(), want = reference.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(got[i] - want[i]) <= 0.01 * std::abs(want[i]));  // bf16's own rounding of the total
    }
  }
}

TEST_CASE("conv2d 1x1 over the batch: gathered chunks, waves and weight groups equal one sample at a time") {
  // Planes of 64 and 16 pixels put 4 and 16 samples in a chunk (on 1x1 maps the gradients take the
  // [N, C] matrix itself: Note [Maps of one pixel: the batch is the matrix]); batches that do not divide
  // into chunks, more chunks than a wave holds (9 x 8 = 72 samples of 64 pixels: 18 chunks), a last
  // weight group shorter than the others (18 samples: 5 chunks in groups of 2, 2 and 1), and a weight gradient over the small-weight limit (summed
  // chunk by chunk). Runs of 1 and 4 pixels have copies of their own (Note [Short runs] in
  // kernels/conv.cpp): on 1x1 maps the forward's copies go by 4x4 blocks, so 7 samples of 10
  // channels (6 out) leave edges on both sides, and 150 output rows over 70 samples scatter in tiles
  // that start past 0 (at 64 and 128); the 2x2 maps' runs of 4 are single moves at any count. A batch
  // of one is never gathered: it is the per-sample definition. Small
  // integers keep every sum exact, so the comparison is bit for bit whatever the summation order.
  struct PointwiseCase {
    Shape x, w;
  };
  for (const PointwiseCase& c : {PointwiseCase{{5, 6, 8, 8}, {7, 6, 1, 1}}, PointwiseCase{{18, 6, 8, 8}, {7, 6, 1, 1}},
                                 PointwiseCase{{72, 3, 8, 8}, {5, 3, 1, 1}},
                                 PointwiseCase{{19, 4, 4, 4}, {6, 4, 1, 1}}, PointwiseCase{{64, 8, 1, 1}, {9, 8, 1, 1}},
                                 PointwiseCase{{6, 300, 2, 2}, {260, 300, 1, 1}}, PointwiseCase{{3, 5, 20, 20}, {4, 5, 1, 1}},
                                 PointwiseCase{{7, 10, 1, 1}, {6, 10, 1, 1}},
                                 PointwiseCase{{13, 5, 2, 2}, {3, 5, 1, 1}},
                                 PointwiseCase{{70, 16, 1, 1}, {150, 16, 1, 1}}}) {
    CAPTURE(shape_str(c.x));
    CAPTURE(shape_str(c.w));
    const Tensor x = small_ints(c.x), w = small_ints(c.w), bias = small_ints({c.w[0]});
    const Shape y_shape = conv2d_output_shape(c.x, c.w, {});
    const Tensor dy = small_ints(y_shape);
    const Tensor y = conv2d(x, w, bias), dx = conv2d_backward_input(dy, w, c.x), dw = conv2d_backward_weight(dy, x, c.w);
    CHECK(last_conv2d_decision().algorithm == "1x1 gemm");
    Tensor dw_sum = zeros(c.w);
    for (std::int64_t n = 0; n < c.x[0]; ++n) {
      const Tensor xn = x.narrow(0, n, 1), dyn = dy.narrow(0, n, 1);
      Shape one = c.x;
      one[0] = 1;
      CHECK(conv2d(xn, w, bias).to_vector<float>() == y.narrow(0, n, 1).to_vector<float>());
      CHECK(conv2d_backward_input(dyn, w, one).to_vector<float>() == dx.narrow(0, n, 1).to_vector<float>());
      add_(dw_sum, conv2d_backward_weight(dyn, xn, c.w));
    }
    CHECK(dw.to_vector<float>() == dw_sum.to_vector<float>());
  }
}

// kernels/conv.h's ConvEpilogue: each path applies scale, bias and ReLU6 where it can (the CPU's 1x1
// GEMMs in cache, the depthwise kernels as they write, the rest as passes after); every path gives the
// bits of the convolution followed by the passes themselves (a depthwise one with the scale taken
// into its weights first): kernels/conv.cpp is compiled without multiply-add contraction.
TEST_CASE("conv2d's epilogue: scale, bias and ReLU6 give the bits of the separate passes on every path") {
  Generator generator(21);
  struct Case {
    const char* name;
    Shape x, w;
    Conv2dOptions o;
  };
  const Case cases[] = {
      {"1x1, plane >= 256 columns", {2, 8, 16, 16}, {12, 8, 1, 1}, {}},
      {"1x1, gathered small planes", {9, 16, 4, 4}, {24, 16, 1, 1}, {}},
      // One-pixel planes: the whole batch is one chunk, its copies and epilogue split among the
      // threads in tiles of 64 rows (150 rows: three tiles, the last one short).
      {"1x1, one chunk alone, rows in tiles", {70, 16, 1, 1}, {150, 16, 1, 1}, {}},
      {"depthwise 3x3 stride 1 (fast path)", {3, 6, 7, 5}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}},
      {"depthwise 3x3 stride 2 (fast path)", {3, 6, 8, 8}, {6, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}},
      {"depthwise one-pixel planes", {4, 6, 1, 1}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}},
      {"depthwise 2x2 planes, 20 channels across the lanes", {3, 20, 2, 2}, {20, 1, 3, 3}, {.padding = {1, 1}, .groups = 20}},
      {"depthwise 5x5 (reference loops)", {2, 4, 6, 6}, {4, 1, 5, 5}, {.padding = {2, 2}, .groups = 4}},
      {"im2col 3x3", {2, 3, 6, 6}, {5, 3, 3, 3}, {.padding = {1, 1}}},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.name));
    const Tensor x = uniform(c.x, -3.0, 3.0, {}, &generator), w = uniform(c.w, -1.0, 1.0, {}, &generator);
    const Tensor scale = uniform({c.w[0]}, 0.5, 2.0, {}, &generator), bias = uniform({c.w[0]}, -1.0, 1.0, {}, &generator);
    const bool depthwise = c.w[1] == 1 && c.o.groups == c.x[1];
    for (bool with_scale : {false, true})
      for (ConvActivation activation : {ConvActivation::none, ConvActivation::relu6}) {
        CAPTURE(with_scale);
        const ConvEpilogue e{.scale = with_scale ? scale : Tensor(), .activation = activation};
        const Tensor fused = conv2d(x, w, bias, c.o, e);
        Tensor expected;
        if (!with_scale) {
          expected = conv2d(x, w, bias, c.o);
        } else if (depthwise) {
          expected = conv2d(x, mul(w, scale.view({c.w[0], 1, 1, 1})), bias, c.o);
        } else {
          expected = conv2d(x, w, Tensor(), c.o);
          mul_(expected, scale.view({1, c.w[0], 1, 1}));
          add_(expected, bias.view({1, c.w[0], 1, 1}));
        }
        if (activation == ConvActivation::relu6) relu6_(expected);
        CHECK(fused.to_vector<float>() == expected.to_vector<float>());
      }
  }
  CHECK_THROWS_AS(conv2d(zeros({1, 2, 3, 3}), zeros({4, 2, 1, 1}), Tensor(), {}, {.scale = zeros({3})}), ShapeError);
}
