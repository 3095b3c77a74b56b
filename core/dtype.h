// DType: the element types a tensor can hold, their sizes and names, and `visit_dtype`, the one
// place that turns a runtime dtype into a C++ type.
// Not here: conversions between the 16-bit floats and float (core/half.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "core/error.h"
#include "core/half.h"

namespace frugal {

enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::u8,  DType::boolean};

std::size_t dtype_size(DType dtype);          // bytes per element
std::string_view dtype_name(DType dtype);     // "f32", ..., "bool"
DType parse_dtype(std::string_view name);     // inverse of dtype_name; ValueError if unknown
bool is_floating(DType dtype);                // f32, f64, f16, bf16
std::ostream& operator<<(std::ostream& out, DType dtype);

// The C++ type stored for each dtype.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <typename T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls fn.template operator()<T>() with T the C++ type of `dtype`; returns what fn returns.
//   visit_dtype(t.dtype(), [&]<typename T>() { fill<T>(...); });
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f64: return fn.template operator()<double>();
    case DType::f16: return fn.template operator()<Half>();
    case DType::bf16: return fn.template operator()<BFloat16>();
    case DType::i32: return fn.template operator()<std::int32_t>();
    case DType::i64: return fn.template operator()<std::int64_t>();
    case DType::u8: return fn.template operator()<std::uint8_t>();
    case DType::boolean: return fn.template operator()<bool>();
  }
  FRUGAL_THROW(DTypeError, "unknown dtype code ", static_cast<int>(dtype));
}

}  // namespace frugal
