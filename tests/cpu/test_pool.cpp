// Pooling on the CPU: hand-computed values (padding, ceil_mode, dilation, count_include_pad both
// ways, divisor_override, adaptive windows that do not divide), PyTorch's indices, every backward
// against double-precision central differences, the index math of kernels/pool_ops.h against brute
// force, the CUDA backward's gather run on the CPU against the CPU's scatter, strided and 16-bit
// inputs, and every bad input. The CUDA kernels: tests/cpu/test_pool_emulated.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "core/random.h"
#include "kernels/pool.h"
#include "kernels/pool_ops.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
std::vector<std::int64_t> ints(const Tensor& t) { return t.to_vector<std::int64_t>(); }
// 0, 1, 2, ... in an [1, 1, h, w] image of f64: each value is its own flat index.
Tensor grid(std::int64_t h, std::int64_t w) {
  return arange(static_cast<double>(h * w), {.dtype = DType::f64}).view({1, 1, h, w});
}
Tensor image(std::vector<double> v, std::int64_t h, std::int64_t w) { return from_vector(v, {1, 1, h, w}); }
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// backward(g) against central differences of sum(forward(x) * g), for every element of x (f64).
void check_gradient(const Tensor& x, const std::function<Tensor(const Tensor&)>& forward,
                    const std::function<Tensor(const Tensor&)>& backward, Generator& generator) {
  const Tensor g = uniform(forward(x).shape(), -1.0, 1.0, {.dtype = DType::f64}, &generator);
  const std::vector<double> upstream = values(g), analytic = values(backward(g));
  auto loss = [&](const Tensor& input) {
    const std::vector<double> y = values(forward(input));
    double total = 0;
    for (std::size_t i = 0; i < y.size(); ++i) total += y[i] * upstream[i];
    return total;
  };
  Tensor probe = x.clone();
  double* data = probe.data<double>();
  const double h = 1e-6;
  for (std::int64_t i = 0; i < probe.numel(); ++i) {
    const double saved = data[i];
    data[i] = saved + h;
    const double plus = loss(probe);
    data[i] = saved - h;
    const double minus = loss(probe);
    data[i] = saved;
    REQUIRE_MESSAGE(analytic[i] == doctest::Approx((plus - minus) / (2 * h)).epsilon(1e-7), "element ", i);
  }
}
}  // namespace

TEST_CASE("pool_ops: output sizes as PyTorch's pooling_output_shape") {
  CHECK(floor_div(-3, 2) == -2);
  CHECK(floor_div(3, 2) == 1);
  CHECK(pool_output_size(5, 2, 2, 0, 1, false) == 2);
  CHECK(pool_output_size(5, 2, 2, 0, 1, true) == 3);     // a last window of one column
  CHECK(pool_output_size(6, 3, 2, 1, 1, false) == 3);
  CHECK(pool_output_size(6, 3, 2, 1, 1, true) == 4);     // the last window starts at 5, inside
  CHECK(pool_output_size(5, 2, 2, 1, 1, true) == 3);     // a 4th window would start at 5, in the right padding
  CHECK(pool_output_size(112, 3, 2, 1, 1, false) == 56);  // ResNet's stem
  CHECK(pool_output_size(7, 7, 1, 0, 1, false) == 1);
  CHECK(pool_output_size(4, 2, 1, 0, 3, false) == 1);    // dilation 3: one window spanning taps 0 and 3
  CHECK(pool_output_size(2, 3, 1, 0, 1, false) == 0);    // does not fit: pool.cpp rejects it
}

