// The index math and per-element work of 2-D pooling, written once as FRUGAL_HOST_DEVICE functions
// that the CPU loops, the CUDA kernels and the CPU tests all call. PyTorch's rules throughout
// (aten/src/ATen/native/Pool.h and AdaptivePooling.h): output sizes, window bounds, which padding
// counts in an average, and which element a max picks.
// Glossary: N batch, C channels, H x W an input plane, OH x OW an output plane; a plane is one
// (n, c) pair, numbered p = n * C + c. Each spatial axis (h or w) is described by a PoolAxis.
// Not here: argument checks (kernels/pool.cpp), loops and launches (kernels/cpu/pool.cpp,
// kernels/cuda/pool.cu).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/convert.h"
#include "core/host_device.h"

namespace frugal {

enum class PoolKind : std::uint8_t { max, avg, adaptive_avg };

// One spatial axis. Adaptive pooling uses only `in` and `out`; only max pooling dilates.
struct PoolAxis {
  std::int64_t in = 1, out = 1;
  std::int64_t kernel = 1, stride = 1, padding = 0, dilation = 1;
};

struct PoolGeometry {
  std::int64_t planes = 0;             // N * C
  PoolAxis h, w;
  bool count_include_pad = true;       // avg: the divisor counts the padding inside the window
  std::int64_t divisor_override = 0;   // avg: when > 0, divide by this instead
};

// Where an input image batch's elements live: element (p, y, x) is at
// plane_offset(layout, p) + y * stride_h + x * stride_w. Any strides, so inputs need no copy.
struct ImageLayout {
  std::int64_t channels = 1;
  std::int64_t stride_n = 0, stride_c = 0, stride_h = 0, stride_w = 0;
};

FRUGAL_HOST_DEVICE inline std::int64_t plane_offset(const ImageLayout& layout, std::int64_t plane) {
  return plane / layout.channels * layout.stride_n + plane % layout.channels * layout.stride_c;
}

// Input positions [begin, end) along one axis.
struct Range {
  std::int64_t begin = 0, end = 0;
  FRUGAL_HOST_DEVICE std::int64_t size() const { return end > begin ? end - begin : 0; }
};

// ---- output sizes and windows

// a / b rounded down (C++ rounds toward zero, which is wrong for a negative a).
FRUGAL_HOST_DEVICE inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// Taps of one window, from its first tap to its last: dilation * (kernel - 1) + 1 positions.
FRUGAL_HOST_DEVICE inline std::int64_t window_extent(const PoolAxis& a) { return a.dilation * (a.kernel - 1) + 1; }

// Output size along one axis (PyTorch's pooling_output_shape): how many windows fit in the padded
// input, every `stride`. ceil_mode keeps a last, partial window, unless it would start in the right
// padding, where it would see no input at all. May be < 1; pool.cpp rejects that.
FRUGAL_HOST_DEVICE inline std::int64_t pool_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                                                        std::int64_t padding, std::int64_t dilation, bool ceil_mode) {
  const std::int64_t extent = dilation * (kernel - 1) + 1;
  std::int64_t out = floor_div(in + 2 * padding - extent + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

// Where output o's window starts; negative inside the left padding.
FRUGAL_HOST_DEVICE inline std::int64_t window_start(const PoolAxis& a, std::int64_t o) { return o * a.stride - a.padding; }

// Max pooling: the taps of output o's window that fall inside the input are begin, begin +
// dilation, ... < end. Taps in the padding are skipped: padding acts as -inf, which never wins.
FRUGAL_HOST_DEVICE inline Range max_window(const PoolAxis& a, std::int64_t o) {
  std::int64_t begin = window_start(a, o);
  const std::int64_t end = std::min(begin + window_extent(a), a.in);
  if (begin < 0) begin += (-begin + a.dilation - 1) / a.dilation * a.dilation;  // the first tap at or after 0
  return {begin, end};
}

// Adaptive pooling: output o of `out` averages inputs [floor(o * in / out), ceil((o + 1) * in / out)),
// so the windows cover the input, overlap when the sizes do not divide, and are never empty.
FRUGAL_HOST_DEVICE inline Range adaptive_window(const PoolAxis& a, std::int64_t o) {
  return {o * a.in / a.out, ((o + 1) * a.in + a.out - 1) / a.out};
}

// The inputs that avg (clipped to the input) and adaptive_avg pooling sum for output o.
FRUGAL_HOST_DEVICE inline Range summed_range(PoolKind kind, const PoolAxis& a, std::int64_t o) {
  if (kind == PoolKind::adaptive_avg) return adaptive_window(a, o);
  const std::int64_t start = window_start(a, o);
  return {std::max<std::int64_t>(start, 0), std::min(start + a.kernel, a.in)};
}

// count_include_pad's count along one axis: the window clipped to the padded input rather than to
// the input, so the padding counts but a ceil_mode window's overhang past the padding does not.
FRUGAL_HOST_DEVICE inline std::int64_t padded_size(const PoolAxis& a, std::int64_t o) {
  const std::int64_t start = window_start(a, o);
  return std::min(start + a.kernel, a.in + a.padding) - start;
}

// What avg and adaptive_avg pooling divide output (oh, ow)'s sum by. Never 0: pool.cpp's checks
// (padding <= kernel / 2, ceil_mode windows start before the right padding) leave every avg window
// at least one input element.
FRUGAL_HOST_DEVICE inline std::int64_t pool_divisor(PoolKind kind, const PoolGeometry& g, std::int64_t oh, std::int64_t ow) {
  if (kind == PoolKind::avg) {
    if (g.divisor_override > 0) return g.divisor_override;
    if (g.count_include_pad) return padded_size(g.h, oh) * padded_size(g.w, ow);
  }
  return summed_range(kind, g.h, oh).size() * summed_range(kind, g.w, ow).size();
}

// ---- which outputs see an input (for the backward as a gather: one CUDA thread per input element)

// The outputs whose windows span input i: window_start(o) <= i < window_start(o) + extent, that is
// (i + padding - extent) / stride < o <= (i + padding) / stride, clamped to [0, out). For max pooling
// with dilation some of them step over i; the recorded index tells those apart.
FRUGAL_HOST_DEVICE inline Range outputs_covering(const PoolAxis& a, std::int64_t i) {
  const std::int64_t shifted = i + a.padding, extent = window_extent(a);  // shifted >= 0
  const std::int64_t first = shifted < extent ? 0 : (shifted - extent) / a.stride + 1;
  return {first, std::min(shifted / a.stride + 1, a.out)};
}

// The adaptive windows holding input i are exactly outputs [floor(i * out / in), ceil((i + 1) * out / in)):
// floor(o * in / out) <= i  <=>  o < (i + 1) * out / in, and ceil((o + 1) * in / out) > i  <=>
// o > i * out / in - 1  <=>  o >= floor(i * out / in).
FRUGAL_HOST_DEVICE inline Range adaptive_outputs_covering(const PoolAxis& a, std::int64_t i) {
  return {i * a.out / a.in, ((i + 1) * a.out + a.in - 1) / a.in};
}

// ---- per output element (the forward)

// An output value in the compute type C, and for max pooling the flat position y * W + x of the
// element it came from inside its input plane (PyTorch's indices); -1 for the average kinds.
template <typename C>
struct PoolValue {
  C value;
  std::int64_t index;
};

// PyTorch's order: strictly larger wins (so ties keep the first tap) and any NaN wins (so a NaN
// anywhere in the window gives NaN, and its index is the last NaN's). An all -inf window reports its
// first tap; a window with no tap inside the input (possible only with large dilation) gives -inf
// and index -1, which the backward ignores.
template <typename T, typename C>
FRUGAL_HOST_DEVICE PoolValue<C> max_pool_element(const T* plane, const ImageLayout& layout, const PoolGeometry& g,
                                                 std::int64_t oh, std::int64_t ow) {
  const Range rows = max_window(g.h, oh), cols = max_window(g.w, ow);
  PoolValue<C> best{-std::numeric_limits<C>::infinity(), -1};
  if (rows.size() > 0 && cols.size() > 0) best.index = rows.begin * g.w.in + cols.begin;
  for (std::int64_t y = rows.begin; y < rows.end; y += g.h.dilation)
    for (std::int64_t x = cols.begin; x < cols.end; x += g.w.dilation) {
      const C v = convert<C>(plane[y * layout.stride_h + x * layout.stride_w]);
      if (v > best.value || v != v) best = {v, y * g.w.in + x};
    }
  return best;
}

// Output (oh, ow) of plane `plane` (already offset to the plane's element [0, 0]).
template <typename T, typename C>
FRUGAL_HOST_DEVICE PoolValue<C> pool_element(PoolKind kind, const T* plane, const ImageLayout& layout, const PoolGeometry& g,
                                             std::int64_t oh, std::int64_t ow) {
  if (kind == PoolKind::max) return max_pool_element<T, C>(plane, layout, g, oh, ow);
  const Range rows = summed_range(kind, g.h, oh), cols = summed_range(kind, g.w, ow);
  C sum = 0;
  for (std::int64_t y = rows.begin; y < rows.end; ++y)
    for (std::int64_t x = cols.begin; x < cols.end; ++x) sum += convert<C>(plane[y * layout.stride_h + x * layout.stride_w]);
  return {sum / static_cast<C>(pool_divisor(kind, g, oh, ow)), -1};
}

// ---- per input element (the backward as a gather)

// The gradient of input (y, x) of one plane: the sum, over the outputs whose windows hold it, of
// each one's share of its gradient: all of it for the max pool output that picked (y, x), 1/divisor
// for the averages. `grad_plane` and `index_plane` are the plane's contiguous OH x OW gradients and
// indices (indices for max pooling only). Outputs are visited in row-major order, the order in which
// the CPU's scatter adds them, so both give the same bits.
template <typename T, typename C>
FRUGAL_HOST_DEVICE C pool_input_gradient(PoolKind kind, const T* grad_plane, const std::int64_t* index_plane,
                                         const PoolGeometry& g, std::int64_t y, std::int64_t x) {
  const bool adaptive = kind == PoolKind::adaptive_avg;
  const Range rows = adaptive ? adaptive_outputs_covering(g.h, y) : outputs_covering(g.h, y);
  const Range cols = adaptive ? adaptive_outputs_covering(g.w, x) : outputs_covering(g.w, x);
  C sum = 0;
  for (std::int64_t oh = rows.begin; oh < rows.end; ++oh)
    for (std::int64_t ow = cols.begin; ow < cols.end; ++ow) {
      const std::int64_t o = oh * g.w.out + ow;
      if (kind == PoolKind::max) {
        if (index_plane[o] == y * g.w.in + x) sum += convert<C>(grad_plane[o]);
      } else {
        sum += convert<C>(grad_plane[o]) / static_cast<C>(pool_divisor(kind, g, oh, ow));
      }
    }
  return sum;
}

}  // namespace frugal
