// pad2d and crop2d on the CPU: hand-written results for padding, cropping and both at once, any
// dtype and batch rank, the backward of each as the other (checked as the adjoint: <op(x), g> ==
// <x, op_backward(g)> for random x and g, the definition of the gradient of a linear op), and errors.
#include <doctest/doctest.h>

#include "core/random.h"
#include "kernels/pad.h"

using namespace frugal;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
// 1, 2, 3, ... in a tensor of `shape` (f64).
Tensor counting(Shape shape) {
  return arange(1.0, static_cast<double>(shape_numel(shape)) + 1, 1.0, {.dtype = DType::f64}).view(shape);
}
double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double total = 0;
  for (std::size_t i = 0; i < x.size(); ++i) total += x[i] * y[i];
  return total;
}
}  // namespace

TEST_CASE("pad2d: padding, cropping and both, on the last two dims") {
  const Tensor x = counting({2, 3});  // 1 2 3 / 4 5 6
  const Tensor padded = pad2d(x, {.top = 1, .left = 2, .right = 1}, 9.0);
  CHECK(padded.shape() == Shape{3, 6});
  CHECK(values(padded) == std::vector<double>{9, 9, 9, 9, 9, 9,  //
                                              9, 9, 1, 2, 3, 9,  //
                                              9, 9, 4, 5, 6, 9});
  CHECK(values(pad2d(x, {.bottom = -1, .left = -1})) == std::vector<double>{2, 3});  // a crop: no fill
  // Crop a column on the left, pad one on the right, and pad a zero row on top.
  CHECK(values(pad2d(x, {.top = 1, .left = -1, .right = 1})) == std::vector<double>{0, 0, 0, 2, 3, 0, 5, 6, 0});
  // Everything cropped away on one axis, the result all padding.
  CHECK(values(pad2d(x, {.top = -2, .bottom = 1}, 7.0)) == std::vector<double>{7, 7, 7});
  // A batch of images, each padded alike; a u8 image keeps its dtype.
  const Tensor batch = counting({2, 1, 1, 2});
  CHECK(values(pad2d(batch, {.top = 1}, -1.0)) == std::vector<double>{-1, -1, 1, 2, -1, -1, 3, 4});
  const Tensor bytes = pad2d(full({1, 1}, 200.0, {.dtype = DType::u8}), {1, 1, 1, 1});
  CHECK(bytes.dtype() == DType::u8);
  CHECK(values(bytes) == std::vector<double>{0, 0, 0, 0, 200, 0, 0, 0, 0});
  const Tensor strided = counting({3, 2}).t();  // 1 3 5 / 2 4 6, not contiguous
  CHECK(values(pad2d(strided, {.right = 1})) == std::vector<double>{1, 3, 5, 0, 2, 4, 6, 0});
}

TEST_CASE("crop2d: a contiguous copy that does not keep the batch alive") {
  const Tensor x = counting({2, 4, 5});
  const Tensor c = crop2d(x, 1, 2, 2, 3);
  CHECK(c.shape() == Shape{2, 2, 3});
  CHECK(values(c) == std::vector<double>{8, 9, 10, 13, 14, 15, 28, 29, 30, 33, 34, 35});
  CHECK(c.is_contiguous());
  CHECK(!c.shares_storage_with(x));
  // Whole rows of one image are already contiguous as a view; crop2d still copies.
  const Tensor rows = crop2d(x.select(0, 0), 1, 0, 2, 5);
  CHECK(!rows.shares_storage_with(x));
  CHECK(values(rows) == values(x.select(0, 0).narrow(0, 1, 2)));
}

TEST_CASE("pad2d and crop2d backward are each other, as adjoints") {
  Generator generator(2);
  const Tensor x = uniform({2, 3, 5, 4}, -1.0, 1.0, {.dtype = DType::f64}, &generator);
  for (Padding2d a : {Padding2d{1, 2, 0, 3}, Padding2d{-1, 2, 1, -2}, Padding2d{0, -4, -3, 0}}) {
    INFO("amounts ", a.top, " ", a.bottom, " ", a.left, " ", a.right);
    const Tensor y = pad2d(x, a);
    const Tensor g = uniform(y.shape(), -1.0, 1.0, {.dtype = DType::f64}, &generator);
    const Tensor back = pad2d_backward(g, a);
    CHECK(back.shape() == x.shape());
    CHECK(dot(y, g) == doctest::Approx(dot(x, back)).epsilon(1e-12));
    CHECK(values(back) == values(pad2d(g, {-a.top, -a.bottom, -a.left, -a.right})));
  }
  const Tensor c = crop2d(x, 1, 1, 3, 2);
  const Tensor g = uniform(c.shape(), -1.0, 1.0, {.dtype = DType::f64}, &generator);
  const Tensor back = crop2d_backward(g, x.shape(), 1, 1);
  CHECK(back.shape() == x.shape());
  CHECK(dot(c, g) == doctest::Approx(dot(x, back)).epsilon(1e-12));
  CHECK(values(back) == values(pad2d(g, {1, 1, 1, 1})));
}

TEST_CASE("pad2d and crop2d reject what does not fit") {
  const Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(pad2d(zeros({5}), {1, 1, 1, 1}), doctest::Contains("pad2d: needs at least 2 dims (H, W), got shape [5]"),
                       ShapeError);
  CHECK_THROWS_AS(crop2d(zeros({5}), 0, 0, 1, 1), ShapeError);
  CHECK_THROWS_AS(pad2d(Tensor(), {}), ValueError);
  CHECK_THROWS_WITH_AS(pad2d(x, {.top = -2, .bottom = -1}), doctest::Contains("leaves 0 rows of shape [2, 3, 4]"), ShapeError);
  CHECK_THROWS_AS(pad2d(x, {.left = -5, .right = 2}), ShapeError);  // crops 5 of 4 columns
  CHECK_THROWS_WITH_AS(crop2d(x, 1, 2, 3, 2),
                       doctest::Contains("crop2d: the 3 x 2 window at (1, 2) is outside the image of shape [2, 3, 4]"),
                       IndexError);
  CHECK_THROWS_AS(crop2d(x, -1, 0, 1, 1), IndexError);
  CHECK_THROWS_AS(crop2d(x, 0, 3, 1, 2), IndexError);
  CHECK_THROWS_AS(crop2d(x, 0, 0, 0, 2), ValueError);
  CHECK_THROWS_AS(crop2d_backward(zeros({2, 2, 2}), {3, 3, 4}, 0, 0), ShapeError);  // batch dims differ
  CHECK_THROWS_AS(crop2d_backward(zeros({2, 2, 2}), {2, 3, 4}, 2, 0), IndexError);
}
