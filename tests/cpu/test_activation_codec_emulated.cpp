// kernels/cuda/activation_codec.cu in the CUDA emulator against the CPU kernels, under two schedules:
// masks over a size that is not a multiple of 8 with exact 0s and 6s, channel ranges of [N, C] and
// [N, C, S] (a channel longer than the 1024-thread block, a constant channel, a NaN, an infinity),
// codes and decoded values. The arithmetic is shared (kernels/activation_codec_ops.h)
// and min, max and rounding-to-nearest do not depend on the order, so every byte must agree.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/random.h"
#include "emu/emulator.h"
#include "kernels/activation_codec_backends.h"

using namespace frugal;

namespace {
const std::vector<emu::Options> kSchedules{emu::Options{emu::Schedule::forward}, emu::Options{emu::Schedule::shuffle, 11}};
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// A tensor's bytes, to compare outputs of any dtype exactly (NaN included).
std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* first = static_cast<const std::uint8_t*>(t.data_ptr());
  return std::vector<std::uint8_t>(first, first + t.nbytes());
}

struct Coded {
  std::vector<std::uint8_t> low, step, codes, decoded;
};

// Runs one backend's ranges, then (unless a channel is uncodable) its encode and decode.
template <typename Backend>
Coded code_with(Backend backend, const Tensor& x, const BatchNormShape& shape) {
  Tensor low = empty({shape.channels}), step = empty({shape.channels});
  Tensor codes = empty(x.shape(), {.dtype = DType::u8}), decoded = empty(x.shape(), {.dtype = x.dtype()});
  backend.ranges(x.dtype(), x.data_ptr(), shape, low.data<float>(), step.data<float>());
  bool codable = true;
  for (float s : step.to_vector<float>()) codable = codable && std::isfinite(s);
  if (codable && x.numel() > 0) {
    backend.encode(x.dtype(), x.data_ptr(), shape, low.data<float>(), step.data<float>(), codes.data<std::uint8_t>());
    backend.decode(x.dtype(), codes.data<std::uint8_t>(), shape, low.data<float>(), step.data<float>(), decoded.data_ptr());
  }
  return {bytes_of(low), bytes_of(step), codable ? bytes_of(codes) : std::vector<std::uint8_t>{},
          codable ? bytes_of(decoded) : std::vector<std::uint8_t>{}};
}

struct Cpu {
  void ranges(auto&&... a) { cpu::channel_ranges(a...); }
  void encode(auto&&... a) { cpu::encode_channels(a...); }
  void decode(auto&&... a) { cpu::decode_channels(a...); }
};
struct Emulated {
  void ranges(auto&&... a) { cuda_emulated::channel_ranges(a...); }
  void encode(auto&&... a) { cuda_emulated::encode_channels(a...); }
  void decode(auto&&... a) { cuda_emulated::decode_channels(a...); }
};
}  // namespace

TEST_CASE("the CUDA mask kernels in the emulator give the CPU's bytes") {
  Generator g(3);
  constexpr std::int64_t kOdd = 1029;  // 128 full bytes and a last byte of 5 bits
  std::vector<double> v = uniform({kOdd}, -2.0, 8.0, {.dtype = DType::f64}, &g).to_vector<double>();
  for (std::size_t i = 0; i < v.size(); i += 5) v[i] = i % 2 ? 6.0 : 0.0;
  for (const emu::Options& schedule : kSchedules) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : kDTypes) {
      CAPTURE(dtype);
      const Tensor x = from_vector(v, {kOdd}).to(dtype), grad = uniform({kOdd}, -1.0, 1.0, {.dtype = dtype}, &g);
      Tensor cpu_mask = empty({packed_mask_bytes(kOdd)}, {.dtype = DType::u8}), emu_mask = empty({packed_mask_bytes(kOdd)}, {.dtype = DType::u8});
      cpu::pack_mask(dtype, x.data_ptr(), kOdd, 0.0, 6.0, cpu_mask.data<std::uint8_t>());
      cuda_emulated::pack_mask(dtype, x.data_ptr(), kOdd, 0.0, 6.0, emu_mask.data<std::uint8_t>());
      CHECK(bytes_of(emu_mask) == bytes_of(cpu_mask));
      Tensor cpu_out = empty({kOdd}, {.dtype = dtype}), emu_out = empty({kOdd}, {.dtype = dtype});
      cpu::apply_mask(dtype, grad.data_ptr(), cpu_mask.data<std::uint8_t>(), kOdd, cpu_out.data_ptr());
      cuda_emulated::apply_mask(dtype, grad.data_ptr(), cpu_mask.data<std::uint8_t>(), kOdd, emu_out.data_ptr());
      CHECK(bytes_of(emu_out) == bytes_of(cpu_out));
    }
  }
}

TEST_CASE("the CUDA channel codec kernels in the emulator give the CPU's ranges, codes and decoded values") {
  Generator g(17);
  // [N, C, S]: a channel of 2 * 520 values (more than a 1024-thread block), and [N, C] with S = 1.
  // Every dtype in the forward schedule, f32 also shuffled: each emulated block of 1024 fibers
  // costs, and this case keeps under a second in the sanitizer build. (Empty channels: the CPU
  // suite, and finish_channel called directly.)
  const BatchNormShape shapes[] = {{2, 2, 520}, {19, 2, 1}};
  for (const emu::Options& schedule : kSchedules) {
    emu::OptionsScope scope(schedule);
    for (DType dtype : kDTypes) {
      if (schedule.schedule != emu::Schedule::forward && dtype != DType::f32) continue;
      for (const BatchNormShape& shape : shapes) {
        CAPTURE(dtype);
        CAPTURE(shape.spatial);
        std::vector<double> v = uniform({shape.batch * shape.channels * shape.spatial}, -3.0, 5.0, {.dtype = DType::f64}, &g)
                                    .to_vector<double>();
        for (std::int64_t n = 0; n < shape.batch; ++n)  // channel 1 constant
          for (std::int64_t s = 0; s < shape.spatial; ++s) v[shape.offset(n, 1, s)] = 0.75;
        const Tensor x = from_vector(v, {shape.batch, shape.channels, shape.spatial}).to(dtype);
        const Coded cpu = code_with(Cpu{}, x, shape), emulated = code_with(Emulated{}, x, shape);
        CHECK(emulated.low == cpu.low);
        CHECK(emulated.step == cpu.step);
        CHECK(emulated.codes == cpu.codes);
        CHECK(emulated.decoded == cpu.decoded);
      }
    }
  }
}

TEST_CASE("the CUDA range kernel in the emulator marks a NaN and an infinity as the CPU does") {
  const BatchNormShape shape{3, 4, 50};
  std::vector<double> v(3 * 4 * 50, 1.0);
  v[shape.offset(2, 1, 49)] = std::numeric_limits<double>::quiet_NaN();
  v[shape.offset(0, 3, 7)] = -std::numeric_limits<double>::infinity();
  for (const emu::Options& schedule : kSchedules) {
    emu::OptionsScope scope(schedule);
    const Tensor x = from_vector(v, {3, 4, 50}).to(DType::f32);
    const Coded cpu = code_with(Cpu{}, x, shape), emulated = code_with(Emulated{}, x, shape);
    CHECK(emulated.low == cpu.low);
    CHECK(emulated.step == cpu.step);
    std::vector<float> steps(4);
    std::memcpy(steps.data(), emulated.step.data(), sizeof(float) * 4);
    CHECK((steps[0] == 0.0f && std::isnan(steps[1]) && steps[2] == 0.0f && std::isnan(steps[3])));
  }
}
