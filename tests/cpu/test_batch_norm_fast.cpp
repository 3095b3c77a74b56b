// The CPU's fast f32 batch norm loops (cpu::fast, kernels/cpu/batch_norm_fast.cpp) against the
// readable reference (cpu::): every kernel and flag on shapes that cut a channel into blocks every
// way (odd S, small planes, planes larger than a block); the same bits on 1, 2 and 3 threads; statistics
// that stay accurate when the mean is large against the spread; other dtypes passed through to the
// reference; and the dispatcher's choice between the two.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/random.h"
#include "kernels/batch_norm.h"
#include "kernels/batch_norm_backends.h"

using namespace frugal;

namespace {

// The fast loops sum in f32 lanes folded into double, the reference in double: f32 rounding apart.
constexpr double kTolerance = 2e-5;

void check_close(const Tensor& fast, const Tensor& reference, const char* what, double tolerance = kTolerance) {
  const auto f = fast.to_vector<double>(), r = reference.to_vector<double>();
  REQUIRE(f.size() == r.size());
  double worst = 0.0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double excess = std::abs(f[i] - r[i]) - tolerance * (1.0 + std::abs(r[i]));
    if (!(excess <= worst)) {  // also catches NaN
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_index = i;
    }
  }
  CHECK_MESSAGE(worst <= 0.0, what, ": element ", worst_index, " fast ", f[worst_index], " reference ", r[worst_index]);
}

void check_same_bits(const Tensor& a, const Tensor& b, const char* what) {
  CHECK_MESSAGE(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0, what, " differs");
}

const void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

struct Operands {
  BatchNormShape shape;
  DType dtype;
  Tensor x, grad, weight, bias, running_mean, running_var;
};

Operands operands(BatchNormShape shape, DType dtype = DType::f32, double offset = 0.0) {
  const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Shape data{shape.batch, shape.channels, shape.spatial}, channel{shape.channels};
  return {shape,
          dtype,
          uniform(data, offset - 2.0, offset + 4.0, {.dtype = dtype}),
          uniform(data, -1.0, 1.0, {.dtype = dtype}),
          uniform(channel, 1.0, 3.0, {.dtype = stats}),
          uniform(channel, 1.0, 3.0, {.dtype = stats}),
          uniform(channel, -1.0, 1.0, {.dtype = stats}),
          uniform(channel, 0.5, 2.0, {.dtype = stats})};
}

DType stats_dtype(const Operands& o) { return o.running_mean.dtype(); }

// What one implementation gives for all four kernels, the backward both with and without the fused
// ReLU6, in training (with the sums) and eval.
struct Results {
  std::array<Tensor, 4> statistics;  // save_mean, save_invstd, running_mean, running_var
  Tensor plain, fused;               // normalize without and with ReLU6 (fused also has no affine)
  std::array<Tensor, 2> sums, fused_sums;
  Tensor grad_training, grad_fused_eval;
};

template <typename Statistics, typename Normalize, typename Sums, typename Input>
Results run(const Operands& o, Statistics statistics, Normalize normalize, Sums sums, Input input) {
  const TensorOptions per_channel{.dtype = stats_dtype(o)};
  const std::int64_t c = o.shape.channels;
  Results r;
  r.statistics = {empty({c}, per_channel), empty({c}, per_channel), o.running_mean.clone(), o.running_var.clone()};
  statistics(o.dtype, o.x.data_ptr(), o.shape, 0.1, 1e-5, r.statistics[0].data_ptr(), r.statistics[1].data_ptr(),
             r.statistics[2].data_ptr(), r.statistics[3].data_ptr());
  const Tensor &mean = r.statistics[0], &invstd = r.statistics[1];
  r.plain = empty(o.x.shape(), {.dtype = o.dtype});
  normalize(o.dtype, o.x.data_ptr(), o.shape, mean.data_ptr(), invstd.data_ptr(), o.weight.data_ptr(),
            o.bias.data_ptr(), false, r.plain.data_ptr());
  r.fused = empty(o.x.shape(), {.dtype = o.dtype});
  normalize(o.dtype, o.x.data_ptr(), o.shape, mean.data_ptr(), invstd.data_ptr(), nullptr, nullptr, true,
            r.fused.data_ptr());
  for (auto [out, fused] : {std::pair{&r.sums, Tensor()}, std::pair{&r.fused_sums, r.fused}}) {
    *out = {zeros({c}, per_channel), zeros({c}, per_channel)};
    sums(o.dtype, o.grad.data_ptr(), o.x.data_ptr(), ptr(fused), o.shape, mean.data_ptr(), invstd.data_ptr(),
         (*out)[0].data_ptr(), (*out)[1].data_ptr());
  }
  r.grad_training = empty(o.x.shape(), {.dtype = o.dtype});
  input(o.dtype, o.grad.data_ptr(), o.x.data_ptr(), nullptr, o.shape, mean.data_ptr(), invstd.data_ptr(),
        o.weight.data_ptr(), r.sums[0].data_ptr(), r.sums[1].data_ptr(), true, r.grad_training.data_ptr());
  r.grad_fused_eval = empty(o.x.shape(), {.dtype = o.dtype});
  input(o.dtype, o.grad.data_ptr(), o.x.data_ptr(), r.fused.data_ptr(), o.shape, mean.data_ptr(), invstd.data_ptr(),
        o.weight.data_ptr(), nullptr, nullptr, false, r.grad_fused_eval.data_ptr());
  return r;
}