TEST_CASE("pool_ops: the outputs covering an input, against brute force") {
  for (std::int64_t in = 1; in <= 9; ++in)
    for (std::int64_t kernel = 1; kernel <= 4; ++kernel)
      for (std::int64_t stride = 1; stride <= 3; ++stride)
        for (std::int64_t padding = 0; padding <= kernel / 2; ++padding)
          for (std::int64_t dilation = 1; dilation <= 3; ++dilation)
            for (bool ceil_mode : {false, true}) {
              const std::int64_t out = pool_output_size(in, kernel, stride, padding, dilation, ceil_mode);
              if (out < 1) continue;
              const PoolAxis a{in, out, kernel, stride, padding, dilation};
              INFO("in ", in, " kernel ", kernel, " stride ", stride, " padding ", padding, " dilation ", dilation,
                   " ceil_mode ", ceil_mode);
              for (std::int64_t i = 0; i < in; ++i) {
                Range expected{out, 0};
                for (std::int64_t o = 0; o < out; ++o)
                  if (window_start(a, o) <= i && i < window_start(a, o) + window_extent(a)) {
                    expected.begin = std::min(expected.begin, o);
                    expected.end = o + 1;
                  }
                const Range got = outputs_covering(a, i);
                CHECK(got.size() == expected.size());
                if (expected.size() > 0) CHECK(got.begin == expected.begin);
              }
              if (dilation == 1)  // the avg windows: never empty, so the divisor is never 0
                for (std::int64_t o = 0; o < out; ++o) CHECK(summed_range(PoolKind::avg, a, o).size() >= 1);
            }
  for (std::int64_t in = 1; in <= 9; ++in)
    for (std::int64_t out = 1; out <= 9; ++out) {
      const PoolAxis a{.in = in, .out = out};
      for (std::int64_t i = 0; i < in; ++i) {
        Range expected{out, 0};
        for (std::int64_t o = 0; o < out; ++o) {
          const Range window = adaptive_window(a, o);
          CHECK(window.size() >= 1);
          if (window.begin <= i && i < window.end) {
            expected.begin = std::min(expected.begin, o);
            expected.end = o + 1;
          }
        }
        const Range got = adaptive_outputs_covering(a, i);
        CHECK_MESSAGE((got.begin == expected.begin && got.end == expected.end), "in ", in, " out ", out, " i ", i);
      }
    }
}

TEST_CASE("max_pool2d: values and PyTorch's indices, with padding, ceil_mode and dilation") {
  const MaxPoolResult plain = max_pool2d(grid(4, 4), {.kernel = {2, 2}});
  CHECK(values(plain.output) == std::vector<double>{5, 7, 13, 15});
  CHECK(ints(plain.indices) == std::vector<std::int64_t>{5, 7, 13, 15});
  CHECK(plain.indices.dtype() == DType::i64);
  CHECK(plain.output.shape() == Shape{1, 1, 2, 2});

  // Padding is -inf, not 0: every value is <= 0, and no output is 0 unless a real 0 is in its window.
  const MaxPoolResult padded = max_pool2d(image({0, -1, -2, -3, -4, -5, -6, -7, -8}, 3, 3),
                                          {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}});
  CHECK(values(padded.output) == std::vector<double>{0, 0, -1, 0, 0, -1, -3, -3, -4});
  CHECK(ints(padded.indices) == std::vector<std::int64_t>{0, 0, 1, 0, 0, 1, 3, 3, 4});

  // ceil_mode: a third row and column of windows that hang over the edge.
  const MaxPoolResult ceil = max_pool2d(grid(5, 5), {.kernel = {2, 2}, .ceil_mode = true});
  CHECK(values(ceil.output) == std::vector<double>{6, 8, 9, 16, 18, 19, 21, 23, 24});
  CHECK(ints(ceil.indices) == std::vector<std::int64_t>{6, 8, 9, 16, 18, 19, 21, 23, 24});
  CHECK(max_pool2d(grid(5, 5), {.kernel = {2, 2}}).output.shape() == Shape{1, 1, 2, 2});

  // Dilation 2: taps two apart, so window (0, 0) sees rows {0, 2} and columns {0, 2}.
  //   20  1  8  0
  //    2  7  3 16
  //    4  5 12 11
  //   17 14 13 15
  const Tensor scrambled = image({20, 1, 8, 0, 2, 7, 3, 16, 4, 5, 12, 11, 17, 14, 13, 15}, 4, 4);
  const MaxPoolResult dilated = max_pool2d(scrambled, {.kernel = {2, 2}, .stride = {1, 1}, .dilation = {2, 2}});
  CHECK(values(dilated.output) == std::vector<double>{20, 11, 17, 16});
  CHECK(ints(dilated.indices) == std::vector<std::int64_t>{0, 11, 12, 7});
}

