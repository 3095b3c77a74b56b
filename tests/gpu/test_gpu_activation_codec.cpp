// The activation codecs on the GPU against the CPU: the same mask bytes, the same masked gradient,
// the same channel low, step, codes and decoded values, to the bit (kernels/activation_codec_ops.h
// computes both sides the same way), and a non-finite channel named the same.
#include <doctest/doctest.h>

#include <cmath>

#include "core/random.h"
#include "kernels/activation_codec.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

TEST_CASE("activation masks on the GPU are the CPU's bytes") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    std::vector<double> v = uniform({4099}, -2.0, 8.0, {.dtype = DType::f64}).to_vector<double>();
    for (std::size_t i = 0; i < v.size(); i += 7) v[i] = i % 2 ? 6.0 : 0.0;  // the ReLU6 edges
    const Tensor x = from_vector(v, {4099}).to(dtype), g = uniform({4099}, -1.0, 1.0, {.dtype = dtype});
    const Tensor cpu_mask = pack_mask_between(x, 0.0, 6.0), gpu_mask = pack_mask_between(x.to(kGpu), 0.0, 6.0);
    CHECK(gpu_mask.to_vector<std::uint8_t>() == cpu_mask.to_vector<std::uint8_t>());
    CHECK(apply_packed_mask(g.to(kGpu), gpu_mask).to_vector<double>() == apply_packed_mask(g, cpu_mask).to_vector<double>());
  }
}

TEST_CASE("8-bit channel codes on the GPU are the CPU's bytes") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const Shape& shape : {Shape{8, 5, 33, 17}, Shape{300, 7}}) {
      CAPTURE(dtype);
      const Tensor x = uniform(shape, -3.0, 5.0, {.dtype = dtype});
      const ChannelCodes cpu = encode_per_channel_u8(x), gpu = encode_per_channel_u8(x.to(kGpu));
      CHECK(gpu.low.to_vector<float>() == cpu.low.to_vector<float>());
      CHECK(gpu.step.to_vector<float>() == cpu.step.to_vector<float>());
      CHECK(gpu.codes.to_vector<std::uint8_t>() == cpu.codes.to_vector<std::uint8_t>());
      CHECK(decode_per_channel_u8(gpu).to_vector<double>() == decode_per_channel_u8(cpu).to_vector<double>());
    }
  }
  Tensor bad = ones({2, 3, 4});
  bad.data<float>()[1 * 12 + 2 * 4 + 3] = NAN;  // n 1, channel 2
  CHECK_THROWS_WITH_AS(encode_per_channel_u8(bad.to(kGpu)), doctest::Contains("channel 2 holds a non-finite value"), ValueError);
}
