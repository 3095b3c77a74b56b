// Activation codecs (kernels/activation_codec.h): 1-bit masks against a plain loop (exact 0 and 6,
// sizes that are not multiples of 8, empty, strided, every floating dtype), 8-bit per-channel codes
// within half a step of their input, the same bytes on 1, 2 and 3 threads, the per-element functions
// of kernels/activation_codec_ops.h called directly, typed errors, and the meta device allocating
// what the CPU does. The CUDA kernels in the emulator: test_activation_codec_emulated.cpp.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/allocator_registry.h"
#include "core/cpu/parallel.h"
#include "core/random.h"
#include "kernels/activation_codec.h"
#include "kernels/activation_codec_ops.h"
#include "kernels/elementwise.h"

using namespace frugal;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Uniform values in (-2, 8) with exact 0s and 6s (the ReLU6 edges) and their f64 neighbours sprinkled in.
std::vector<double> relu6_edges(std::int64_t numel, Generator& g) {
  std::vector<double> v = uniform({numel}, -2.0, 8.0, {.dtype = DType::f64}, &g).to_vector<double>();
  const double edges[] = {0.0, 6.0, -0.0, std::nextafter(0.0, 1.0), std::nextafter(6.0, 0.0), std::nextafter(6.0, 7.0)};
  for (std::size_t i = 0; i < v.size(); i += 3) v[i] = edges[(i / 3) % 6];
  return v;
}

// The mask by the definition: one bit per element, low < x < high, bytes least significant bit first.
std::vector<std::uint8_t> plain_mask(const std::vector<double>& x, double low, double high) {
  std::vector<std::uint8_t> mask((x.size() + 7) / 8, 0);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (low < x[i] && x[i] < high) mask[i / 8] = static_cast<std::uint8_t>(mask[i / 8] | (1u << (i % 8)));
  return mask;
}

// Channel c of [N, C, S] spans center_c +- spread_c, the centres and spreads far apart (a channel
// near 1000 with spread 0.01, a constant channel), so each channel's step differs.
Tensor channel_data(const Shape& shape, DType dtype, Generator& g) {
  const std::int64_t channels = shape[1];
  std::int64_t spatial = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) spatial *= shape[d];
  std::vector<double> v = uniform(shape, -1.0, 1.0, {.dtype = DType::f64}, &g).to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t c = static_cast<std::int64_t>(i) / spatial % channels;
    const double center[] = {0.0, 3.0, -50.0, 1000.0, 7.0}, spread[] = {1.0, 3.0, 40.0, 0.01, 0.0};
    v[i] = center[c % 5] + spread[c % 5] * v[i];
  }
  return from_vector(v, shape).to(dtype);
}

// Unit roundoff of a dtype: half the distance from 1 to the next value.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -8);  // bf16
  }
}

