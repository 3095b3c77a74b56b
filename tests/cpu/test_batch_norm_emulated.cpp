// kernels/cuda/batch_norm.cu in the CUDA emulator against the CPU kernels, under two schedules: the
// statistics (with running statistics), the normalisation (affine or not, with and without ReLU6),
// the backward sums and the input gradient (training and eval, with and without a fused ReLU6), on
// a shape whose channels hold more elements than a block has threads (f32), an [N, C] shape
// (S = 1, bf16) and an odd one (f64); the same for the kernels that work from a saved xhat. The
// kernels take contiguous operands (batch_norm.cpp copies strided ones; tests/cpu/test_batch_norm.cpp
// checks that path).
#include <doctest/doctest.h>

#include <array>
#include <utility>
#include <cmath>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/batch_norm_backends.h"

using namespace frugal;

namespace {
// The two sides sum in different orders (a tree of warps against a loop), in double, then round
// to the dtype; bf16 results may land one rounding step apart.
double tolerance(DType dtype) { return dtype == DType::f64 ? 1e-10 : dtype == DType::f32 ? 1e-5 : 1e-2; }

void check_close(const Tensor& emulated, const Tensor& cpu, const char* what) {
  const auto e = emulated.to_vector<double>(), c = cpu.to_vector<double>();
  double worst = 0.0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double excess = std::abs(e[i] - c[i]) - tolerance(cpu.dtype()) * (1.0 + std::abs(c[i]));
    if (!(excess <= worst)) {  // also catches NaN
      worst = std::isnan(excess) ? INFINITY : excess;
      worst_index = i;
    }
  }
  CHECK_MESSAGE(worst <= 0.0, what, ": element ", worst_index, " emulated ", e[worst_index], " cpu ", c[worst_index]);
}

const void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

struct Operands {
  BatchNormShape shape;
  DType dtype, stats;
  Tensor x, grad, weight, bias, running_mean, running_var;
};

Operands operands(BatchNormShape shape, DType dtype) {
  const DType stats = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Shape data{shape.batch, shape.channels, shape.spatial}, channel{shape.channels};
  return {shape,
          dtype,
          stats,
          uniform(data, -2.0, 4.0, {.dtype = dtype}),
          uniform(data, -1.0, 1.0, {.dtype = dtype}),
          uniform(channel, 1.0, 3.0, {.dtype = stats}),
          uniform(channel, 1.0, 3.0, {.dtype = stats}),
          uniform(channel, -1.0, 1.0, {.dtype = stats}),
          uniform(channel, 0.5, 2.0, {.dtype = stats})};
}

// Statistics into fresh tensors: save_mean, save_invstd, running_mean, running_var (copies).
template <typename Kernel>
std::array<Tensor, 4> statistics(const Operands& o, Kernel kernel) {
  std::array<Tensor, 4> r{empty({o.shape.channels}, {.dtype = o.stats}), empty({o.shape.channels}, {.dtype = o.stats}),
                          o.running_mean.clone(), o.running_var.clone()};
  kernel(o.dtype, o.x.data_ptr(), o.shape, 0.1, 1e-5, r[0].data_ptr(), r[1].data_ptr(), r[2].data_ptr(), r[3].data_ptr());
  return r;
}

template <typename Kernel>
Tensor normalized(const Operands& o, const Tensor& mean, const Tensor& invstd, bool affine, bool relu6, Kernel kernel) {
  Tensor y = empty(o.x.shape(), {.dtype = o.dtype});
  kernel(o.dtype, o.x.data_ptr(), o.shape, mean.data_ptr(), invstd.data_ptr(), affine ? o.weight.data_ptr() : nullptr,
         affine ? o.bias.data_ptr() : nullptr, relu6, y.data_ptr());
  return y;
}

template <typename Kernel>
std::array<Tensor, 2> sums(const Operands& o, const Tensor& fused, const Tensor& mean, const Tensor& invstd, Kernel kernel) {
  std::array<Tensor, 2> r{empty({o.shape.channels}, {.dtype = o.stats}), empty({o.shape.channels}, {.dtype = o.stats})};
  kernel(o.dtype, o.grad.data_ptr(), o.x.data_ptr(), ptr(fused), o.shape, mean.data_ptr(), invstd.data_ptr(),
         r[0].data_ptr(), r[1].data_ptr());
  return r;
}

