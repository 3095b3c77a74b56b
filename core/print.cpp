// Printing tensors in the nested-bracket style users know from PyTorch:
//   tensor([[ 1.5000,  2.0000],
//           [-3.0000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)
// Large tensors are summarised: past kSummariseAbove elements only the first and last kEdgeItems of
// each dim are printed, with "..." between.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace frugal {

namespace {
constexpr std::int64_t kSummariseAbove = 1000;  // PyTorch's default print threshold
constexpr std::int64_t kEdgeItems = 3;          // and its default edge items

struct Printer {
  std::vector<double> values;         // floating dtypes: every element, row-major
  std::vector<std::int64_t> integers; // integer and bool dtypes: exact, even past 2^53
  Shape shape, strides;
  bool summarise = false;
  DType dtype = DType::f32;
  std::string float_format;
  std::size_t width = 0;

  bool shown(std::int64_t dim_size, std::int64_t i) const {
    return !summarise || dim_size <= 2 * kEdgeItems || i < kEdgeItems || i >= dim_size - kEdgeItems;
  }

  std::string element(std::int64_t index) const {
    if (dtype == DType::boolean) return integers[index] != 0 ? "True" : "False";
    if (!is_floating(dtype)) return std::to_string(integers[index]);
    const double v = values[index];
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, float_format.c_str(), v);
    return buffer;
  }

  // One format for every element, chosen from the values shown, as PyTorch does: integral values
  // print as "2.", moderate ones with 4 decimals, very large or small ones in scientific notation.
  void choose_format() {
    bool integral = true;
    double max_abs = 0.0, min_abs = INFINITY;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      integral = integral && v == std::floor(v);
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0.0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (integral && max_abs < 1e8) float_format = "%.0f.";
    else if (max_abs >= 1e8 || min_abs < 1e-4) float_format = "%.4e";
    else float_format = "%.4f";
  }

  void measure(std::int64_t d, std::int64_t base) {
    if (d == static_cast<std::int64_t>(shape.size())) {
      width = std::max(width, element(base).size());
      return;
    }
    for (std::int64_t i = 0; i < shape[d]; ++i)
      if (shown(shape[d], i)) measure(d + 1, base + i * strides[d]);
  }

  void print(std::ostream& out, std::int64_t d, std::int64_t base, std::size_t indent) const {
    if (d == static_cast<std::int64_t>(shape.size())) {
      const std::string text = element(base);
      out << std::string(width - text.size(), ' ') << text;
      return;
    }
    out << '[';
    const bool innermost = d + 1 == static_cast<std::int64_t>(shape.size());
    // Between innermost elements ", "; between rows a newline per dims below, then the indent.
    std::string separator = ",";
    if (innermost) {
      separator += ' ';
    } else {
      separator.append(shape.size() - d - 1, '\n');
      separator.append(indent + d + 1, ' ');
    }
    bool first = true, skipped = false;
    for (std::int64_t i = 0; i < shape[d]; ++i) {
      if (!shown(shape[d], i)) {
        if (!skipped) out << separator << "...";
        skipped = true;
        continue;
      }
      if (!first) out << separator;
      first = false;
      print(out, d + 1, base + i * strides[d], indent);
    }
    out << ']';
  }
};
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Printer printer;
  if (is_floating(dtype()))
    printer.values = to_vector<double>();
  else
    printer.integers = to_vector<std::int64_t>();
  printer.shape = shape();
  printer.strides = contiguous_strides(shape());
  printer.summarise = numel() > kSummariseAbove;
  printer.dtype = dtype();
  printer.choose_format();
  std::ostringstream out;
  const std::string prefix = "tensor(";
  if (numel() == 0) {
    out << prefix << "[]";
  } else {
    printer.measure(0, 0);
    out << prefix;
    printer.print(out, 0, 0, prefix.size());
  }
  out << ", shape=" << shape_str(shape()) << ", dtype=" << dtype() << ", device=" << device() << ')';
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.str(); }

}  // namespace frugal