// Every channel's low is its min (rounded down to f32), its step (max - low) / 255 in f32, and every
// decoded value within step / 2 of its input, plus the slack below. Returns the largest error in steps.
double check_codes(const Tensor& x) {
  const ChannelCodes coded = encode_per_channel_u8(x);
  REQUIRE(coded.codes.shape() == x.shape());
  REQUIRE(coded.codes.dtype() == DType::u8);
  REQUIRE(coded.dtype == x.dtype());
  const Tensor decoded = decode_per_channel_u8(coded);
  REQUIRE(decoded.dtype() == x.dtype());
  const auto xs = x.to_vector<double>(), ds = decoded.to_vector<double>();
  const auto low = coded.low.to_vector<float>(), step = coded.step.to_vector<float>();
  const auto codes = coded.codes.to_vector<std::uint8_t>();
  const std::int64_t channels = x.size(1), spatial = x.numel() / (x.size(0) * channels);
  std::vector<double> lo(channels, kInf), hi(channels, -kInf);
  std::vector<int> top(channels, 0);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::int64_t c = static_cast<std::int64_t>(i) / spatial % channels;
    lo[c] = std::min(lo[c], xs[i]);
    hi[c] = std::max(hi[c], xs[i]);
    top[c] = std::max<int>(top[c], codes[i]);
  }
  double worst = 0.0;
  for (std::int64_t c = 0; c < channels; ++c) {
    CAPTURE(c);
    CHECK(low[c] <= lo[c]);  // the largest f32 at or below the min: the min itself unless x is f64
    CHECK(std::nextafter(low[c], std::numeric_limits<float>::infinity()) > lo[c]);
    CHECK(step[c] == static_cast<float>((hi[c] - low[c]) / 255.0));
    CHECK(top[c] == (hi[c] > lo[c] ? 255 : 0));  // the max codes as 255; a constant channel as 0
  }
  // The slack: q = (x - low) / step off by < 2^-14 of a step when computed in float (see
  // encode_value), and at most two roundings of the decoded value (to double, then to the dtype),
  // each <= unit_roundoff * |value|.
  const double u = unit_roundoff(x.dtype());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::int64_t c = static_cast<std::int64_t>(i) / spatial % channels;
    const double error = std::abs(ds[i] - xs[i]);
    const double bound = step[c] * (0.5 + std::ldexp(1.0, -14)) + 2.0 * u * (std::abs(xs[i]) + step[c]);
    REQUIRE_MESSAGE(error <= bound, "element ", i, " channel ", c, ": x ", xs[i], " decoded ", ds[i], " step ", step[c]);
    if (step[c] > 0) worst = std::max(worst, error / step[c]);
  }
  return worst;
}

std::int64_t requested(Device device) { return allocator_for(device).stats().requested_bytes.current; }
std::int64_t requested_peak(Device device) { return allocator_for(device).stats().requested_bytes.peak; }
}  // namespace

