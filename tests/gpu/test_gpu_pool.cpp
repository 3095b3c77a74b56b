// GPU suite: pooling (each op and its backward) and pad/crop on cuda:0 against the CPU, on random
// odd shapes read through non-contiguous layouts, every floating dtype. Max pooling's indices must
// match exactly; values within gpu_compare.h's elementwise tolerance (the GPU runs the same
// per-element functions and, for the backward, adds in the CPU's order, so they are usually equal).
#include <doctest/doctest.h>

#include "core/random.h"
#include "kernels/pad.h"
#include "kernels/pool.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

TEST_CASE("pooling and its backward on the GPU match the CPU") {
  Generator generator(23);
  const std::vector<Pool2dOptions> options{
      {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true},
      {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}},
      {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}, .count_include_pad = false},
      {.kernel = {2, 2}, .divisor_override = 3}};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const Tensor x = uniform({3, 19, 23, 5}, -3.0, 3.0, {.dtype = dtype}, &generator).permute({0, 3, 1, 2});  // [3, 5, 19, 23]
    // to() copies into a contiguous tensor; this puts W outermost on the GPU, so the kernels read strides.
    const Tensor xg = x.to(kGpu).permute({0, 1, 3, 2}).contiguous().permute({0, 1, 3, 2});
    for (const Pool2dOptions& o : options) {
      const MaxPoolResult cpu = max_pool2d(x, o), gpu = max_pool2d(xg, o);
      check_close(gpu.output, cpu.output, dtype, "max_pool2d");
      CHECK(gpu.indices.to_vector<std::int64_t>() == cpu.indices.to_vector<std::int64_t>());
      const Tensor g = uniform(cpu.output.shape(), -1.0, 1.0, {.dtype = dtype}, &generator);
      check_close(max_pool2d_backward(g.to(kGpu), gpu.indices, x.shape(), o), max_pool2d_backward(g, cpu.indices, x.shape(), o),
                  dtype, "max_pool2d_backward");
      if (o.dilation != std::array<std::int64_t, 2>{1, 1}) continue;  // avg pooling has none
      check_close(avg_pool2d(xg, o), avg_pool2d(x, o), dtype, "avg_pool2d");
      check_close(avg_pool2d_backward(g.to(kGpu), x.shape(), o), avg_pool2d_backward(g, x.shape(), o), dtype,
                  "avg_pool2d_backward");
    }
    for (std::array<std::int64_t, 2> size : {std::array<std::int64_t, 2>{1, 1}, {5, 7}, {29, 31}}) {
      check_close(adaptive_avg_pool2d(xg, size), adaptive_avg_pool2d(x, size), dtype, "adaptive_avg_pool2d");
      const Tensor g = uniform({3, 5, size[0], size[1]}, -1.0, 1.0, {.dtype = dtype}, &generator);
      check_close(adaptive_avg_pool2d_backward(g.to(kGpu), x.shape()), adaptive_avg_pool2d_backward(g, x.shape()), dtype,
                  "adaptive_avg_pool2d_backward");
    }
  }
}

TEST_CASE("pad2d and crop2d on the GPU match the CPU") {
  const Tensor base = uniform({2, 7, 3, 9}, -1.0, 1.0);
  const Tensor x = base.permute({0, 2, 1, 3}), xg = base.to(kGpu).permute({0, 2, 1, 3});  // [2, 3, 7, 9], not contiguous
  for (Padding2d a : {Padding2d{1, 2, 3, 0}, Padding2d{-2, 1, 2, -3}, Padding2d{0, -6, -8, 0}}) {
    const Tensor gpu = pad2d(xg, a, 0.5);
    CHECK(gpu.device() == kGpu);
    CHECK(gpu.to_vector<float>() == pad2d(x, a, 0.5).to_vector<float>());
    CHECK(pad2d_backward(gpu, a).to_vector<float>() == pad2d_backward(pad2d(x, a, 0.5), a).to_vector<float>());
  }
  const Tensor crop = crop2d(xg, 2, 3, 4, 5);
  CHECK(crop.device() == kGpu);
  CHECK(crop.to_vector<float>() == crop2d(x, 2, 3, 4, 5).to_vector<float>());
  CHECK(crop2d_backward(crop, x.shape(), 2, 3).to_vector<float>() ==
        crop2d_backward(crop2d(x, 2, 3, 4, 5), x.shape(), 2, 3).to_vector<float>());
}