Results fast(const Operands& o) {
  return run(o, cpu::fast::batch_norm_statistics, cpu::fast::batch_norm_normalize, cpu::fast::batch_norm_backward_sums,
             cpu::fast::batch_norm_backward_input);
}

Results reference(const Operands& o) {
  return run(o, cpu::batch_norm_statistics, cpu::batch_norm_normalize, cpu::batch_norm_backward_sums,
             cpu::batch_norm_backward_input);
}

template <typename Check>
void compare(const Results& a, const Results& b, Check check) {
  const char* names[] = {"save_mean", "save_invstd", "running_mean", "running_var"};
  for (std::size_t i = 0; i < a.statistics.size(); ++i) check(a.statistics[i], b.statistics[i], names[i]);
  check(a.plain, b.plain, "normalize");
  check(a.fused, b.fused, "normalize + ReLU6");
  check(a.sums[0], b.sums[0], "sum_dy");
  check(a.sums[1], b.sums[1], "sum_dy_xhat");
  check(a.fused_sums[0], b.fused_sums[0], "sum_dy, fused");
  check(a.fused_sums[1], b.fused_sums[1], "sum_dy_xhat, fused");
  check(a.grad_training, b.grad_training, "grad_input, training");
  check(a.grad_fused_eval, b.grad_fused_eval, "grad_input, eval, fused");
}

}  // namespace

TEST_CASE("batch norm fast f32 loops match the reference") {
  // Odd S with a tail after the 16 lanes, blocks of a whole sample group (300 samples of 17: groups of
  // 75, under 4096 / 17 = 240 planes), a 4x4 map in groups of 4 samples, groups of 2, 2 and 1 samples
  // of 1024, groups of 7 samples of 1024 cut into blocks of 4 and 3 (the last group of 4 one block),
  // planes larger than a block, alone or two to a group.
  for (const BatchNormShape shape : {BatchNormShape{5, 4, 23}, BatchNormShape{300, 3, 17}, BatchNormShape{16, 3, 16},
                                     BatchNormShape{5, 2, 1024}, BatchNormShape{25, 3, 1024}, BatchNormShape{2, 2, 5000},
                                     BatchNormShape{5, 4, 5000}}) {
    CAPTURE(shape.batch);
    CAPTURE(shape.spatial);
    const Operands o = operands(shape);
    const Results f = fast(o), r = reference(o);
    compare(f, r, [](const Tensor& a, const Tensor& b, const char* what) { check_close(a, b, what); });
  }
}

TEST_CASE("batch norm fast f32 loops give the same bits on 1, 2 and 3 threads") {
  // 8 * 24 * 256 = 49152 elements: above kMinParallelWork, so the loops really are split.
  const Operands o = operands({8, 24, 256});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Results one = fast(o);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    omp_set_num_threads(threads);
    compare(fast(o), one, check_same_bits);
  }
  omp_set_num_threads(saved);
}

