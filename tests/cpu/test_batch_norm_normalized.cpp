// Batch norm from a saved xhat (kernels/batch_norm.h, Note [One saved tensor per BN-ReLU6] in
// kernels/batch_norm_ops.h), checked against the batch norm that saves x: the backward from xhat
// against batch_norm_backward (f64 to 1e-10, f32 to its rounding), batch_norm_affine against the
// forward's output (to the bit), the forward's output and running statistics against
// batch_norm_train's, the f32 fast loops against the reference and across thread counts, the meta
// device's shapes, and the errors.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/random.h"
#include "kernels/activation_codec.h"
#include "kernels/batch_norm.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/elementwise.h"

using namespace frugal;

namespace {
constexpr double kEps = 1e-5, kMomentum = 0.1;
// [N, C], images, and 1x1 planes (which the fast CPU loops treat apart).
const std::array<Shape, 3> kShapes{Shape{6, 3}, Shape{2, 3, 4, 5}, Shape{5, 3, 1, 1}};

// Operands whose outputs reach both sides of ReLU6's [0, 6] (x in [-2, 4], bias in [-1, 3]), with
// weights away from 0, negative in odd channels.
struct Operands {
  Tensor x, grad, weight, bias, running_mean, running_var;
};

Operands operands(const Shape& shape, DType dtype) {
  const Shape channel{shape[1]};
  std::vector<double> signs(static_cast<std::size_t>(shape[1]));
  for (std::size_t c = 0; c < signs.size(); ++c) signs[c] = c % 2 == 0 ? 1.0 : -1.0;
  const Tensor sign = from_vector(signs, channel).to(dtype);
  return {uniform(shape, -2.0, 4.0, {.dtype = dtype}), uniform(shape, -1.0, 1.0, {.dtype = dtype}),
          mul(uniform(channel, 0.5, 2.5, {.dtype = dtype}), sign), uniform(channel, -1.0, 3.0, {.dtype = dtype}),
          uniform(channel, -1.0, 1.0, {.dtype = dtype}), uniform(channel, 0.5, 2.0, {.dtype = dtype})};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// The worst |got - expected|, relative to the largest |expected| (a gradient's small elements are
// differences of larger terms, so their error scales with the tensor's magnitude, not their own).
double relative_error(const Tensor& got, const Tensor& expected) {
  const auto g = got.to_vector<double>(), e = expected.to_vector<double>();
  double worst = 0.0, largest = 0.0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    worst = std::max(worst, std::isnan(g[i]) ? INFINITY : std::abs(g[i] - e[i]));
    largest = std::max(largest, std::abs(e[i]));
  }
  return worst / std::max(largest, 1e-300);
}

// Both backwards for one configuration: from x (with the fused output) and from xhat.
struct BothGrads {
  BatchNormGrads from_x, from_xhat;
};

BothGrads both_backwards(const Operands& o, bool training, bool relu6, bool affine) {
  const Tensor w = affine ? o.weight : Tensor(), b = affine ? o.bias : Tensor();
  if (training) {
    const BatchNormOutput ref = batch_norm_train(o.x, w, b, Tensor(), Tensor(), kMomentum, kEps, relu6);
    const BatchNormNormalizedOutput ours =
        batch_norm_train_normalized(o.x, w, b, Tensor(), Tensor(), kMomentum, kEps, relu6);
    return {batch_norm_backward(o.grad, o.x, w, ref.save_mean, ref.save_invstd, true, relu6 ? ref.output : Tensor()),
            batch_norm_backward_normalized(o.grad, ours.normalized, w, b, ours.save_invstd, true, relu6)};
  }
  const Tensor ref = batch_norm_eval(o.x, w, b, o.running_mean, o.running_var, kEps, relu6);
  const BatchNormNormalizedOutput ours =
      batch_norm_eval_normalized(o.x, w, b, o.running_mean, o.running_var, kEps, relu6);
  return {batch_norm_backward(o.grad, o.x, w, o.running_mean, batch_norm_invstd(o.running_var, kEps), false,
                              relu6 ? ref : Tensor()),
          batch_norm_backward_normalized(o.grad, ours.normalized, w, b, ours.save_invstd, false, relu6)};
}

// Every shape, mode, ReLU6 and affine combination: the gradients from xhat within `tolerance`.
void check_backward_matches(DType dtype, double tolerance) {
  for (const Shape& shape : kShapes) {
    const Operands o = operands(shape, dtype);
    for (bool training : {true, false})
      for (bool relu6 : {false, true})
        for (bool affine : {true, false}) {
          CAPTURE(shape_str(shape));
          CAPTURE(training);
          CAPTURE(relu6);
          CAPTURE(affine);
          const BothGrads g = both_backwards(o, training, relu6, affine);
          CHECK(relative_error(g.from_xhat.input, g.from_x.input) <= tolerance);
          REQUIRE(g.from_xhat.weight.defined() == affine);
          if (!affine) continue;
          CHECK(relative_error(g.from_xhat.weight, g.from_x.weight) <= tolerance);
          CHECK(relative_error(g.from_xhat.bias, g.from_x.bias) <= tolerance);
        }
  }
}

std::int64_t meta_allocated() { return default_caching_allocator(Device::meta()).caching_stats().allocated_bytes.current; }
}  // namespace

