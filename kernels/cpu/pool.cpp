// CPU pooling (kernels/pool_backends.h), in parallel over the (n, c) planes. The forward computes
// each output with the per-element functions of kernels/pool_ops.h, as the CUDA kernel does. The
// backward is the plain reference the CUDA gather is checked against: each output scatters its
// gradient into its window (max pooling: into the element it picked), adding in row-major output
// order into a plane of the compute type, rounded once at the end. Averages of whole dense planes
// (a network's head), forward and backward, take direct loops with the same bits (Note [Global
// average pooling]).
#include <vector>

#include "core/cpu/parallel.h"
#include "kernels/pool_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {
// Note [Global average pooling]
// A network's head averages each whole plane to one value (adaptive_avg_pool2d to 1x1; MobileNetV2's
// 64 x 1280 planes of 1x1 to 4x4). pool_element finds the window, its divisor and the plane's
// offset with divisions per output, about 18 ns each, which for one-pixel planes is the whole cost
// (1.5 ms of a 31 ms eval forward). A plane stored densely is summed straight through here instead:
// the same terms in the same row-major order in C, divided by the same count, so the same bits.
// An average whose one window is the whole plane, divided by the plane's size.
bool whole_plane_average(PoolKind kind, const PoolGeometry& g) {
  const bool whole_window = kind == PoolKind::adaptive_avg
                                ? true
                                : g.h.kernel == g.h.in && g.w.kernel == g.w.in && g.h.padding == 0 && g.w.padding == 0 &&
                                      g.divisor_override == 0;
  return kind != PoolKind::max && whole_window && g.h.out == 1 && g.w.out == 1;
}

bool global_average(PoolKind kind, const ImageLayout& layout, const PoolGeometry& g) {
  const std::int64_t plane = g.h.in * g.w.in;
  return whole_plane_average(kind, g) && layout.stride_w == 1 && layout.stride_h == g.w.in && layout.stride_c == plane &&
         layout.stride_n == layout.channels * plane;
}

constexpr std::int64_t kPlanesPerChunk = 256;  // one-pixel planes: enough per call to amortise it

template <typename T, typename C>
void global_average_planes(const T* in, const PoolGeometry& g, T* result) {
  const std::int64_t plane = g.h.in * g.w.in;
  parallel_for_chunks(g.planes, kPlanesPerChunk, g.planes * plane, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      C sum = 0;
      for (std::int64_t i = 0; i < plane; ++i) sum += convert<C>(in[p * plane + i]);
      result[p] = convert<T>(sum / static_cast<C>(plane));
    }
  });
}

// Its backward: every element of plane p gets grad[p] / plane, as the general loop below gives it
// (its buffer's 0 plus that share, rounded once), without that loop's buffer: a heap allocation per
// plane, which for MobileNetV2's 64 x 1280 one-pixel planes took 1.4% of a standard-stem training
// step on one thread (perf).
template <typename T, typename C>
void global_average_backward(const T* grad, const PoolGeometry& g, T* result) {
  const std::int64_t plane = g.h.in * g.w.in;
  parallel_for_chunks(g.planes, kPlanesPerChunk, g.planes * plane, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const T value = convert<T>(C(0) + convert<C>(grad[p]) / static_cast<C>(plane));
      for (std::int64_t i = 0; i < plane; ++i) result[p * plane + i] = value;
    }
  });
}
}  // namespace

void pool2d(PoolKind kind, DType dtype, const void* x, const ImageLayout& x_layout, const PoolGeometry& geometry, void* out,
            std::int64_t* indices) {
  visit_floating(dtype, "pooling", [&]<typename T, typename C>() {
    if (global_average(kind, x_layout, geometry))
      return global_average_planes<T, C>(static_cast<const T*>(x), geometry, static_cast<T*>(out));
    const T* in = static_cast<const T*>(x);
    T* result = static_cast<T*>(out);
    const std::int64_t plane_size = geometry.h.out * geometry.w.out;
    parallel_for(geometry.planes, geometry.planes * geometry.h.out * geometry.w.out * geometry.h.kernel * geometry.w.kernel, [&](std::int64_t p) {
      const T* plane = in + plane_offset(x_layout, p);
      for (std::int64_t oh = 0; oh < geometry.h.out; ++oh)
        for (std::int64_t ow = 0; ow < geometry.w.out; ++ow) {
          const std::int64_t o = p * plane_size + oh * geometry.w.out + ow;
          const PoolValue<C> v = pool_element<T, C>(kind, plane, x_layout, geometry, oh, ow);
          result[o] = convert<T>(v.value);
          if (indices) indices[o] = v.index;
        }
    });
  });
}

void pool2d_backward(PoolKind kind, DType dtype, const void* grad_output, const std::int64_t* indices,
                     const PoolGeometry& geometry, void* grad_input) {
  visit_floating(dtype, "pooling", [&]<typename T, typename C>() {
    const T* grad = static_cast<const T*>(grad_output);
    T* result = static_cast<T*>(grad_input);
    if (whole_plane_average(kind, geometry)) return global_average_backward<T, C>(grad, geometry, result);
    const std::int64_t in_size = geometry.h.in * geometry.w.in, out_size = geometry.h.out * geometry.w.out;
    parallel_for(geometry.planes, geometry.planes * (geometry.h.in * geometry.w.in + geometry.h.out * geometry.w.out), [&](std::int64_t p) {
      std::vector<C> sum(static_cast<std::size_t>(in_size), C(0));
      for (std::int64_t oh = 0; oh < geometry.h.out; ++oh)
        for (std::int64_t ow = 0; ow < geometry.w.out; ++ow) {
          const std::int64_t o = p * out_size + oh * geometry.w.out + ow;
          const C g = convert<C>(grad[o]);
          if (kind == PoolKind::max) {
            // -1 marks a window that saw no input; any other index outside the plane did not come
            // from max_pool2d, and is skipped rather than written out of bounds.
            if (indices[o] >= 0 && indices[o] < in_size) sum[indices[o]] += g;
            continue;
          }
          const C share = g / static_cast<C>(pool_divisor(kind, geometry, oh, ow));
          const Range rows = summed_range(kind, geometry.h, oh), cols = summed_range(kind, geometry.w, ow);
          for (std::int64_t y = rows.begin; y < rows.end; ++y)
            for (std::int64_t x = cols.begin; x < cols.end; ++x) sum[y * geometry.w.in + x] += share;
        }
      for (std::int64_t i = 0; i < in_size; ++i) result[p * in_size + i] = convert<T>(sum[i]);
    });
  });
}

}  // namespace frugal::cpu