TEST_CASE("activation codec ops: mask bits and bytes, code rounding, ranges, decoding, called directly") {
  CHECK(packed_mask_bytes(0) == 0);
  CHECK(packed_mask_bytes(1) == 1);
  CHECK(packed_mask_bytes(8) == 1);
  CHECK(packed_mask_bytes(9) == 2);
  const std::uint8_t mask[] = {0b10000001, 0b00000010};
  CHECK(mask_bit(mask, 0));
  CHECK_FALSE(mask_bit(mask, 1));
  CHECK(mask_bit(mask, 7));
  CHECK(mask_bit(mask, 9));
  const float x[] = {0.0f, 0.5f, 6.0f, 5.99f, -1.0f, NAN, 3.0f, 7.0f, 1.0f, 6.0f};
  const OpenRange<float> relu6 = open_range<float>(0.0, 6.0);
  CHECK(pack_mask_byte(x, 10, relu6, 0) == 0b01001010);  // 0.5, 5.99, 3: not 0, 6, -1, NaN or 7
  CHECK(pack_mask_byte(x, 10, relu6, 1) == 0b00000001);  // elements 8, 9 only; bits past numel stay 0
  CHECK(pack_mask_byte(x, 9, relu6, 1) == 0b00000001);
  // Bounds that f32 cannot hold round outward, and float comparisons then agree with double ones.
  const OpenRange<float> tenth = open_range<float>(0.1, 0.3);
  CHECK((tenth.low < 0.1 && tenth.high > 0.3));
  const float near[] = {static_cast<float>(0.1), std::nextafter(static_cast<float>(0.1), 0.0f), static_cast<float>(0.3),
                        std::nextafter(static_cast<float>(0.3), 1.0f), std::nextafter(static_cast<float>(0.3), 0.0f)};
  for (float v : near) CHECK(in_open_range(v, tenth) == static_cast<unsigned>(0.1 < v && v < 0.3));
  CHECK(open_range<double>(0.1, 0.3).low == 0.1);
  const float grad[] = {1, 2, 3, 4, 5, 6, 7, 8, INFINITY, 10};
  float out[10];
  apply_mask_byte(grad, mask, out, 10, 0);
  apply_mask_byte(grad, mask, out, 10, 1);
  CHECK(std::vector<float>(out, out + 10) == std::vector<float>{1, 0, 0, 0, 0, 0, 0, 8, 0, 10});  // inf under a 0 bit: 0

  // Halves round up, by the exact fraction: q = 0.49999999999999994 stays 0 (floor(q + 0.5) would give 1).
  CHECK(encode_value(0.5, 0.0f, 1.0f) == 1);
  CHECK(encode_value(std::nextafter(0.5, 0.0), 0.0f, 1.0f) == 0);
  CHECK(encode_value(std::nextafter(0.5f, 0.0f), 0.0f, 1.0f) == 0);  // in float too
  CHECK(encode_value(254.5f, 0.0f, 1.0f) == 255);
  CHECK(encode_value(1.5, 0.0f, 1.0f) == 2);
  CHECK(encode_value(254.7, 0.0f, 1.0f) == 255);
  CHECK(encode_value(300.0, 0.0f, 1.0f) == 255);  // clamped
  CHECK(encode_value(-3.0, 0.0f, 1.0f) == 0);
  CHECK(encode_value(42.0, 42.0f, 0.0f) == 0);  // a constant channel
  CHECK(encode_value(42.5f, 42.0f, 0.0f) == 0);
  CHECK(encode_value(6.0, 0.0f, 6.0f / 255) == 255);
  CHECK(decode_value<float>(255, 1.0f, 0.5f) == 128.5f);
  CHECK(decode_value<double>(3, -1.0f, 0.25f) == -0.25);
  CHECK(static_cast<float>(decode_value<BFloat16>(2, 0.0f, 1.0f)) == 2.0f);

  CHECK(float_at_or_below(0.1) == std::nextafter(static_cast<float>(0.1), 0.0f));  // 0.1 rounds up to f32
  CHECK(float_at_or_below(0.7) == static_cast<float>(0.7));                        // 0.7 rounds down already
  CHECK(float_at_or_below(2.0) == 2.0f);
  CHECK(float_at_or_below(1e39) == std::numeric_limits<float>::max());  // beyond f32's range
  CHECK(float_at_or_below(-1e39) == -std::numeric_limits<float>::infinity());
  CHECK(float_at_or_below(kInf) == std::numeric_limits<float>::infinity());
  CHECK(float_at_or_above(0.1) == static_cast<float>(0.1));
  CHECK(float_at_or_above(0.7) == std::nextafter(static_cast<float>(0.7), 1.0f));
  for (double d : {0.1, -0.1, 1e6 + 0.1, -1e-30, 3e38}) {  // the largest f32 at or below d
    CAPTURE(d);
    CHECK(float_at_or_below(d) <= d);
    CHECK(std::nextafter(float_at_or_below(d), std::numeric_limits<float>::infinity()) > d);
  }

  // A channel's range is the same whichever way it is split and merged; NaNs are counted.
  const double values[] = {3.0, -1.5, NAN, 8.25, 0.0};
  ChannelRange<double> whole, front, back;
  for (double v : values) whole.add(v);
  for (int i = 0; i < 2; ++i) front.add(values[i]);
  for (int i = 2; i < 5; ++i) back.add(values[i]);
  back.merge(front);
  CHECK(back.low == whole.low);
  CHECK(back.high == whole.high);
  CHECK(whole.nans == 1);
  CHECK(back.nans == 1);

  float low[5], step[5];
  ChannelRange<double> plain;
  plain.add(-1.0);
  plain.add(4.1);
  finish_channel(plain, 0, low, step);
  CHECK(low[0] == -1.0f);
  CHECK(step[0] == static_cast<float>(5.1 / 255));
  finish_channel(ChannelRange<float>{}, 1, low, step);  // no elements
  CHECK((low[1] == 0.0f && step[1] == 0.0f));
  finish_channel(whole, 2, low, step);  // a NaN
  CHECK(std::isnan(step[2]));
  ChannelRange<float> infinite;
  infinite.add(-kInf);
  finish_channel(infinite, 3, low, step);
  CHECK(std::isnan(step[3]));
  ChannelRange<double> huge;
  huge.add(1e39);
  finish_channel(huge, 4, low, step);  // beyond f32
  CHECK(std::isinf(step[4]));
}