TEST_CASE("batch norm fast statistics stay accurate when the mean is large against the spread") {
  // Values 1e4 + uniform(-2, 4): variance 3, mean 1e4 + 1. E[x^2] - E[x]^2 in f32 would lose it all
  // (x^2 = 1e8 has an ulp of 8); the reference sums in double. The statistics must agree to f32
  // rounding of the data (the mean to a few of its ulps).
  // Planes of 100 (the 16-lane blocks) and of 4 (the per-sample path, shifted by each channel's
  // first element). Then one far value first in each channel (a bad pivot for a one-pass shifted
  // sum): still accurate.
  for (const BatchNormShape shape : {BatchNormShape{16, 4, 100}, BatchNormShape{64, 4, 4}}) {
    CAPTURE(shape.spatial);
    const Operands o = operands(shape, DType::f32, 1e4);
    const Results f = fast(o), r = reference(o);
    check_close(f.statistics[0], r.statistics[0], "save_mean", 1e-6);
    check_close(f.statistics[1], r.statistics[1], "save_invstd", 1e-5);
    check_close(f.statistics[3], r.statistics[3], "running_var", 1e-5);
    Operands outlier = operands(shape);
    for (std::int64_t c = 0; c < shape.channels; ++c)
      static_cast<float*>(outlier.x.data_ptr())[c * shape.spatial] = 1e4f;
    const Results fo = fast(outlier), ro = reference(outlier);
    check_close(fo.statistics[0], ro.statistics[0], "save_mean, outlier", 1e-6);
    check_close(fo.statistics[1], ro.statistics[1], "save_invstd, outlier", 1e-5);
  }
}

