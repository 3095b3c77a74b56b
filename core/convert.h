// convert<To>(from): the one element conversion used by every cast, on CPU and GPU.
// Rules (PyTorch's): anything -> bool is "!= 0"; the 16-bit floats go through float; everything
// else is a C++ static_cast (float -> integer truncates toward zero; out-of-range values are
// undefined, as in C++ and PyTorch).
#pragma once

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
    return To(static_cast<float>(from));
  } else {
    return static_cast<To>(from);
  }
}

}  // namespace frugal