TEST_CASE("pack_mask_between and apply_packed_mask match a plain loop: exact 0 and 6, odd sizes, empty, every dtype") {
  Generator g(41);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t numel : {0, 1, 7, 8, 13, 1001}) {
      CAPTURE(dtype);
      CAPTURE(numel);
      const Tensor x = from_vector(relu6_edges(numel, g), {numel}).to(dtype);
      const std::vector<double> xs = x.to_vector<double>();  // the values as the dtype holds them
      const Tensor mask = pack_mask_between(x, 0.0, 6.0);
      CHECK(mask.dtype() == DType::u8);
      CHECK(mask.shape() == Shape{(numel + 7) / 8});
      CHECK(mask.to_vector<std::uint8_t>() == plain_mask(xs, 0.0, 6.0));

      const Tensor grad = uniform({numel}, -1.0, 1.0, {.dtype = dtype}, &g);
      const Tensor masked = apply_packed_mask(grad, mask);
      CHECK(masked.dtype() == dtype);
      CHECK(masked.shape() == grad.shape());
      const auto gs = grad.to_vector<double>(), ms = masked.to_vector<double>();
      for (std::size_t i = 0; i < xs.size(); ++i)
        REQUIRE_MESSAGE(ms[i] == (0.0 < xs[i] && xs[i] < 6.0 ? gs[i] : 0.0), "element ", i, " x ", xs[i]);
    }
  }
}

TEST_CASE("masks of strided tensors follow row-major order, other bounds hold, and bad input is a typed error") {
  Generator g(7);
  const Tensor base = from_vector(relu6_edges(12 * 17, g), {12, 17});
  const Tensor xt = base.t();  // [17, 12], not contiguous
  CHECK(pack_mask_between(xt, 0.0, 6.0).to_vector<std::uint8_t>() == plain_mask(xt.to_vector<double>(), 0.0, 6.0));
  CHECK(pack_mask_between(base, 0.0, kInf).to_vector<std::uint8_t>() == plain_mask(base.to_vector<double>(), 0.0, kInf));
  // Bounds that no f32 or bf16 holds, with the values nearest them in the data: f32 and bf16 compare
  // in float against bounds rounded outward, and must agree with the comparison in double.
  std::vector<double> near_bounds = relu6_edges(203, g);
  for (std::size_t i = 1; i < near_bounds.size(); i += 4)
    near_bounds[i] = std::nextafter(static_cast<float>(i % 8 < 4 ? 0.1 : 5.9), i % 3 == 0 ? 0.0f : i % 3 == 1 ? 10.0f : 1.0f);
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = from_vector(near_bounds, {203}).to(dtype);
    CHECK(pack_mask_between(x, 0.1, 5.9).to_vector<std::uint8_t>() == plain_mask(x.to_vector<double>(), 0.1, 5.9));
    CHECK(pack_mask_between(x, -1e300, 1e300).to_vector<std::uint8_t>() == plain_mask(x.to_vector<double>(), -1e300, 1e300));
  }
  const Tensor grad = uniform({12, 17}, -1.0, 1.0, {}, &g).t();
  const Tensor mask = pack_mask_between(xt, 0.0, 6.0);
  const auto masked = apply_packed_mask(grad, mask).to_vector<double>();
  const auto gs = grad.to_vector<double>(), xs = xt.to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) REQUIRE(masked[i] == (0.0 < xs[i] && xs[i] < 6.0 ? gs[i] : 0.0));

  CHECK_THROWS_AS(pack_mask_between(ones({4}, {.dtype = DType::i64}), 0.0, 6.0), DTypeError);
  CHECK_THROWS_AS(pack_mask_between(ones({4}), NAN, 6.0), ValueError);
  CHECK_THROWS_AS(pack_mask_between(Tensor(), 0.0, 6.0), ValueError);
  const Tensor grad9 = ones({9});
  CHECK_THROWS_WITH_AS(apply_packed_mask(grad9, zeros({1}, {.dtype = DType::u8})),
                       doctest::Contains("a mask of 1 bytes does not fit a gradient of shape [9] (needs 2)"), ValueError);
  CHECK_THROWS_WITH_AS(apply_packed_mask(grad9, zeros({2})), doctest::Contains("the mask must be u8"), ValueError);
  CHECK_THROWS_AS(apply_packed_mask(ones({9}, {.dtype = DType::i32}), zeros({2}, {.dtype = DType::u8})), DTypeError);
  CHECK_THROWS_AS(apply_packed_mask(grad9, zeros({2}, {.dtype = DType::u8, .device = Device::meta()})), DeviceError);
}