TEST_CASE("batch norm fast statistics read in memory order give the bits of reading a channel at a time") {
  // Note [Sums in memory order]: batch_norm_statistics reads samples in memory order, carrying each
  // channel's open block from plane to plane; the training forward from a saved xhat still reads a
  // channel at a time (on planes of at least kSweepMinPlane = 64). The same blocks merged in the same
  // order: the same bits. Blocks of a whole sample group (S = 64, 100, 256; 70 samples: groups of 18,
  // 18, 18 and 16), blocks cut by the block size within a group (25 samples of 1024: groups of 7, 7,
  // 7 and 4, blocks of 4 and 3), pieces of a plane, one sample to a group or two (5000), a tail after
  // the lanes (100), groups that split unevenly over 3 threads (the shapes of more than 32768
  // elements, which run in parallel), and a far first element in every channel, which makes a block
  // read again around its mean.
  const int saved = omp_get_max_threads();
  for (const BatchNormShape shape : {BatchNormShape{70, 8, 64}, BatchNormShape{16, 4, 100}, BatchNormShape{9, 5, 256},
                                     BatchNormShape{25, 3, 1024}, BatchNormShape{2, 3, 5000},
                                     BatchNormShape{5, 4, 5000}}) {
    CAPTURE(shape.batch);
    CAPTURE(shape.spatial);
    for (bool outlier : {false, true}) {
      CAPTURE(outlier);
      const Operands o = operands(shape, DType::f32, outlier ? 0.0 : 50.0);
      if (outlier)
        for (std::int64_t c = 0; c < shape.channels; ++c) static_cast<float*>(o.x.data_ptr())[c * shape.spatial] = 1e4f;
      const TensorOptions per_channel{.dtype = DType::f32};
      const std::int64_t c = shape.channels;
      std::array<Tensor, 4> by_channel{empty({c}, per_channel), empty({c}, per_channel), o.running_mean.clone(),
                                       o.running_var.clone()};
      const Tensor xhat = empty(o.x.shape()), y = empty(o.x.shape());
      cpu::fast::batch_norm_train_forward_saving(DType::f32, o.x.data_ptr(), shape, 0.1, 1e-5, nullptr, nullptr, false,
                                                 by_channel[0].data_ptr(), by_channel[1].data_ptr(),
                                                 by_channel[2].data_ptr(), by_channel[3].data_ptr(), xhat.data_ptr(),
                                                 y.data_ptr());
      for (int threads : {1, 3}) {
        CAPTURE(threads);
        omp_set_num_threads(threads);
        const Results f = fast(o);
        for (std::size_t i = 0; i < by_channel.size(); ++i) check_same_bits(f.statistics[i], by_channel[i], "statistics");
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("batch norm fast loops pass other dtypes to the reference") {
  for (DType dtype : {DType::f64, DType::bf16}) {
    CAPTURE(dtype);
    const Operands o = operands({3, 2, 7}, dtype);
    compare(fast(o), reference(o), check_same_bits);
  }
}

TEST_CASE("batch norm fast loops on planes shorter than 16: the reference up to rounding, the same bits on 1-3 threads") {
  // A sample at a time over per-element coefficients (Note [Normalising small planes]): the
  // normalisation has the reference's arithmetic and bits; the backward's sums run in fixed groups of
  // samples, so they and the input gradient built on them differ from the reference by rounding.
  // [64, 96, 4]: 24576 elements a sample group, enough to open parallel regions.
  for (const BatchNormShape shape : {BatchNormShape{37, 3, 1}, BatchNormShape{64, 96, 4}, BatchNormShape{9, 40, 1},
                                     BatchNormShape{5, 17, 15}, BatchNormShape{2, 33, 2}, BatchNormShape{3, 2, 7}}) {
    CAPTURE(shape.batch);
    CAPTURE(shape.spatial);
    const Operands o = operands(shape);
    const Results f = fast(o), r = reference(o);
    compare(f, r, [](const Tensor& a, const Tensor& b, const char* what) { check_close(a, b, what); });
    // The same bits from the same statistics: the two statistics kernels agree to rounding only
    // (a channel's mean can differ by an ulp for some draws), and the normalisation inherits that.
    const Tensor &mean = f.statistics[0], &invstd = f.statistics[1];
    for (bool relu6 : {false, true}) {
      CAPTURE(relu6);
      const void* weight = relu6 ? nullptr : o.weight.data_ptr();
      const void* bias = relu6 ? nullptr : o.bias.data_ptr();
      const Tensor reference_out = empty(o.x.shape(), {.dtype = o.dtype});
      cpu::batch_norm_normalize(o.dtype, o.x.data_ptr(), o.shape, mean.data_ptr(), invstd.data_ptr(), weight, bias,
                                relu6, reference_out.data_ptr());
      check_same_bits(relu6 ? f.fused : f.plain, reference_out, relu6 ? "normalize + ReLU6" : "normalize");
    }
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      omp_set_num_threads(threads);
      compare(fast(o), f, check_same_bits);
    }
    omp_set_num_threads(saved);
  }
}

TEST_CASE("batch norm on the CPU runs the fast loops for f32, the reference when asked") {
  const Operands o = operands({8, 3, 20});
  const Tensor x = o.x.reshape({8, 3, 4, 5});
  const Results f = fast(o), r = reference(o);
  CHECK_FALSE(batch_norm_cpu_reference());
  check_same_bits(batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5).save_invstd, f.statistics[1],
                  "fast save_invstd");
  set_batch_norm_cpu_reference(true);
  check_same_bits(batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5).save_invstd, r.statistics[1],
                  "reference save_invstd");
  set_batch_norm_cpu_reference(false);
}

TEST_CASE("batch norm fast training forward and backward give the separate fast kernels' bits, on 1 and 3 threads") {
  // What the CPU dispatcher runs: statistics + normalize, and sums + input gradient. Planes larger
  // than a block, and [N, C].
  const int saved = omp_get_max_threads();
  for (const BatchNormShape shape : {BatchNormShape{8, 24, 256}, BatchNormShape{2, 2, 5000}, BatchNormShape{37, 3, 1}}) {
    CAPTURE(shape.spatial);
    const Operands o = operands(shape);
    const Results separate = fast(o);
    const TensorOptions per_channel{.dtype = DType::f32};
    const std::int64_t c = shape.channels;
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      omp_set_num_threads(threads);
      std::array<Tensor, 4> statistics{empty({c}, per_channel), empty({c}, per_channel), o.running_mean.clone(),
                                       o.running_var.clone()};
      const Tensor y = empty(o.x.shape());
      cpu::fast::batch_norm_train_forward(DType::f32, o.x.data_ptr(), shape, 0.1, 1e-5, nullptr, nullptr, true,
                                          statistics[0].data_ptr(), statistics[1].data_ptr(), statistics[2].data_ptr(),
                                          statistics[3].data_ptr(), y.data_ptr());
      for (std::size_t i = 0; i < statistics.size(); ++i)
        check_same_bits(statistics[i], separate.statistics[i], "statistics");
      check_same_bits(y, separate.fused, "normalize + ReLU6");
      const Tensor sum_dy = zeros({c}, per_channel), sum_dy_xhat = zeros({c}, per_channel), dx = empty(o.x.shape());
      cpu::fast::batch_norm_backward(DType::f32, o.grad.data_ptr(), o.x.data_ptr(), nullptr, shape,
                                     statistics[0].data_ptr(), statistics[1].data_ptr(), o.weight.data_ptr(), nullptr,
                                     false, true, sum_dy.data_ptr(), sum_dy_xhat.data_ptr(), dx.data_ptr());
      check_same_bits(sum_dy, separate.sums[0], "sum_dy");
      check_same_bits(sum_dy_xhat, separate.sums[1], "sum_dy_xhat");
      check_same_bits(dx, separate.grad_training, "grad_input, training");
      cpu::fast::batch_norm_backward(DType::f32, o.grad.data_ptr(), o.x.data_ptr(), y.data_ptr(), shape,
                                     statistics[0].data_ptr(), statistics[1].data_ptr(), o.weight.data_ptr(), nullptr,
                                     false, false, nullptr, nullptr, dx.data_ptr());
      check_same_bits(dx, separate.grad_fused_eval, "grad_input, eval, fused");
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("batch norm's backward: the ReLU6 mask recomputed from the input gives the bits of reading the output") {
  // Note [The ReLU6 mask from the input]: an affine BN-ReLU6 forward (weight and bias in [1, 3]; the
  // first channel's 3 and 1, so that whatever the draw, outputs clamp at 0 and at 6: xhat of a uniform
  // x reaches +-1.7), then its backward reading the output and recomputing it, training and eval, on
  // planes of one vector, of many, and larger than a block.
  const int saved = omp_get_max_threads();
  for (const BatchNormShape shape : {BatchNormShape{8, 24, 256}, BatchNormShape{4, 5, 64}, BatchNormShape{12, 6, 16},
                                     BatchNormShape{2, 2, 5000}}) {
    CAPTURE(shape.spatial);
    const Operands o = operands(shape);
    o.weight.narrow(0, 0, 1).fill_(3.0);
    o.bias.narrow(0, 0, 1).fill_(1.0);
    const TensorOptions per_channel{.dtype = DType::f32};
    const std::int64_t c = shape.channels;
    const Tensor mean = empty({c}, per_channel), invstd = empty({c}, per_channel), y = empty(o.x.shape());
    cpu::fast::batch_norm_train_forward(DType::f32, o.x.data_ptr(), shape, 0.1, 1e-5, o.weight.data_ptr(),
                                        o.bias.data_ptr(), true, mean.data_ptr(), invstd.data_ptr(),
                                        o.running_mean.clone().data_ptr(), o.running_var.clone().data_ptr(), y.data_ptr());
    const std::vector<float> outputs = y.to_vector<float>();
    REQUIRE(std::count(outputs.begin(), outputs.end(), 0.0f) > 0);  // both ends of the clamp are reached
    REQUIRE(std::count(outputs.begin(), outputs.end(), 6.0f) > 0);
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      for (bool training : {true, false}) {
        CAPTURE(threads);
        CAPTURE(training);
        std::array<Tensor, 3> read, recomputed;  // sum_dy, sum_dy_xhat, grad_input
        for (bool from_input : {false, true}) {
          std::array<Tensor, 3>& out = from_input ? recomputed : read;
          out = {zeros({c}, per_channel), zeros({c}, per_channel), empty(o.x.shape())};
          cpu::fast::batch_norm_backward(DType::f32, o.grad.data_ptr(), o.x.data_ptr(), y.data_ptr(), shape,
                                         mean.data_ptr(), invstd.data_ptr(), o.weight.data_ptr(), o.bias.data_ptr(),
                                         from_input, training, out[0].data_ptr(), out[1].data_ptr(), out[2].data_ptr());
        }
        check_same_bits(recomputed[0], read[0], "sum_dy");
        check_same_bits(recomputed[1], read[1], "sum_dy_xhat");
        check_same_bits(recomputed[2], read[2], "grad_input");
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("batch norm's compact loops refuse a mask of bits on planes of other than a multiple of 8") {
  // keeps_compact_xhat turns such shapes to the separate passes; called anyway, the loops would gate
  // a row's last elements by no bits at all.
  const BatchNormShape shape{.batch = 2, .channels = 1, .spatial = 20};
  CHECK_FALSE(cpu::fast::keeps_compact_xhat(DType::f32, shape, true));
  CHECK(cpu::fast::keeps_compact_xhat(DType::f32, shape, false));
  std::vector<float> x(40, 1.0f), y(40), grad(40, 1.0f), grad_input(40), stats(1, 1.0f), sums(2);
  std::vector<BFloat16> xhat(40);
  std::vector<std::uint8_t> mask(5);
  CHECK_THROWS_WITH_AS(cpu::fast::batch_norm_normalize_compact(x.data(), shape, stats.data(), stats.data(), nullptr,
                                                               nullptr, true, xhat.data(), mask.data(), y.data()),
                       doctest::Contains("a multiple of 8 elements, got 20"), Error);
  CHECK_THROWS_AS(cpu::fast::batch_norm_backward_from_compact_xhat(grad.data(), xhat.data(), mask.data(), shape,
                                                                   stats.data(), nullptr, nullptr, true, true,
                                                                   &sums[0], &sums[1], grad_input.data()),
                  Error);
}