TEST_CASE("batch norm from xhat: f64 gradients equal batch_norm_backward's to 1e-10") {
  check_backward_matches(DType::f64, 1e-10);
}

TEST_CASE("batch norm from xhat: f32 gradients within f32 rounding of batch_norm_backward's") {
  // Both sides compute xhat = (x - mean) * invstd in f32 the same way and sum in double; what
  // differs is the order of the sums (the fast loops against the reference), with the f32
  // roundings that go with it, then the few f32 roundings of dx = scale * (dy - m1 - xhat * m2).
  // A channel's sum(dy * xhat) cancels: its error is relative to sum |dy * xhat|, which can be
  // several times the largest gradient (measured: 17 units of f32 roundoff, 2^-24, for some draws
  // on [2, 3, 4, 5]). 64 units bound that with room; an error in the algebra shows as 1e-3 or more.
  check_backward_matches(DType::f32, 64 * std::ldexp(1.0, -24));
}

TEST_CASE("batch norm from xhat: batch_norm_affine recomputes the forward's output to the bit") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;  // 16-bit input keeps f32 parameters
    const Operands o = operands({4, 3, 3, 5}, dtype);
    const Tensor w = o.weight.to(stats), b = o.bias.to(stats), rm = o.running_mean.to(stats), rv = o.running_var.to(stats);
    for (bool relu6 : {false, true}) {
      const auto train = batch_norm_train_normalized(o.x, w, b, Tensor(), Tensor(), kMomentum, kEps, relu6);
      CHECK(same_bits(batch_norm_affine(train.normalized, w, b, relu6), train.output));
      const auto eval = batch_norm_eval_normalized(o.x, w, b, rm, rv, kEps, relu6);
      CHECK(same_bits(batch_norm_affine(eval.normalized, w, b, relu6), eval.output));
      const auto plain = batch_norm_train_normalized(o.x, Tensor(), Tensor(), Tensor(), Tensor(), kMomentum, kEps, relu6);
      CHECK(same_bits(batch_norm_affine(plain.normalized, Tensor(), Tensor(), relu6), plain.output));
    }
  }
}

TEST_CASE("batch norm from xhat: the forward equals batch_norm_train's to f32 rounding, statistics to the bit") {
  // Shapes for each of the CPU's f32 statistics paths: planes under 16 elements, the per-plane
  // loops, and planes of 64 or more that batch_norm_train sweeps channel by channel.
  for (const Shape& shape : {Shape{6, 3}, Shape{2, 3, 4, 5}, Shape{3, 3, 9, 9}})
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(shape_str(shape));
      CAPTURE(dtype);
      const Operands o = operands(shape, dtype);
      const Tensor rm_ref = o.running_mean.clone(), rv_ref = o.running_var.clone();
      const Tensor rm = o.running_mean.clone(), rv = o.running_var.clone();
      const auto version = rm.storage()->version();
      const BatchNormOutput ref = batch_norm_train(o.x, o.weight, o.bias, rm_ref, rv_ref, kMomentum, kEps);
      const auto ours = batch_norm_train_normalized(o.x, o.weight, o.bias, rm, rv, kMomentum, kEps);
      CHECK(same_bits(ours.save_mean, ref.save_mean));
      CHECK(same_bits(ours.save_invstd, ref.save_invstd));
      CHECK(same_bits(rm, rm_ref));
      CHECK(same_bits(rv, rv_ref));
      CHECK(rm.storage()->version() == version + 1);
      // y = weight * round(xhat) + bias against (x - mean) * round(invstd * weight) + bias: each
      // rounds three times, so they agree to a few units of roundoff of |weight * xhat| + |bias|.
      const double u = dtype == DType::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
      const auto got = ours.output.to_vector<double>(), expected = ref.output.to_vector<double>();
      const auto xhat = ours.normalized.to_vector<double>(), w = o.weight.to_vector<double>(), b = o.bias.to_vector<double>();
      const std::int64_t channels = shape[1], spatial = ours.output.numel() / (shape[0] * channels);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / spatial) % channels);
        REQUIRE(std::abs(got[i] - expected[i]) <= 8 * u * (std::abs(w[c] * xhat[i]) + std::abs(b[c])));
      }
    }
}

