// Printing tensors in the nested-bracket style users know from PyTorch:
//   tensor([[ 1.5000,  2.0000],
//           [-3.0000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)
// Large tensors are summarised: past kSummariseAbove elements only the first and last kEdgeItems of
// each dim are printed, with "..." between. Only those elements are copied off the device.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace frugal {

namespace {
constexpr std::int64_t kSummariseAbove = 1000;  // PyTorch's default print threshold
constexpr std::int64_t kEdgeItems = 3;          // and its default edge items

// The elements a summary shows: per dim the first and last kEdgeItems (all of a short dim), packed
// into a small CPU tensor, one corner block at a time. `cut[d]` says whether dim d lost its middle.
Tensor shown_elements(const Tensor& t, std::vector<bool>& cut) {
  Shape small = t.shape();
  std::vector<std::int64_t> cut_dims;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    cut[d] = small[d] > 2 * kEdgeItems;
    if (cut[d]) {
      small[d] = 2 * kEdgeItems;
      cut_dims.push_back(d);
    }
  }
  Tensor out = empty(small, {.dtype = t.dtype()});
  // Each corner takes the head or the tail of every cut dim: 2^(cut dims) blocks, at most 256.
  for (std::uint32_t corner = 0; corner < (1u << cut_dims.size()); ++corner) {
    Tensor from = t, to = out;
    for (std::size_t i = 0; i < cut_dims.size(); ++i) {
      const std::int64_t d = cut_dims[i];
      const bool tail = (corner >> i) & 1u;
      from = from.narrow(d, tail ? t.shape()[d] - kEdgeItems : 0, kEdgeItems);
      to = to.narrow(d, tail ? kEdgeItems : 0, kEdgeItems);
    }
    to.copy_(from);
  }
  return out;
}

struct Printer {
  std::vector<double> values;          // floating dtypes: the shown elements, row-major
  std::vector<std::int64_t> integers;  // integer and bool dtypes: exact, even past 2^53
  Shape shape, strides;                // of the shown elements
  std::vector<bool> cut;               // dims whose middle is replaced by "..."
  DType dtype = DType::f32;
  std::string float_format;
  std::size_t width = 0;

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
    const std::int64_t count = shape_numel(shape);
    for (std::int64_t i = 0; i < count; ++i) width = std::max(width, element(i).size());
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
    for (std::int64_t i = 0; i < shape[d]; ++i) {
      if (i > 0) out << separator;
      if (cut[d] && i == kEdgeItems) out << "..." << separator;
      print(out, d + 1, base + i * strides[d], indent);
    }
    out << ']';
  }
};
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Printer printer;
  printer.cut.assign(dim(), false);
  const Tensor shown = numel() > kSummariseAbove ? shown_elements(*this, printer.cut) : *this;
  if (is_floating(dtype()))
    printer.values = shown.to_vector<double>();
  else
    printer.integers = shown.to_vector<std::int64_t>();
  printer.shape = shown.shape();
  printer.strides = contiguous_strides(printer.shape);
  printer.dtype = dtype();
  printer.choose_format();
  std::ostringstream out;
  const std::string prefix = "tensor(";
  if (numel() == 0) {
    out << prefix << "[]";
  } else {
    out << prefix;
    printer.print(out, 0, 0, prefix.size());
  }
  out << ", shape=" << shape_str(shape()) << ", dtype=" << dtype() << ", device=" << device() << ')';
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.str(); }

}  // namespace frugal