TEST_CASE("max_pool2d: ties keep the first element, NaN wins, all -inf reports the first tap") {
  CHECK(ints(max_pool2d(ones({1, 1, 4, 4}, {.dtype = DType::f64}), {.kernel = {2, 2}}).indices) ==
        std::vector<std::int64_t>{0, 2, 8, 10});
  const MaxPoolResult nan = max_pool2d(image({1, kNaN, 3, kNaN}, 1, 4), {.kernel = {1, 4}});
  CHECK(std::isnan(values(nan.output)[0]));
  CHECK(ints(nan.indices) == std::vector<std::int64_t>{3});  // the last NaN, as PyTorch's `val > max || isnan(val)`
  const MaxPoolResult nan_first = max_pool2d(image({kNaN, 7, 9, 8}, 1, 4), {.kernel = {1, 4}});
  CHECK(ints(nan_first.indices) == std::vector<std::int64_t>{0});  // a larger value after it does not replace it
  const MaxPoolResult all_inf = max_pool2d(image({-kInf, -kInf, -kInf, -kInf}, 2, 2), {.kernel = {2, 2}});
  CHECK(values(all_inf.output) == std::vector<double>{-kInf});
  CHECK(ints(all_inf.indices) == std::vector<std::int64_t>{0});
  // Dilation 5 over 4 columns with padding 1: the only window's taps are -1 and 4, neither inside.
  const Pool2dOptions empty_window{.kernel = {1, 2}, .stride = {1, 1}, .padding = {0, 1}, .dilation = {1, 5}};
  const MaxPoolResult none = max_pool2d(grid(1, 4), empty_window);
  CHECK(values(none.output) == std::vector<double>{-kInf});
  CHECK(ints(none.indices) == std::vector<std::int64_t>{-1});
  CHECK(values(max_pool2d_backward(ones({1, 1, 1, 1}, {.dtype = DType::f64}), none.indices, {1, 1, 1, 4}, empty_window)) ==
        std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("avg_pool2d: count_include_pad both ways, ceil_mode overhang, divisor_override") {
  CHECK(values(avg_pool2d(grid(3, 3), {.kernel = {2, 2}, .stride = {1, 1}})) == std::vector<double>{2, 3, 5, 6});
  // Padding 1, kernel 2, stride 2: windows of 1 or 2 real rows and columns, always 2 x 2 with padding.
  const Pool2dOptions padded{.kernel = {2, 2}, .padding = {1, 1}};
  CHECK(values(avg_pool2d(grid(3, 3), padded)) == std::vector<double>{0, 0.75, 2.25, 6});
  Pool2dOptions excluded = padded;
  excluded.count_include_pad = false;
  CHECK(values(avg_pool2d(grid(3, 3), excluded)) == std::vector<double>{0, 1.5, 4.5, 6});
  // ceil_mode with padding: the last window (rows 3..5 of a 4-row input, padding 1) counts its one
  // real row and one padding row, but not the row past the padding: PyTorch's 1/2, not 1/3.
  const Tensor ones4 = ones({1, 1, 4, 4}, {.dtype = DType::f64});
  Pool2dOptions overhang{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  const std::vector<double> r{2.0 / 3, 1.0, 0.5};  // per axis: real / counted
  std::vector<double> expected;
  for (double a : r)
    for (double b : r) expected.push_back(a * b);
  const std::vector<double> got = values(avg_pool2d(ones4, overhang));
  REQUIRE(got.size() == 9);
  for (std::size_t i = 0; i < 9; ++i) CHECK(got[i] == doctest::Approx(expected[i]));
  overhang.count_include_pad = false;
  CHECK(values(avg_pool2d(ones4, overhang)) == std::vector<double>(9, 1.0));
  overhang.divisor_override = 2;  // sums of 4, 6, 2, ... real elements, halved
  CHECK(values(avg_pool2d(ones4, overhang)) == std::vector<double>{2, 3, 1, 3, 4.5, 1.5, 1, 1.5, 0.5});
}

TEST_CASE("adaptive_avg_pool2d: PyTorch's windows, overlapping when sizes do not divide") {
  // Rows of 5 into 2: {0, 1, 2} and {2, 3, 4}; columns of 5 into 3: {0, 1}, {1, 2, 3}, {3, 4}.
  CHECK(values(adaptive_avg_pool2d(grid(5, 5), {2, 3})) == std::vector<double>{5.5, 7, 8.5, 15.5, 17, 18.5});
  CHECK(values(adaptive_avg_pool2d(grid(3, 4), {1, 1})) == std::vector<double>{5.5});  // global average
  // Larger than the input: 2 columns into 3 windows {0}, {0, 1}, {1}.
  CHECK(values(adaptive_avg_pool2d(image({2, 4}, 1, 2), {1, 3})) == std::vector<double>{2, 3, 4});
  CHECK(adaptive_avg_pool2d(zeros({2, 1280, 7, 7}), {1, 1}).shape() == Shape{2, 1280, 1, 1});  // MobileNetV2's head
}

// Note [Global average pooling] (kernels/cpu/pool.cpp): a dense input averaged to 1x1 takes a direct
// loop, a strided one the per-element reference; the two give the same bits.
TEST_CASE("global average pooling: the dense loop gives the reference's bits") {
  Generator generator(11);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(dtype);
    for (std::int64_t side : {1, 2, 4, 7}) {
      CAPTURE(side);
      const Tensor base = uniform({3, side, side, 600}, -2.0, 2.0, {.dtype = dtype}, &generator);
      const Tensor strided = base.permute({0, 3, 1, 2});  // [3, 600, side, side], channels innermost
      const Tensor dense = strided.contiguous();
      const Tensor global = adaptive_avg_pool2d(dense, {1, 1});
      CHECK(values(global) == values(adaptive_avg_pool2d(strided, {1, 1})));
      CHECK(values(avg_pool2d(dense, {.kernel = {side, side}})) == values(global));
      CHECK(values(avg_pool2d(strided, {.kernel = {side, side}})) == values(global));
    }
  }
  // 0, 1, ..., 15 average to 7.5.
  CHECK(values(adaptive_avg_pool2d(grid(4, 4), {1, 1})) == std::vector<double>{7.5});
}

TEST_CASE("global average pooling's backward gives the gather's bits, for every kind of whole-plane average") {
  // Each element gets its plane's gradient over the plane's size (Note [Global average pooling]);
  // pool_input_gradient is the per-element reference the CUDA gather uses.
  Generator generator(13);
  const auto check = [&]<typename T>(DType dtype) {
    for (std::int64_t side : {1, 2, 3}) {
      CAPTURE(side);
      const Shape input{2, 300, side, side};
      const Tensor grad = uniform({2, 300, 1, 1}, -2.0, 2.0, {.dtype = dtype}, &generator);
      const PoolGeometry g{.planes = 600, .h = {.in = side, .out = 1}, .w = {.in = side, .out = 1}};
      std::vector<double> expected;
      for (std::int64_t p = 0; p < g.planes; ++p)
        for (std::int64_t i = 0; i < side * side; ++i)
          expected.push_back(static_cast<double>(static_cast<T>(
              pool_input_gradient<T, T>(PoolKind::adaptive_avg, grad.data<T>() + p, nullptr, g, i / side, i % side))));
      CHECK(values(adaptive_avg_pool2d_backward(grad, input)) == expected);
      CHECK(values(avg_pool2d_backward(grad, input, {.kernel = {side, side}})) == expected);
    }
  };
  check.template operator()<float>(DType::f32);
  check.template operator()<double>(DType::f64);
}

TEST_CASE("pool backward: overlapping windows add up") {
  // The centre is the max of all four 2 x 2 windows: it receives all four gradients.
  const Tensor peak = image({0, 1, 0, 2, 9, 3, 0, 4, 0}, 3, 3);
  const Pool2dOptions overlapping{.kernel = {2, 2}, .stride = {1, 1}};
  const Tensor g = image({1, 2, 3, 4}, 2, 2);
  CHECK(values(max_pool2d_backward(g, max_pool2d(peak, overlapping).indices, {1, 1, 3, 3}, overlapping)) ==
        std::vector<double>{0, 0, 0, 0, 10, 0, 0, 0, 0});
  CHECK(values(avg_pool2d_backward(ones({1, 1, 2, 2}, {.dtype = DType::f64}), {1, 1, 3, 3}, overlapping)) ==
        std::vector<double>{0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
  // Adaptive 5 -> 3 columns: windows {0, 1}, {1, 2, 3}, {3, 4} share columns 1 and 3.
  const std::vector<double> adaptive =
      values(adaptive_avg_pool2d_backward(ones({1, 1, 1, 3}, {.dtype = DType::f64}), {1, 1, 1, 5}));
  const std::vector<double> expected{0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5};
  for (int i = 0; i < 5; ++i) CHECK(adaptive[i] == doctest::Approx(expected[i]));
}

TEST_CASE("pool backward against finite differences in double") {
  Generator generator(11);
  const Tensor x = uniform({2, 3, 5, 7}, -2.0, 2.0, {.dtype = DType::f64}, &generator);
  const Shape shape = x.shape();
  const std::vector<Pool2dOptions> max_options{
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}},
      {.kernel = {3, 3}, .stride = {1, 1}}};
  for (const Pool2dOptions& o : max_options) {
    const Tensor indices = max_pool2d(x, o).indices;
    check_gradient(
        x, [&](const Tensor& in) { return max_pool2d(in, o).output; },
        [&](const Tensor& g) { return max_pool2d_backward(g, indices, shape, o); }, generator);
  }
  const std::vector<Pool2dOptions> avg_options{
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = false},
      {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .divisor_override = 5}};
  for (const Pool2dOptions& o : avg_options)
    check_gradient(
        x, [&](const Tensor& in) { return avg_pool2d(in, o); },
        [&](const Tensor& g) { return avg_pool2d_backward(g, shape, o); }, generator);
  for (std::array<std::int64_t, 2> size : {std::array<std::int64_t, 2>{2, 4}, {1, 1}, {7, 9}})
    check_gradient(
        x, [&](const Tensor& in) { return adaptive_avg_pool2d(in, size); },
        [&](const Tensor& g) { return adaptive_avg_pool2d_backward(g, shape); }, generator);
}

TEST_CASE("the CUDA backward's gather, run on the CPU, matches the CPU scatter bit for bit") {
  Generator generator(5);
  const Tensor x = uniform({2, 3, 9, 8}, -1.0, 1.0, {.dtype = DType::f64}, &generator);
  const Pool2dOptions o{.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .ceil_mode = true};
  auto gather = [&](PoolKind kind, const Tensor& grad, const Tensor* indices, const PoolGeometry& g) {
    std::vector<double> out;
    const double* gd = grad.data<double>();
    const std::int64_t* id = indices ? indices->data<std::int64_t>() : nullptr;
    const std::int64_t plane = g.h.out * g.w.out;
    for (std::int64_t p = 0; p < g.planes; ++p)
      for (std::int64_t row = 0; row < g.h.in; ++row)
        for (std::int64_t col = 0; col < g.w.in; ++col)
          out.push_back(pool_input_gradient<double, double>(kind, gd + p * plane, id ? id + p * plane : nullptr, g, row, col));
    return out;
  };
  PoolGeometry g{.planes = 6, .h = {9, 5, 3, 2, 1, 1}, .w = {8, 9, 2, 1, 1, 1}, .count_include_pad = true};
  const MaxPoolResult m = max_pool2d(x, o);
  REQUIRE(m.output.shape() == Shape{2, 3, 5, 9});
  const Tensor grad = uniform({2, 3, 5, 9}, -1.0, 1.0, {.dtype = DType::f64}, &generator);
  CHECK(gather(PoolKind::max, grad, &m.indices, g) == values(max_pool2d_backward(grad, m.indices, x.shape(), o)));
  CHECK(gather(PoolKind::avg, grad, nullptr, g) == values(avg_pool2d_backward(grad, x.shape(), o)));
  PoolGeometry adaptive{.planes = 6, .h = {.in = 9, .out = 5}, .w = {.in = 8, .out = 9}};
  CHECK(gather(PoolKind::adaptive_avg, grad, nullptr, adaptive) == values(adaptive_avg_pool2d_backward(grad, x.shape())));
}

TEST_CASE("pooling reads strided inputs and single images") {
  Generator generator(3);
  const Tensor base = uniform({2, 5, 7, 3}, -1.0, 1.0, {.dtype = DType::f64}, &generator);
  const Tensor x = base.permute({0, 3, 1, 2});  // [2, 3, 5, 7], channels innermost in memory
  REQUIRE(!x.is_contiguous());
  const Tensor dense = x.contiguous();
  const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}};
  const MaxPoolResult strided = max_pool2d(x, o), reference = max_pool2d(dense, o);
  CHECK(values(strided.output) == values(reference.output));
  CHECK(ints(strided.indices) == ints(reference.indices));
  CHECK(values(avg_pool2d(x, o)) == values(avg_pool2d(dense, o)));
  CHECK(values(adaptive_avg_pool2d(x, {3, 4})) == values(adaptive_avg_pool2d(dense, {3, 4})));
  const Tensor every_other = dense.slice(3, 0, 7, 2);  // [2, 3, 5, 4], column stride 2
  CHECK(values(avg_pool2d(every_other, o)) == values(avg_pool2d(every_other.contiguous(), o)));
  const Tensor single = x.select(0, 1);  // [3, 5, 7]
  const MaxPoolResult one = max_pool2d(single, o);
  CHECK(one.output.shape() == Shape{3, 3, 7});
  CHECK(values(one.output) == values(reference.output.select(0, 1)));
  CHECK(values(max_pool2d_backward(ones(one.output.shape(), {.dtype = DType::f64}), one.indices, single.shape(), o)).size() ==
        105);
  CHECK(max_pool2d(zeros({0, 3, 5, 5}), {.kernel = {2, 2}}).output.shape() == Shape{0, 3, 2, 2});  // an empty batch
}

