// convert<To>(from): the one element conversion used by every cast, on CPU and GPU.
// Rules (PyTorch's):
//   - anything -> bool is "!= 0";
//   - from f16/bf16: through float, which holds every f16 and bf16 value exactly;
//   - to f16/bf16: one rounding to nearest even (from non-float sources through round-to-odd, see
//     half_bits::round_to_odd_float, so a double is not rounded twice). An i64 above 2^53 is first
//     rounded to double, so i64 -> bf16 can round twice there (i32 and u8 convert to double exactly);
//   - floating -> u8 goes through int64, so negative values wrap (-1 -> 255) the same way on CPU and
//     GPU; a direct float -> unsigned cast is undefined in C++, and GCC and nvcc disagree on it;
//   - everything else is a C++ static_cast: floating -> integer truncates toward zero, and values
//     outside the integer's range are undefined, as in C++ and PyTorch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/host_device.h"

namespace frugal {

template <typename T>
inline constexpr bool is_half_type_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename To, typename From>
FRUGAL_HOST_DEVICE inline To convert(From from) {
  if constexpr (std::is_same_v<To, From>) {
    return from;
  } else if constexpr (is_half_type_v<From>) {
    return convert<To>(static_cast<float>(from));
  } else if constexpr (std::is_same_v<To, bool>) {
    return from != From(0);
  } else if constexpr (is_half_type_v<To>) {
    if constexpr (std::is_same_v<From, float>)
      return To(from);
    else
      return To::from_double(static_cast<double>(from));
  } else if constexpr (std::is_unsigned_v<To> && std::is_floating_point_v<From>) {
    return static_cast<To>(static_cast<std::int64_t>(from));
  } else {
    return static_cast<To>(from);
  }
}

}  // namespace frugal
