// kernels/cuda/conv.cu in the CUDA emulator against the CPU kernels, under two schedules: im2col,
// col2im and the three depthwise kernels, through strides, padding, dilation and a channel
// multiplier, in f32 (small integers: exact whatever the summation order), f64 and bf16. The depthwise
// kernels are compared with the CPU's reference loops, whose bits the CUDA kernels share; the CPU's
// fast 3x3 path is compared with those loops in tests/cpu/test_depthwise_3x3.cpp.
#include <doctest/doctest.h>

#include "emu/emulator.h"
#include "core/random.h"
#include "kernels/conv_backends.h"

using namespace frugal;

namespace {
Tensor small_ints(Shape shape, DType dtype) { return randint(-3, 4, std::move(shape), {.dtype = DType::i64}).to(dtype); }

struct Geometry {
  const char* name;
  ConvGeometry g;
};

// Small enough for the emulator (a fiber per CUDA thread), odd enough to catch index slips.
const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> all = {
      {"3x3 pad 1", {.channels = 3, .height = 5, .width = 6, .out_height = 5, .out_width = 6, .kernel_h = 3,
                     .kernel_w = 3, .pad_h = 1, .pad_w = 1}},
      {"stride 2, dilation 2", {.channels = 2, .height = 9, .width = 7, .out_height = 4, .out_width = 2, .kernel_h = 3,
                                .kernel_w = 2, .stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 0, .dilation_h = 2,
                                .dilation_w = 2}},
  };
  return all;
}

// Runs `kernel` of one backend on fresh copies of the inputs into a zeroed output of `shape`.
template <typename Kernel>
std::vector<double> run(const Shape& shape, DType dtype, Kernel&& kernel) {
  Tensor out = zeros(shape, {.dtype = dtype});
  kernel(out.data_ptr());
  return out.to_vector<double>();
}
}  // namespace

TEST_CASE("convolution CUDA kernels in the emulator match the CPU kernels") {
  for (const emu::Options& schedule : {emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 5}}) {
    emu::OptionsScope scope(schedule);
    for (const Geometry& geometry : geometries()) {
      const ConvGeometry& g = geometry.g;
      for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
        INFO(std::string(geometry.name));
        CAPTURE(dtype);
        const Tensor x = small_ints({g.channels, g.height, g.width}, dtype);
        const Tensor col = small_ints({g.channels * g.taps(), g.out_plane()}, dtype);
        const Shape col_shape{g.channels * g.taps(), g.out_plane()}, x_shape{g.channels, g.height, g.width};
        CHECK(run(col_shape, dtype, [&](void* out) { cuda_emulated::im2col(dtype, g, x.data_ptr(), out); }) ==
              run(col_shape, dtype, [&](void* out) { cpu::im2col(dtype, g, x.data_ptr(), out); }));
        CHECK(run(x_shape, dtype, [&](void* out) { cuda_emulated::col2im(dtype, g, col.data_ptr(), out); }) ==
              run(x_shape, dtype, [&](void* out) { cpu::col2im(dtype, g, col.data_ptr(), out); }));

        constexpr std::int64_t kBatch = 2, kMultiplier = 2;
        const std::int64_t out_channels = g.channels * kMultiplier;
        const Tensor xb = small_ints({kBatch, g.channels, g.height, g.width}, dtype);
        const Tensor w = small_ints({out_channels, 1, g.kernel_h, g.kernel_w}, dtype);
        const Tensor bias = small_ints({out_channels}, dtype);
        const Tensor dy = small_ints({kBatch, out_channels, g.out_height, g.out_width}, dtype);
        const Shape y_shape = dy.shape(), xb_shape = xb.shape(), w_shape = w.shape();
        for (const bool relu6 : {false, true}) {  // conv2d's ReLU6 epilogue: sums of -81 to 84 clamped
          CAPTURE(relu6);
          CHECK(run(y_shape, dtype, [&](void* out) {
                  cuda_emulated::depthwise_forward(dtype, g, kBatch, kMultiplier, xb.data_ptr(), w.data_ptr(),
                                                   bias.data_ptr(), out, relu6);
                }) == run(y_shape, dtype, [&](void* out) {
                  cpu::depthwise_forward_reference(dtype, g, kBatch, kMultiplier, xb.data_ptr(), w.data_ptr(),
                                                   bias.data_ptr(), out, relu6);
                }));
        }
        CHECK(run(xb_shape, dtype, [&](void* out) {
                cuda_emulated::depthwise_backward_input(dtype, g, kBatch, kMultiplier, dy.data_ptr(), w.data_ptr(), out);
              }) == run(xb_shape, dtype, [&](void* out) {
                cpu::depthwise_backward_input_reference(dtype, g, kBatch, kMultiplier, dy.data_ptr(), w.data_ptr(), out);
              }));
        CHECK(run(w_shape, dtype, [&](void* out) {
                cuda_emulated::depthwise_backward_weight(dtype, g, kBatch, kMultiplier, dy.data_ptr(), xb.data_ptr(), out);
              }) == run(w_shape, dtype, [&](void* out) {
                cpu::depthwise_backward_weight_reference(dtype, g, kBatch, kMultiplier, dy.data_ptr(), xb.data_ptr(), out);
              }));
      }
    }
  }
}