TEST_CASE("8-bit codes per channel decode within half a step: [N, C] and [N, C, H, W], every floating dtype") {
  Generator g(5);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const Shape& shape : {Shape{37, 5}, Shape{3, 5, 7, 9}, Shape{2, 10, 4, 4}}) {
      CAPTURE(dtype);
      CAPTURE(shape_str(shape));
      const double worst = check_codes(channel_data(shape, dtype, g));
      CHECK(worst > 0.25);  // random data lands near half a step somewhere: the bound is not slack
    }
  }
}

TEST_CASE("8-bit codes: a constant channel decodes exactly, f64 low rounds down, a strided input, an empty batch") {
  const Tensor constant = full({4, 3, 2}, 2.5, {.dtype = DType::f64});
  const ChannelCodes coded = encode_per_channel_u8(constant);
  CHECK(coded.step.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(coded.codes.to_vector<std::uint8_t>() == std::vector<std::uint8_t>(24, 0));
  CHECK(decode_per_channel_u8(coded).to_vector<double>() == constant.to_vector<double>());

  // f64 around 1e6 with a range of 1e-3: the f32 nearest the min can lie above it by up to 0.03,
  // which would put values below low; rounded down, every value codes within half the stored step.
  Generator g(9);
  const Tensor near_million = add(uniform({16, 2, 3}, 0.0, 1e-3, {.dtype = DType::f64}, &g), 1e6 + 0.1);
  check_codes(near_million);

  const Tensor strided = channel_data({5, 6, 4}, DType::f32, g).transpose(0, 2);  // [4, 6, 5] as a view
  REQUIRE_FALSE(strided.is_contiguous());
  check_codes(strided);

  const ChannelCodes empty_batch = encode_per_channel_u8(empty({0, 3, 4}));
  CHECK(empty_batch.codes.shape() == Shape{0, 3, 4});
  CHECK(empty_batch.step.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(decode_per_channel_u8(empty_batch).shape() == Shape{0, 3, 4});
  CHECK(encode_per_channel_u8(empty({2, 0, 4})).low.shape() == Shape{0});
}

TEST_CASE("8-bit codes: non-finite values and f64 beyond f32 are ValueErrors naming the channel, bad parts typed errors") {
  std::vector<double> v(2 * 4 * 3, 1.0);
  v[1 * 12 + 2 * 3 + 1] = NAN;  // n 1, channel 2
  CHECK_THROWS_WITH_AS(encode_per_channel_u8(from_vector(v, {2, 4, 3})), doctest::Contains("channel 2 holds a non-finite value"),
                       ValueError);
  v[1 * 12 + 2 * 3 + 1] = 1.0;
  v[0 * 12 + 1 * 3 + 0] = -kInf;  // n 0, channel 1
  v[1 * 12 + 3 * 3 + 2] = kInf;   // channel 3: the first bad channel is named
  CHECK_THROWS_WITH_AS(encode_per_channel_u8(from_vector(v, {2, 4, 3}).to(DType::bf16)),
                       doctest::Contains("channel 1 holds a non-finite value"), ValueError);
  std::vector<double> wide(2 * 3, 0.0);
  wide[4] = 1e39;  // n 1, channel 1
  CHECK_THROWS_WITH_AS(encode_per_channel_u8(from_vector(wide, {2, 3})), doctest::Contains("channel 1 holds values beyond f32"),
                       ValueError);

  CHECK_THROWS_AS(encode_per_channel_u8(ones({5})), ShapeError);
  CHECK_THROWS_AS(encode_per_channel_u8(ones({2, 3}, {.dtype = DType::i32})), DTypeError);
  CHECK_THROWS_AS(encode_per_channel_u8(Tensor()), ValueError);
  const ChannelCodes good = encode_per_channel_u8(ones({2, 3, 4}));
  ChannelCodes bad = good;
  bad.low = zeros({4});
  CHECK_THROWS_AS(decode_per_channel_u8(bad), ShapeError);
  bad = good;
  bad.step = zeros({3}, {.dtype = DType::f64});
  CHECK_THROWS_AS(decode_per_channel_u8(bad), DTypeError);
  bad = good;
  bad.codes = zeros({2, 3, 4});
  CHECK_THROWS_AS(decode_per_channel_u8(bad), DTypeError);
  bad = good;
  bad.dtype = DType::i64;
  CHECK_THROWS_AS(decode_per_channel_u8(bad), DTypeError);
  bad = good;
  bad.step = Tensor();
  CHECK_THROWS_AS(decode_per_channel_u8(bad), ValueError);
  bad = good;
  bad.low = zeros({3}, {.device = Device::meta()});
  CHECK_THROWS_AS(decode_per_channel_u8(bad), DeviceError);
}

TEST_CASE("8-bit codes: an f32 channel's range, taken in vector lanes, is the f64 one taken value by value") {
  // f32 planes run through two vectors of 8 lanes and a scalar tail (Note [Channel ranges in lanes]), f64 planes
  // one value at a time; the same values give the same min and max, so the same low and step. Every
  // plane length from 1 to 40 (tail only, whole lanes, both), with channel 1's extremes moved through
  // every position of a plane.
  Generator g(21);
  for (std::int64_t spatial = 1; spatial <= 40; ++spatial) {
    CAPTURE(spatial);
    for (std::int64_t at = 0; at < spatial; ++at) {
      std::vector<double> v = uniform({2 * 3 * spatial}, -1.0, 1.0, {.dtype = DType::f32}, &g).to_vector<double>();
      v[(1 * 3 + 1) * spatial + at] = -3.5;                          // n 1, channel 1: its min
      v[(0 * 3 + 1) * spatial + (spatial - 1 - at)] = 2.75;          // n 0, channel 1: its max
      const Tensor f64 = from_vector(v, {2, 3, spatial});
      const ChannelCodes lanes = encode_per_channel_u8(f64.to(DType::f32)), scalar = encode_per_channel_u8(f64);
      CHECK(lanes.low.to_vector<float>() == scalar.low.to_vector<float>());
      CHECK(lanes.step.to_vector<float>() == scalar.step.to_vector<float>());
    }
  }
  // A NaN or an infinity in any lane or in the tail marks its channel.
  for (std::int64_t at = 0; at < 37; ++at) {
    CAPTURE(at);
    for (const double bad : {std::nan(""), kInf, -kInf}) {
      std::vector<double> v(2 * 3 * 37, 0.5);
      v[(1 * 3 + 2) * 37 + at] = bad;  // n 1, channel 2
      CHECK_THROWS_WITH_AS(encode_per_channel_u8(from_vector(v, {2, 3, 37}).to(DType::f32)),
                           doctest::Contains("channel 2 holds a non-finite value"), ValueError);
    }
  }
}

TEST_CASE("codes and masks are the same bytes on 1, 2 and 3 threads") {
  Generator g(13);
  const Tensor x = channel_data({8, 20, 16, 16}, DType::f32, g);  // 40960 values: enough work for a parallel region
  const Tensor grad = uniform({8, 20, 16, 16}, -1.0, 1.0, {}, &g);
  struct Bytes {
    std::vector<std::uint8_t> codes, mask;
    std::vector<float> low, step, decoded, masked;
  };
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const ChannelCodes coded = encode_per_channel_u8(x);
    const Tensor mask = pack_mask_between(x, 0.0, 6.0);
    Bytes b{coded.codes.to_vector<std::uint8_t>(), mask.to_vector<std::uint8_t>(), coded.low.to_vector<float>(),
            coded.step.to_vector<float>(), decode_per_channel_u8(coded).to_vector<float>(),
            apply_packed_mask(grad, mask).to_vector<float>()};
    omp_set_num_threads(saved);
    return b;
  };
  const std::uint64_t regions = cpu::parallel_regions_opened();
  const Bytes one = run(1);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    const Bytes other = run(threads);
    CHECK(other.codes == one.codes);
    CHECK(other.mask == one.mask);
    CHECK(other.low == one.low);
    CHECK(other.step == one.step);
    CHECK(other.decoded == one.decoded);
    CHECK(other.masked == one.masked);
  }
  CHECK(cpu::parallel_regions_opened() > regions);  // the loops did split over threads
}

