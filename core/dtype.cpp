// DType: sizes and names (see dtype.h).
#include "core/dtype.h"

namespace frugal {

std::size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, []<typename T>() { return sizeof(T); });
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  FRUGAL_THROW(DTypeError, "unknown dtype code ", static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes)
    if (dtype_name(dtype) == name) return dtype;
  FRUGAL_THROW(ValueError, "unknown dtype '", name, "': expected f32, f64, f16, bf16, i32, i64, u8 or bool");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace frugal