namespace {
// Every output of the xhat path for one f32 configuration: forward, affine, backward. The forward
// in eval mode, so that the fast loops and the reference normalise with the same statistics (the
// batch's they sum in different orders); the backward in training mode, with the sums.
std::vector<Tensor> xhat_path(const Operands& o, bool relu6) {
  const auto out = batch_norm_eval_normalized(o.x, o.weight, o.bias, o.running_mean, o.running_var, kEps, relu6);
  const BatchNormGrads g =
      batch_norm_backward_normalized(o.grad, out.normalized, o.weight, o.bias, out.save_invstd, true, relu6);
  return {out.normalized, out.output, batch_norm_affine(out.normalized, o.weight, o.bias, relu6), g.input, g.weight,
          g.bias};
}

// f32 shapes for each of the fast loops' cases: planes under 16 elements, 1x1, the per-plane loops,
// and planes longer than a 4096-element block.
const std::array<Shape, 4> kFastShapes{Shape{6, 3}, Shape{5, 3, 1, 1}, Shape{2, 3, 4, 5}, Shape{2, 2, 70, 70}};
}  // namespace

TEST_CASE("batch norm from xhat: the f32 fast loops give the reference's bits, the sums to f32 rounding") {
  for (const Shape& shape : kFastShapes)
    for (bool relu6 : {false, true}) {
      CAPTURE(shape_str(shape));
      CAPTURE(relu6);
      const Operands o = operands(shape, DType::f32);
      const std::vector<Tensor> fast = xhat_path(o, relu6);
      set_batch_norm_cpu_reference(true);
      const std::vector<Tensor> reference = xhat_path(o, relu6);
      set_batch_norm_cpu_reference(false);
      for (std::size_t i = 0; i < 3; ++i) CHECK(same_bits(fast[i], reference[i]));  // xhat, y, affine: elementwise
      // The fast loops sum in f32 lanes folded into double, the reference in double: each sum may
      // differ by an f32 rounding of its partial sums, and the input gradient through them.
      for (std::size_t i = 3; i < fast.size(); ++i) CHECK(relative_error(fast[i], reference[i]) <= 1e-5);
    }
}

TEST_CASE("batch norm from xhat: the same bits on 1, 2 and 3 threads") {
  const int saved = omp_get_max_threads();
  for (const Shape& shape : kFastShapes) {
    CAPTURE(shape_str(shape));
    const Operands o = operands(shape, DType::f32);
    omp_set_num_threads(1);
    const std::vector<Tensor> one = xhat_path(o, true);
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      const std::vector<Tensor> many = xhat_path(o, true);
      for (std::size_t i = 0; i < one.size(); ++i) CHECK(same_bits(many[i], one[i]));
    }
  }
  omp_set_num_threads(saved);
}