TEST_CASE("on the meta device the codecs allocate what the CPU does, and check their input the same way") {
  // A strided input: both devices make the same contiguous copy first.
  auto measure = [](Device device) {
    const Tensor x = zeros({6, 5, 4, 3}, {.device = device}).transpose(2, 3);
    const Tensor grad = zeros({6, 5, 3, 4}, {.dtype = DType::bf16, .device = device});
    const std::int64_t before = requested(device);
    allocator_for(device).reset_peak_stats();
    const Tensor mask = pack_mask_between(x, 0.0, 6.0);
    const Tensor masked = apply_packed_mask(grad, mask);
    const ChannelCodes coded = encode_per_channel_u8(x);
    const Tensor decoded = decode_per_channel_u8(coded);
    CHECK(mask.device() == device);
    CHECK(mask.shape() == Shape{45});  // ceil(360 / 8)
    CHECK(masked.shape() == grad.shape());
    CHECK(masked.dtype() == DType::bf16);
    CHECK(coded.codes.shape() == Shape{6, 5, 3, 4});
    CHECK(coded.low.shape() == Shape{5});
    CHECK(decoded.shape() == Shape{6, 5, 3, 4});
    CHECK(decoded.dtype() == DType::f32);
    // held: the mask 45, masked 720, codes 360, low and step 20 each, decoded 1440 bytes
    return std::pair{requested(device) - before, requested_peak(device) - before};
  };
  const auto cpu_bytes = measure(Device::cpu()), meta_bytes = measure(Device::meta());
  CHECK(cpu_bytes.first == 45 + 720 + 360 + 20 + 20 + 1440);
  CHECK(meta_bytes == cpu_bytes);  // held, and the peak with the strided input's contiguous copies

  const Tensor meta_x = empty({2, 3}, {.device = Device::meta()});
  CHECK_THROWS_AS(pack_mask_between(empty({4}, {.dtype = DType::i64, .device = Device::meta()}), 0.0, 6.0), DTypeError);
  CHECK_THROWS_AS(apply_packed_mask(meta_x, empty({2}, {.dtype = DType::u8, .device = Device::meta()})), ValueError);
  CHECK_THROWS_AS(encode_per_channel_u8(empty({6}, {.device = Device::meta()})), ShapeError);
  CHECK_NOTHROW(encode_per_channel_u8(meta_x));  // no values: nothing to find non-finite
}