template <typename Kernel>
Tensor input_grad(const Operands& o, const Tensor& fused, const Tensor& mean, const Tensor& invstd,
                  const std::array<Tensor, 2>& s, bool affine, bool training, Kernel kernel) {
  Tensor dx = empty(o.x.shape(), {.dtype = o.dtype});
  kernel(o.dtype, o.grad.data_ptr(), o.x.data_ptr(), ptr(fused), o.shape, mean.data_ptr(), invstd.data_ptr(),
         affine ? o.weight.data_ptr() : nullptr, s[0].data_ptr(), s[1].data_ptr(), training, dx.data_ptr());
  return dx;
}
}  // namespace

TEST_CASE("the CUDA batch norm kernels in the emulator match the CPU kernels") {
  // 1200 elements per channel (more than the 1024 threads a statistics block has at most), 37 (two
  // warps, the second partly empty) and 21 (one warp): [N, C], odd; one dtype each, since every CUDA
  // thread is a fiber here and 1024-thread blocks are slow to emulate.
  const std::array<std::pair<BatchNormShape, DType>, 3> cases{{{BatchNormShape{3, 2, 400}, DType::f32},
                                                                {BatchNormShape{37, 2, 1}, DType::bf16},
                                                                {BatchNormShape{3, 2, 7}, DType::f64}}};
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 3}}) {
    emu::OptionsScope scope(schedule);
    for (const auto& [shape, dtype] : cases) {
      CAPTURE(dtype);
      const Operands o = operands(shape, dtype);
      const auto expected = statistics(o, cpu::batch_norm_statistics);
      const auto emulated = statistics(o, cuda_emulated::batch_norm_statistics);
      check_close(emulated[0], expected[0], "save_mean");
      check_close(emulated[1], expected[1], "save_invstd");
      check_close(emulated[2], expected[2], "running_mean");
      check_close(emulated[3], expected[3], "running_var");
      // From here both sides read the CPU's statistics, so each kernel is compared on its own. Each
      // flag (affine, relu6, fused, training) is taken both ways across the two calls of a kernel.
      const Tensor &mean = expected[0], &invstd = expected[1];
      for (bool affine : {true, false})
        check_close(normalized(o, mean, invstd, affine, !affine, cuda_emulated::batch_norm_normalize),
                    normalized(o, mean, invstd, affine, !affine, cpu::batch_norm_normalize), "normalize");
      const Tensor fused_output = normalized(o, mean, invstd, true, true, cpu::batch_norm_normalize);
      for (const Tensor& fused : {fused_output, Tensor()}) {
        const bool training = fused.defined(), affine = fused.defined();
        const auto cpu_sums = sums(o, fused, mean, invstd, cpu::batch_norm_backward_sums);
        const auto emulated_sums = sums(o, fused, mean, invstd, cuda_emulated::batch_norm_backward_sums);
        check_close(emulated_sums[0], cpu_sums[0], "sum_dy");
        check_close(emulated_sums[1], cpu_sums[1], "sum_dy_xhat");
        check_close(input_grad(o, fused, mean, invstd, cpu_sums, affine, training, cuda_emulated::batch_norm_backward_input),
                    input_grad(o, fused, mean, invstd, cpu_sums, affine, training, cpu::batch_norm_backward_input),
                    "backward_input");
      }
    }
  }
}