namespace {
// f32 shapes for the compact xhat: planes under 16 elements and of 20 (not a multiple of 8: the mask
// is packed apart), of 16 (the per-plane loops), of 24 (a row of 16 lanes and 8 left over), 64 (the
// per-channel sweep), longer than a block, and longer than a block with 8 left over in its last one.
const std::array<Shape, 8> kCompactShapes{Shape{6, 3},       Shape{5, 3, 1, 1}, Shape{2, 3, 4, 5},
                                          Shape{4, 3, 4, 4}, Shape{3, 4, 4, 6}, Shape{3, 4, 8, 8},
                                          Shape{2, 2, 72, 72}, Shape{2, 2, 54, 76}};

// One forward keeping xhat compact against the forward that keeps it in f32 followed by the
// separate passes (the cast, pack_mask_between); the rebuild and both backwards likewise.
void check_compact_matches_separate_passes(const Operands& o, bool training, bool relu6, bool mask) {
  const NormalizedForm form{.bf16 = true, .relu6_mask = mask};
  auto forward = [&](NormalizedForm f, const Tensor& running_mean, const Tensor& running_var) {
    return training ? batch_norm_train_normalized(o.x, o.weight, o.bias, running_mean, running_var, kMomentum, kEps, relu6, f)
                    : batch_norm_eval_normalized(o.x, o.weight, o.bias, running_mean, running_var, kEps, relu6, f);
  };
  const Tensor mean_a = o.running_mean.clone(), var_a = o.running_var.clone();
  const Tensor mean_b = o.running_mean.clone(), var_b = o.running_var.clone();
  const BatchNormNormalizedOutput exact = forward({}, mean_a, var_a), compact = forward(form, mean_b, var_b);
  CHECK(same_bits(compact.output, exact.output));
  CHECK(same_bits(compact.normalized, exact.normalized.to(DType::bf16)));
  CHECK(same_bits(mean_b, mean_a));
  CHECK(same_bits(var_b, var_a));
  REQUIRE(compact.mask.defined() == (mask && relu6));
  if (compact.mask.defined()) CHECK(same_bits(compact.mask, pack_mask_between(exact.output, 0.0, 6.0)));
  const Tensor widened = compact.normalized.to(DType::f32);
  CHECK(same_bits(batch_norm_affine(compact.normalized, o.weight, o.bias, relu6, DType::f32),
                  batch_norm_affine(widened, o.weight, o.bias, relu6)));
  const BatchNormGrads got = batch_norm_backward_normalized(o.grad, compact.normalized, o.weight, o.bias,
                                                            compact.save_invstd, training, relu6, compact.mask);
  const Tensor gated = compact.mask.defined() ? apply_packed_mask(o.grad, compact.mask) : o.grad;
  const BatchNormGrads expected = batch_norm_backward_normalized(gated, widened, o.weight, o.bias, compact.save_invstd,
                                                                 training, relu6 && !compact.mask.defined());
  CHECK(same_bits(got.input, expected.input));
  CHECK(same_bits(got.weight, expected.weight));
  CHECK(same_bits(got.bias, expected.bias));
}
}  // namespace

TEST_CASE("batch norm from a compact xhat: bf16 and bits in the forward's own pass give the separate passes' bits") {
  for (const Shape& shape : kCompactShapes) {
    const Operands o = operands(shape, DType::f32);
    for (bool training : {true, false})
      for (bool relu6 : {false, true})
        for (bool mask : {false, true}) {
          CAPTURE(shape_str(shape));
          CAPTURE(training);
          CAPTURE(relu6);
          CAPTURE(mask);
          check_compact_matches_separate_passes(o, training, relu6, mask);
        }
  }
}