TEST_CASE("pooling in f16 and bf16 computes in float and rounds once") {
  Generator generator(8);
  const Pool2dOptions o{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const Tensor x = uniform({2, 3, 7, 6}, -4.0, 4.0, {.dtype = dtype}, &generator);
    const Tensor wide = x.to(DType::f32);  // exact: f32 holds every f16 and bf16
    // The same float arithmetic on the same values, rounded to the 16-bit type once at the end.
    auto narrow = [&](const Tensor& t) { return values(t.to(dtype)); };
    const MaxPoolResult m = max_pool2d(x, o);
    CHECK(m.output.dtype() == dtype);
    CHECK(values(m.output) == narrow(max_pool2d(wide, o).output));
    CHECK(ints(m.indices) == ints(max_pool2d(wide, o).indices));
    CHECK(values(avg_pool2d(x, o)) == narrow(avg_pool2d(wide, o)));
    CHECK(values(adaptive_avg_pool2d(x, {4, 5})) == narrow(adaptive_avg_pool2d(wide, {4, 5})));
    const Tensor g = uniform(m.output.shape(), -1.0, 1.0, {.dtype = dtype}, &generator);
    CHECK(values(max_pool2d_backward(g, m.indices, x.shape(), o)) ==
          narrow(max_pool2d_backward(g.to(DType::f32), m.indices, x.shape(), o)));
    CHECK(values(avg_pool2d_backward(g, x.shape(), o)) == narrow(avg_pool2d_backward(g.to(DType::f32), x.shape(), o)));
  }
}