namespace {
// The kernels from a saved xhat, each run on the CPU's results of the step before it. `on` is
// affine, ReLU6 and training at once: both ways across a test's two calls.
template <typename Kernel>
std::array<Tensor, 2> saving(const Operands& o, const std::array<Tensor, 4>& stats, bool on, Kernel kernel) {
  std::array<Tensor, 2> r{empty(o.x.shape(), {.dtype = o.dtype}), empty(o.x.shape(), {.dtype = o.dtype})};  // xhat, y
  kernel(o.dtype, o.x.data_ptr(), o.shape, stats[0].data_ptr(), stats[1].data_ptr(), on ? o.weight.data_ptr() : nullptr,
         on ? o.bias.data_ptr() : nullptr, on, r[0].data_ptr(), r[1].data_ptr());
  return r;
}

template <typename Kernel>
Tensor affine_of(const Operands& o, const Tensor& xhat, bool on, Kernel kernel) {
  Tensor y = empty(o.x.shape(), {.dtype = o.dtype});
  kernel(o.dtype, xhat.data_ptr(), o.shape, on ? o.weight.data_ptr() : nullptr, on ? o.bias.data_ptr() : nullptr, on,
         y.data_ptr());
  return y;
}

template <typename Kernel>
std::array<Tensor, 2> sums_of(const Operands& o, const Tensor& xhat, bool on, Kernel kernel) {
  std::array<Tensor, 2> r{empty({o.shape.channels}, {.dtype = o.stats}), empty({o.shape.channels}, {.dtype = o.stats})};
  kernel(o.dtype, o.grad.data_ptr(), xhat.data_ptr(), o.shape, on ? o.weight.data_ptr() : nullptr,
         on ? o.bias.data_ptr() : nullptr, on, r[0].data_ptr(), r[1].data_ptr());
  return r;
}

template <typename Kernel>
Tensor input_grad_of(const Operands& o, const Tensor& xhat, const Tensor& invstd, const std::array<Tensor, 2>& s, bool on,
                     Kernel kernel) {
  Tensor dx = empty(o.x.shape(), {.dtype = o.dtype});
  kernel(o.dtype, o.grad.data_ptr(), xhat.data_ptr(), o.shape, invstd.data_ptr(), on ? o.weight.data_ptr() : nullptr,
         on ? o.bias.data_ptr() : nullptr, on, s[0].data_ptr(), s[1].data_ptr(), on, dx.data_ptr());
  return dx;
}
}  // namespace

TEST_CASE("the CUDA batch norm kernels from a saved xhat in the emulator match the CPU kernels") {
  // The shapes of the test above: channels longer than a reduction block, [N, C], odd.
  const std::array<std::pair<BatchNormShape, DType>, 3> cases{{{BatchNormShape{3, 2, 400}, DType::f32},
                                                                {BatchNormShape{37, 2, 1}, DType::bf16},
                                                                {BatchNormShape{3, 2, 7}, DType::f64}}};
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 3}}) {
    emu::OptionsScope scope(schedule);
    for (const auto& [shape, dtype] : cases)
      for (bool on : {true, false}) {
        CAPTURE(dtype);
        CAPTURE(on);
        const Operands o = operands(shape, dtype);
        const auto stats = statistics(o, cpu::batch_norm_statistics);
        const auto cpu_saved = saving(o, stats, on, cpu::batch_norm_normalize_saving);
        const auto emulated_saved = saving(o, stats, on, cuda_emulated::batch_norm_normalize_saving);
        check_close(emulated_saved[0], cpu_saved[0], "normalize_saving: xhat");
        check_close(emulated_saved[1], cpu_saved[1], "normalize_saving: y");
        const Tensor& xhat = cpu_saved[0];
        check_close(affine_of(o, xhat, on, cuda_emulated::batch_norm_affine), affine_of(o, xhat, on, cpu::batch_norm_affine),
                    "affine");
        const auto cpu_sums = sums_of(o, xhat, on, cpu::batch_norm_backward_sums_from_xhat);
        const auto emulated_sums = sums_of(o, xhat, on, cuda_emulated::batch_norm_backward_sums_from_xhat);
        check_close(emulated_sums[0], cpu_sums[0], "sum_dy from xhat");
        check_close(emulated_sums[1], cpu_sums[1], "sum_dy_xhat from xhat");
        check_close(input_grad_of(o, xhat, stats[1], cpu_sums, on, cuda_emulated::batch_norm_backward_input_from_xhat),
                    input_grad_of(o, xhat, stats[1], cpu_sums, on, cpu::batch_norm_backward_input_from_xhat),
                    "backward_input_from_xhat");
      }
  }
}
