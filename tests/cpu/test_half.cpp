// f16 and bf16 conversions: round-to-nearest-even edge cases checked against values worked out by
// hand from the formats, plus an exhaustive round trip of every f16 bit pattern.
#include <doctest/doctest.h>

#include <cmath>
#include <ios>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/half.h"
#include "core/tensor.h"

using namespace frugal;

namespace {
std::uint16_t f16(float value) { return Half(value).bits; }
std::uint16_t bf16(float value) { return BFloat16(value).bits; }
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("f16: exact values and the format's landmarks") {
  CHECK(f16(0.0f) == 0x0000);
  CHECK(f16(-0.0f) == 0x8000);
  CHECK(f16(1.0f) == 0x3c00);
  CHECK(f16(-2.0f) == 0xc000);
  CHECK(f16(0.5f) == 0x3800);
  CHECK(f16(65504.0f) == 0x7bff);                 // largest finite
  CHECK(f16(std::ldexp(1.0f, -14)) == 0x0400);    // smallest normal
  CHECK(f16(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(f16(std::ldexp(1023.0f, -24)) == 0x03ff); // largest subnormal
  CHECK(f16(kInf) == 0x7c00);
  CHECK(f16(-kInf) == 0xfc00);
}

TEST_CASE("f16: rounding is to nearest, ties to even") {
  // Between 1 and 1 + 2^-10 (0x3c00, 0x3c01): the tie goes to the even 0x3c00; just above goes up.
  CHECK(f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  // Between 0x3c01 and 0x3c02 the tie goes up, to the even 0x3c02.
  CHECK(f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // 65519 rounds down to 65504; 65520 (the midpoint to 2^16) rounds to even, which is infinity.
  CHECK(f16(65519.0f) == 0x7bff);
  CHECK(f16(65520.0f) == 0x7c00);
  CHECK(f16(1e10f) == 0x7c00);
  // Subnormals: 2^-25 is halfway between 0 and 2^-24 and rounds to even (zero); 3 * 2^-25 rounds to 2 * 2^-24.
  CHECK(f16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(f16(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  CHECK(f16(std::ldexp(3.0f, -25)) == 0x0002);
  CHECK(f16(-std::ldexp(1.0f, -26)) == 0x8000);  // underflow keeps the sign
  // A carry from the largest subnormal reaches the smallest normal.
  CHECK(f16(std::ldexp(1023.5f, -24)) == 0x0400);
}

TEST_CASE("f16: NaN stays NaN, quiet, with its sign") {
  const std::uint16_t nan = f16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(std::isnan(static_cast<float>(Half::from_bits(nan))));
  CHECK((f16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000) == 0x8000);
  CHECK(std::isnan(static_cast<float>(Half::from_bits(0x7e00))));
}

TEST_CASE("f16: every bit pattern survives f16 -> f32 -> f16") {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = Half::from_bits(static_cast<std::uint16_t>(bits));
    if (std::isnan(value)) continue;
    REQUIRE_MESSAGE(f16(value) == bits, "bit pattern 0x" << std::hex << bits);
  }
  CHECK(static_cast<float>(Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(static_cast<float>(Half::from_bits(0x7bff)) == 65504.0f);
  CHECK(static_cast<float>(Half::from_bits(0xfc00)) == -kInf);
}

TEST_CASE("bf16: truncation with round to nearest even") {
  CHECK(bf16(1.0f) == 0x3f80);
  CHECK(bf16(-2.0f) == 0xc000);
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is the tie between 1 and 1 + 2^-7 and goes to the even 1.
  CHECK(bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie between 0x3f81 and 0x3f82: even
  CHECK(bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
  CHECK(bf16(kInf) == 0x7f80);
  CHECK(bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  const std::uint16_t nan = bf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0));
  // A signalling NaN whose payload sits only in the low bits must not become infinity.
  const float low_payload_nan = half_bits::bits_float(0x7f800001u);
  CHECK(std::isnan(static_cast<float>(BFloat16(low_payload_nan))));
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = BFloat16::from_bits(static_cast<std::uint16_t>(bits));
    if (std::isnan(value)) continue;
    REQUIRE(bf16(value) == bits);
  }
}

TEST_CASE("double -> f16/bf16 rounds once, not through float") {
  // Through float, 1 + 2^-11 + 2^-40 first becomes 1 + 2^-11 (a tie) and then 1 (even): wrong.
  CHECK(convert<Half>(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits == 0x3c01);
  CHECK(convert<Half>(1.0 + std::ldexp(1.0, -11)).bits == 0x3c00);  // a true tie still goes to even
  CHECK(convert<BFloat16>(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)).bits == 0x3f81);
  CHECK(convert<BFloat16>(1.0 + std::ldexp(1.0, -8)).bits == 0x3f80);
  CHECK(convert<Half>(1e300).bits == 0x7c00);
  CHECK(convert<Half>(-1e-300).bits == 0x8000);
  CHECK(convert<BFloat16>(1e300).bits == 0x7f80);
  CHECK(std::isnan(static_cast<float>(convert<Half>(std::nan("")))));
  CHECK(convert<Half>(std::int64_t{65504}).bits == 0x7bff);
  // Every double exactly between two f16 values, nudged by one double ulp either way, must round
  // to the nearer one; checked over the whole positive finite f16 range.
  for (std::uint16_t bits = 0x0001; bits < 0x7bff; ++bits) {
    const double low = static_cast<float>(Half::from_bits(bits));
    const double high = static_cast<float>(Half::from_bits(static_cast<std::uint16_t>(bits + 1)));
    const double middle = (low + high) / 2;
    REQUIRE(convert<Half>(std::nextafter(middle, 0.0)).bits == bits);
    REQUIRE(convert<Half>(std::nextafter(middle, 1e9)).bits == bits + 1);
  }
}

TEST_CASE("convert follows PyTorch's casting rules") {
  CHECK(convert<bool>(0.5f) == true);
  CHECK(convert<bool>(0.0) == false);
  CHECK(convert<bool>(Half(0.0f)) == false);
  CHECK(convert<bool>(BFloat16(-3.0f)) == true);
  CHECK(convert<std::int32_t>(-2.9f) == -2);  // truncation toward zero
  CHECK(convert<std::uint8_t>(200.7) == 200);
  CHECK(convert<std::uint8_t>(-1.0f) == 255);  // through int64, as PyTorch does
  CHECK(convert<std::uint8_t>(Half(-2.0f)) == 254);
  CHECK(convert<float>(Half(1.5f)) == 1.5f);
  CHECK(convert<Half>(BFloat16(2.0f)).bits == 0x4000);
  CHECK(convert<double>(true) == 1.0);
}

TEST_CASE("bf16: tensor casts (the vector loops) give BFloat16's bits for every kind of float") {
  // Bit patterns from every exponent with mantissas at the rounding edges (ties both ways, just
  // above and below), NaNs of both signs and payloads, infinities and denormals; more than one
  // parallel chunk, and a length no vector width divides.
  std::vector<float> values;
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent)
      for (std::uint32_t mantissa : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x7fffffu, 0x400000u, 0x7f8000u})
        values.push_back(half_bits::bits_float(sign | (exponent << 23) | mantissa));
  while (values.size() < 40001) values.push_back(static_cast<float>(values.size()) * 1.0009765625f);
  const Tensor f32 = from_vector(values);
  const std::vector<BFloat16> cast = f32.to(DType::bf16).to_vector<BFloat16>();
  REQUIRE(cast.size() == values.size());
  std::vector<float> back_expected;
  for (std::size_t i = 0; i < values.size(); ++i) {
    CHECK_MESSAGE(cast[i].bits == BFloat16(values[i]).bits, "element ", i);
    back_expected.push_back(static_cast<float>(cast[i]));
  }
  const std::vector<float> back = f32.to(DType::bf16).to(DType::f32).to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i)
    CHECK(half_bits::float_bits(back[i]) == half_bits::float_bits(back_expected[i]));
}