TEST_CASE("pooling rejects bad inputs with typed errors naming the op and shapes") {
  const Tensor x = zeros({2, 3, 8, 8});
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({8, 8}), {.kernel = {2, 2}}),
                       doctest::Contains("max_pool2d: expects an input of shape [N, C, H, W] or [C, H, W], got [8, 8]"),
                       ShapeError);
  CHECK_THROWS_AS(avg_pool2d(zeros({1, 2, 3, 8, 8}), {.kernel = {2, 2}}), ShapeError);
  CHECK_THROWS_AS(max_pool2d(zeros({2, 3, 0, 8}), {.kernel = {2, 2}}), ShapeError);
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({2, 3, 8, 8}, {.dtype = DType::i32}), {.kernel = {2, 2}}),
                       doctest::Contains("needs a floating dtype, got i32 (shape [2, 3, 8, 8])"), DTypeError);
  CHECK_THROWS_AS(max_pool2d(Tensor(), {.kernel = {2, 2}}), ValueError);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {.kernel = {0, 2}}),
                       doctest::Contains("max_pool2d: kernel sizes must be >= 1 (kernel [0, 2], stride [0, 2]"), ValueError);
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {-1, 2}}), ValueError);
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {2, 2}, .stride = {-1, 1}}), ValueError);
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {2, 2}, .stride = {0, 1}}), ValueError);  // one 0 is not "the kernel"
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {2, 2}, .padding = {-1, 0}}), ValueError);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {.kernel = {3, 3}, .padding = {2, 1}}),
                       doctest::Contains("padding must be between 0 and half the kernel size"), ValueError);
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {2, 2}, .dilation = {0, 1}}), ValueError);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {.kernel = {9, 2}}),
                       doctest::Contains("the output would be 0 x 4; the window does not fit"), ShapeError);
  CHECK_THROWS_AS(max_pool2d(x, {.kernel = {2, 2}, .dilation = {8, 1}}), ShapeError);  // an extent of 9 rows
  CHECK_THROWS_WITH_AS(avg_pool2d(x, {.kernel = {2, 2}, .dilation = {2, 2}}),
                       doctest::Contains("avg_pool2d: average pooling has no dilation"), ValueError);
  CHECK_THROWS_AS(avg_pool2d(x, {.kernel = {2, 2}, .divisor_override = -1}), ValueError);
  CHECK_THROWS_AS(adaptive_avg_pool2d(x, {0, 1}), ValueError);
  CHECK_THROWS_AS(adaptive_avg_pool2d(zeros({8}), {1, 1}), ShapeError);
  CHECK_THROWS_AS(adaptive_avg_pool2d(zeros({1, 1, 4, 4}, {.dtype = DType::u8}), {1, 1}), DTypeError);

  const Pool2dOptions o{.kernel = {2, 2}};
  const MaxPoolResult m = max_pool2d(x, o);
  CHECK_THROWS_WITH_AS(avg_pool2d_backward(zeros({2, 3, 5, 4}), x.shape(), o),
                       doctest::Contains("avg_pool2d_backward: grad_output has shape [2, 3, 5, 4] but the output for "
                                         "input shape [2, 3, 8, 8] has shape [2, 3, 4, 4]"),
                       ShapeError);
  CHECK_THROWS_AS(max_pool2d_backward(m.output, m.indices.to(DType::i32), x.shape(), o), DTypeError);
  CHECK_THROWS_AS(max_pool2d_backward(m.output, Tensor(), x.shape(), o), ValueError);
  CHECK_THROWS_AS(max_pool2d_backward(m.output, zeros({2, 3, 4, 3}, {.dtype = DType::i64}), x.shape(), o), ShapeError);
  CHECK_THROWS_AS(max_pool2d_backward(m.output, m.indices, {2, 3, 8, 8}, {.kernel = {0, 2}}), ValueError);
  CHECK_THROWS_AS(max_pool2d_backward(m.output.to(DType::i64), m.indices, x.shape(), o), DTypeError);
  CHECK_THROWS_AS(adaptive_avg_pool2d_backward(zeros({2, 3, 2}), x.shape()), ShapeError);
  CHECK_THROWS_AS(adaptive_avg_pool2d_backward(zeros({2, 4, 2, 2}), x.shape()), ShapeError);
  CHECK_THROWS_AS(adaptive_avg_pool2d_backward(zeros({2, 3, 2, 2}), {3, 8, 8, 8, 8}), ShapeError);
}
