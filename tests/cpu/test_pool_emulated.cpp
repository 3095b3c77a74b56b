// kernels/cuda/pool.cu in the CUDA emulator against the CPU kernels, under two schedules: every
// pooling kind, forward and backward, on small odd shapes read through a permuted (non-contiguous)
// layout. Exact: the forward runs the same per-element functions, and the backward's gather adds in
// the order of the CPU's scatter (kernels/cuda/pool.cu, Note [Backward as a gather]).
#include <doctest/doctest.h>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/pool_backends.h"

using namespace frugal;

namespace {
struct Case {
  PoolKind kind;
  PoolGeometry geometry;
};

PoolAxis window_axis(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t padding, std::int64_t dilation,
                     bool ceil_mode) {
  return {in, pool_output_size(in, kernel, stride, padding, dilation, ceil_mode), kernel, stride, padding, dilation};
}

ImageLayout layout_of(const Tensor& x) {  // [N, C, H, W]
  return {.channels = x.size(1),
          .stride_n = x.stride(0),
          .stride_c = x.stride(1),
          .stride_h = x.stride(2),
          .stride_w = x.stride(3)};
}
}  // namespace

TEST_CASE("the CUDA pooling kernels in the emulator match the CPU kernels exactly") {
  Generator generator(17);
  const std::int64_t n = 2, c = 3, h = 7, w = 5;
  const std::vector<Case> cases{
      {PoolKind::max, {.planes = n * c, .h = window_axis(h, 3, 2, 1, 1, true), .w = window_axis(w, 3, 2, 1, 1, true)}},
      {PoolKind::max, {.planes = n * c, .h = window_axis(h, 2, 1, 1, 2, false), .w = window_axis(w, 3, 2, 1, 1, false)}},
      {PoolKind::avg, {.planes = n * c, .h = window_axis(h, 3, 2, 1, 1, true), .w = window_axis(w, 2, 1, 1, 1, true)}},
      {PoolKind::avg,
       {.planes = n * c,
        .h = window_axis(h, 3, 2, 1, 1, true),
        .w = window_axis(w, 3, 2, 1, 1, true),
        .count_include_pad = false}},
      {PoolKind::adaptive_avg, {.planes = n * c, .h = {.in = h, .out = 3}, .w = {.in = w, .out = 4}}},
  };
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 7}}) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      const Tensor x = uniform({n, h, w, c}, -3.0, 3.0, {.dtype = dtype}, &generator).permute({0, 3, 1, 2});
      for (const Case& k : cases) {
        const PoolGeometry& g = k.geometry;
        CAPTURE(dtype);
        CAPTURE(static_cast<int>(k.kind));
        const Shape out_shape{n, c, g.h.out, g.w.out};
        const bool max = k.kind == PoolKind::max;
        Tensor expected = empty(out_shape, {.dtype = dtype}), emulated = empty(out_shape, {.dtype = dtype});
        Tensor expected_index = zeros(out_shape, {.dtype = DType::i64}), emulated_index = zeros(out_shape, {.dtype = DType::i64});
        cpu::pool2d(k.kind, dtype, x.data_ptr(), layout_of(x), g, expected.data_ptr(),
                    max ? expected_index.data<std::int64_t>() : nullptr);
        cuda_emulated::pool2d(k.kind, dtype, x.data_ptr(), layout_of(x), g, emulated.data_ptr(),
                              max ? emulated_index.data<std::int64_t>() : nullptr);
        CHECK(emulated.to_vector<double>() == expected.to_vector<double>());
        CHECK(emulated_index.to_vector<std::int64_t>() == expected_index.to_vector<std::int64_t>());

        const Tensor grad = uniform(out_shape, -1.0, 1.0, {.dtype = dtype}, &generator);
        const std::int64_t* indices = max ? expected_index.data<std::int64_t>() : nullptr;
        Tensor expected_grad = empty({n, c, h, w}, {.dtype = dtype}), emulated_grad = empty({n, c, h, w}, {.dtype = dtype});
        cpu::pool2d_backward(k.kind, dtype, grad.data_ptr(), indices, g, expected_grad.data_ptr());
        cuda_emulated::pool2d_backward(k.kind, dtype, grad.data_ptr(), indices, g, emulated_grad.data_ptr());
        CHECK(emulated_grad.to_vector<double>() == expected_grad.to_vector<double>());
      }
    }
  }
}