TEST_CASE("batch norm from an f32 xhat with bits: gating dy in the backward's loops gives the separate passes' bits") {
  // An f32 xhat with the mask as bits (an xhat decoded from 8-bit codes: without compression an
  // exact xhat gives the mask itself and keeps no bits): where the planes allow, dy is gated in the
  // backward's own loops, with no gated copy of dy (checked by the allocator's peak), against
  // apply_packed_mask and then the backward without ReLU6. With and without affine parameters, in
  // both modes, on 1 and 3 threads.
  Allocator& allocator = allocator_for(Device::cpu());
  const int saved = omp_get_max_threads();
  for (const Shape& shape : kCompactShapes) {
    const Operands o = operands(shape, DType::f32);
    const auto out = batch_norm_train_normalized(o.x, o.weight, o.bias, Tensor(), Tensor(), kMomentum, kEps, true);
    const Tensor bits = pack_mask_between(out.output, 0.0, 6.0), gated = apply_packed_mask(o.grad, bits);
    for (bool affine : {true, false})
      for (bool training : {true, false})
        for (int threads : {1, 3}) {
          CAPTURE(shape_str(shape));
          CAPTURE(affine);
          CAPTURE(training);
          CAPTURE(threads);
          omp_set_num_threads(threads);
          const Tensor w = affine ? o.weight : Tensor(), b = affine ? o.bias : Tensor();
          allocator.reset_peak_stats();
          const std::int64_t before = allocator.stats().requested_bytes.current;
          const BatchNormGrads got =
              batch_norm_backward_normalized(o.grad, out.normalized, w, b, out.save_invstd, training, true, bits);
          const std::int64_t added = allocator.stats().requested_bytes.peak - before;
          const BatchNormShape bn{.batch = shape[0], .channels = shape[1], .spatial = o.x.numel() / (shape[0] * shape[1])};
          const std::int64_t map = static_cast<std::int64_t>(o.grad.nbytes());  // the input gradient; a gated copy as much
          CHECK((added < 2 * map) == cpu::fast::keeps_compact_xhat(DType::f32, bn, true));
          const BatchNormGrads expected =
              batch_norm_backward_normalized(gated, out.normalized, w, b, out.save_invstd, training, false);
          CHECK(same_bits(got.input, expected.input));
          if (affine) {
            CHECK(same_bits(got.weight, expected.weight));
            CHECK(same_bits(got.bias, expected.bias));
          }
        }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("batch norm from a compact xhat: the gradient gated by the bits equals the gradient through ReLU6") {
  // Where xhat is exact the bits and the recomputed output pass the same elements: the bits carry
  // the forward's mask, not an approximation of it.
  const Operands o = operands({3, 4, 8, 8}, DType::f32);
  const auto out = batch_norm_train_normalized(o.x, o.weight, o.bias, Tensor(), Tensor(), kMomentum, kEps, true);
  const Tensor bits = pack_mask_between(out.output, 0.0, 6.0);
  const BatchNormGrads gated = batch_norm_backward_normalized(o.grad, out.normalized, o.weight, o.bias, out.save_invstd,
                                                              true, true, bits);
  const BatchNormGrads through = batch_norm_backward_normalized(o.grad, out.normalized, o.weight, o.bias,
                                                                out.save_invstd, true, true);
  CHECK(same_bits(gated.input, through.input));
  CHECK(same_bits(gated.weight, through.weight));
}

TEST_CASE("batch norm from xhat on the meta device: shapes and allocations, no work") {
  const std::int64_t before = meta_allocated();
  {
    const TensorOptions meta{.dtype = DType::f32, .device = Device::meta()};
    const Tensor x = empty({4, 3, 5, 5}, meta), w = empty({3}, meta), b = empty({3}, meta);
    const Tensor rm = empty({3}, meta), rv = empty({3}, meta);
    for (const auto& out : {batch_norm_train_normalized(x, w, b, rm, rv, kMomentum, kEps, true),
                            batch_norm_eval_normalized(x, w, b, rm, rv, kEps, true)}) {
      CHECK(out.output.shape() == x.shape());
      CHECK(out.normalized.shape() == x.shape());
      CHECK(out.normalized.device() == Device::meta());
      CHECK(out.save_invstd.shape() == Shape{3});
      CHECK(out.save_mean.device() == Device::meta());
      CHECK(meta_allocated() - before >= static_cast<std::int64_t>(x.nbytes() + 2 * out.output.nbytes()));
      CHECK(batch_norm_affine(out.normalized, w, b, true).shape() == x.shape());
      const BatchNormGrads grads = batch_norm_backward_normalized(x, out.normalized, w, b, out.save_invstd, true, true);
      CHECK(grads.input.shape() == x.shape());
      CHECK(grads.input.device() == Device::meta());
      CHECK(grads.weight.shape() == Shape{3});
      CHECK(grads.bias.dtype() == DType::f32);
    }
  }
  {  // a compact xhat: bf16 and the mask's bytes, as the CPU allocates them
    const TensorOptions meta{.dtype = DType::f32, .device = Device::meta()};
    const Tensor x = empty({4, 3, 8, 8}, meta), w = empty({3}, meta), b = empty({3}, meta);
    const auto out = batch_norm_train_normalized(x, w, b, Tensor(), Tensor(), kMomentum, kEps, true,
                                                 {.bf16 = true, .relu6_mask = true});
    CHECK(out.normalized.dtype() == DType::bf16);
    CHECK(out.mask.shape() == Shape{4 * 3 * 8 * 8 / 8});
    CHECK(batch_norm_affine(out.normalized, w, b, true, DType::f32).dtype() == DType::f32);
    CHECK(batch_norm_backward_normalized(x, out.normalized, w, b, out.save_invstd, true, true, out.mask).input.dtype() ==
          DType::f32);
  }
  CHECK(meta_allocated() == before);
}

TEST_CASE("batch norm from xhat names the op and the operands on bad input") {
  const Operands o = operands({4, 3, 2}, DType::f64);
  const auto out = batch_norm_train_normalized(o.x, o.weight, o.bias, Tensor(), Tensor(), kMomentum, kEps);
  const Tensor& xhat = out.normalized;
  CHECK_THROWS_WITH_AS(batch_norm_backward_normalized(zeros({4, 3, 3}, {.dtype = DType::f64}), xhat, o.weight, o.bias,
                                                      out.save_invstd, true),
                       doctest::Contains("batch_norm_backward_normalized"), ShapeError);
  CHECK_THROWS_AS(batch_norm_backward_normalized(o.grad.to(DType::f32), xhat, o.weight, o.bias, out.save_invstd, true),
                  DTypeError);
  CHECK_THROWS_WITH_AS(
      batch_norm_backward_normalized(o.grad, xhat, zeros({4}, {.dtype = DType::f64}), zeros({4}, {.dtype = DType::f64}),
                                     out.save_invstd, true),
      doctest::Contains("weight of shape [4] does not match the 3 channels of an input of shape [4, 3, 2]"), ShapeError);
  CHECK_THROWS_AS(batch_norm_backward_normalized(o.grad, xhat, o.weight, o.bias, zeros({2}, {.dtype = DType::f64}), true),
                  ShapeError);
  CHECK_THROWS_AS(batch_norm_backward_normalized(o.grad, xhat, o.weight, o.bias, Tensor(), true), ValueError);
  CHECK_THROWS_AS(batch_norm_backward_normalized(o.grad, xhat, o.weight, Tensor(), out.save_invstd, true), ValueError);
  CHECK_THROWS_AS(batch_norm_affine(xhat, o.weight.to(DType::f32), o.bias.to(DType::f32)), DTypeError);
  CHECK_THROWS_AS(batch_norm_affine(xhat.to(DType::i64), Tensor(), Tensor()), DTypeError);
  CHECK_THROWS_AS(batch_norm_affine(zeros({3}, {.dtype = DType::f64}), Tensor(), Tensor()), ShapeError);
  CHECK_THROWS_WITH_AS(batch_norm_train_normalized(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), kMomentum, kEps),
                       doctest::Contains("batch_norm_train_normalized: expected more than 1 value per channel"),
                       ValueError);
  CHECK_THROWS_AS(batch_norm_eval_normalized(o.x, o.weight, o.bias, Tensor(), Tensor(), kEps), ValueError);
  // A compact xhat: bf16 for f32 input only, a mask only with a fused ReLU6 and of a bit per element.
  CHECK_THROWS_WITH_AS(batch_norm_train_normalized(o.x, o.weight, o.bias, Tensor(), Tensor(), kMomentum, kEps, true,
                                                   {.bf16 = true}),
                       doctest::Contains("keeps xhat in bf16 for f32 input only"), DTypeError);
  CHECK_THROWS_AS(batch_norm_affine(xhat, o.weight, o.bias, false, DType::f32), DTypeError);
  const Operands f = operands({4, 3, 8}, DType::f32);
  const auto compact = batch_norm_train_normalized(f.x, f.weight, f.bias, Tensor(), Tensor(), kMomentum, kEps, true,
                                                   {.bf16 = true, .relu6_mask = true});
  CHECK_THROWS_WITH_AS(batch_norm_backward_normalized(f.grad, compact.normalized, f.weight, f.bias, compact.save_invstd,
                                                      true, false, compact.mask),
                       doctest::Contains("a ReLU6 mask was given but no ReLU6 was fused"), ValueError);
  CHECK_THROWS_WITH_AS(batch_norm_backward_normalized(f.grad, compact.normalized, f.weight, f.bias, compact.save_invstd,
                                                      true, true, zeros({3}, {.dtype = DType::u8})),
                       doctest::Contains("the ReLU6 mask must be u8 [12]"), ValueError);
  CHECK_THROWS_AS(batch_norm_backward_normalized(f.grad.to(DType::f64), compact.normalized, f.weight, f.bias,
                                                 compact.save_invstd, true, true),
                  DTypeError);
  CHECK_THROWS_AS(batch_norm_eval_normalized(o.x, o.weight, o.bias, zeros({2}, {.dtype = DType::f64}), o.running_var, kEps),
                  ShapeError);
}
