// CPU implementations of core's data-moving kernels (declared in core/copy.h): readable loops,
// parallel over independent chunks of elements when they are big enough (core/cpu/parallel.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/convert.h"
#include "core/copy.h"
#include "core/cpu/bf16_rows.h"
#include "core/cpu/parallel.h"
#include "core/cpu/strided_cursor.h"

namespace frugal::cpu {

// Note [bf16 casts in vectors]: saved feature maps kept in bf16 (nn/saved_activations.h) are cast
// twice a step, and convert<> element by element (a NaN test per element, two-lane SSE2) took 13% of
// a CIFAR-stem training step. These are half_bits::from_float_bf16's and to_float_bf16's rounding
// (nearest even, NaN kept and made quiet) written as selects, in loops compiled for AVX-512 and AVX2
// too: the same bits, vectorised.
__attribute__((target_clones("avx512f", "avx2", "default")))
void f32_to_bf16(const float* __restrict in, BFloat16* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = half_bits::float_bits(in[i]);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    out[i] = BFloat16::from_bits(static_cast<std::uint16_t>(nan ? ((bits >> 16) | 0x40u) : rounded));
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void bf16_to_f32(const BFloat16* __restrict in, float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = half_bits::bits_float(static_cast<std::uint32_t>(in[i].bits) << 16);
}

namespace {

// `layout` without its dims of size 1, which index nothing: a permuted [C, N, 1] view is then
// the 2-D transpose it is.
StridedLayout without_unit_dims(const StridedLayout& layout) {
  StridedLayout out;
  for (int d = 0; d < layout.ndim; ++d)
    if (layout.sizes[d] != 1) {
      out.sizes[out.ndim] = layout.sizes[d];
      out.strides[out.ndim++] = layout.strides[d];
    }
  return out;
}

StridedLayout without_last_dim(StridedLayout layout) {
  --layout.ndim;
  return layout;
}

// Note [Copies by rows]: when the destination's last dim is contiguous, a strided copy is a loop
// over rows (found with a cursor over the other dims) whose inner loop has no index arithmetic:
// a memcpy when the source row is contiguous too and long, a plain loop when it is short, one
// strided read per element otherwise (a transpose). Element by element with a cursor over every dim
// costs several times more, which showed when 1x1 convolutions gathered small-plane samples into one
// matrix (kernels/conv.cpp). Rows shorter than this many elements are copied by an inline loop: a
// memcpy call per row of 4 floats (a 2x2 plane gathered by a 1x1 convolution) cost more than the copy.
constexpr std::int64_t kMemcpyRow = 64;

template <typename To, typename From>
void copy_rows(To* dst, const StridedLayout& dst_layout, const From* src, const StridedLayout& src_layout) {
  const std::int64_t inner = dst_layout.sizes[dst_layout.ndim - 1], step = src_layout.strides[src_layout.ndim - 1];
  const std::int64_t rows = layout_numel(dst_layout) / inner;
  const StridedLayout dst_rows = without_last_dim(dst_layout), src_rows = without_last_dim(src_layout);
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, kChunk / inner);
  parallel_for_chunks(rows, rows_per_chunk, rows * inner, [&](std::int64_t begin, std::int64_t end) {
    StridedCursor out(dst_rows, begin), in(src_rows, begin);
    for (std::int64_t r = begin; r < end; ++r, out.advance(), in.advance()) {
      To* to = dst + out.offset();
      const From* from = src + in.offset();
      if constexpr (std::is_same_v<To, From>) {
        if (step == 1 && inner >= kMemcpyRow) {
          std::memcpy(to, from, static_cast<std::size_t>(inner) * sizeof(To));
          continue;
        }
      }
      if (step == 1) {
        for (std::int64_t i = 0; i < inner; ++i) to[i] = convert<To>(from[i]);
        continue;
      }
      for (std::int64_t i = 0; i < inner; ++i) to[i] = convert<To>(from[i * step]);
    }
  });
}

// A contiguous cast: the vector loops above for f32 <-> bf16, convert<> otherwise.
template <typename To, typename From>
void cast_contiguous(To* dst, const From* src, std::int64_t n) {
  parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>)
      f32_to_bf16(src + begin, dst + begin, end - begin);
    else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, BFloat16>)
      bf16_to_f32(src + begin, dst + begin, end - begin);
    else
      for (std::int64_t i = begin; i < end; ++i) dst[i] = convert<To>(src[i]);
  });
}

template <typename To, typename From>
void copy_loop(To* dst, const StridedLayout& dst_layout, const From* src, const StridedLayout& src_layout) {
  const std::int64_t n = layout_numel(dst_layout);
  if (is_row_major(dst_layout) && is_row_major(src_layout)) {
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(To));
    } else {
      cast_contiguous(dst, src, n);
    }
    return;
  }
  const StridedLayout to = without_unit_dims(dst_layout), from = without_unit_dims(src_layout);
  if (n > 0 && to.ndim > 0 && to.strides[to.ndim - 1] == 1) return copy_rows(dst, to, src, from);
  parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
    StridedCursor out(dst_layout, begin), in(src_layout, begin);
    for (std::int64_t i = begin; i < end; ++i, out.advance(), in.advance())
      dst[out.offset()] = convert<To>(src[in.offset()]);
  });
}

}  // namespace

void copy_strided(void* dst, DType dst_dtype, const StridedLayout& dst_layout, const void* src, DType src_dtype,
                  const StridedLayout& src_layout) {
  visit_dtype(dst_dtype, [&]<typename To>() {
    visit_dtype(src_dtype, [&]<typename From>() {
      copy_loop(static_cast<To*>(dst), dst_layout, static_cast<const From*>(src), src_layout);
    });
  });
}

// A row-major destination is filled run by run: std::fill_n, or memset where the value's bytes are all
// zero (+0.0 in every dtype: zeros(), the commonest fill), in one run per thread, because glibc's
// memset streams a run of tens of MiB past the caches without reading the lines first (a 64 MiB
// zero fill in 64 KiB runs, 20 GB/s on one thread, against one memset's 55). Through the cursor, one
// element at a time as before, filling a [96] took 0.33 us, a [16384] 36 us and a [1048576] 633 us;
// as runs 0.04, 0.62 and 31 us (2026-12-07, the development machine, 2 threads, a scratch loop;
// `frugal bench tensor`'s fill cases measure the runs against std::fill_n).
void fill_strided(void* dst, DType dtype, const StridedLayout& layout, double value) {
  visit_dtype(dtype, [&]<typename T>() {
    const T v = convert<T>(value);
    T* out = static_cast<T*>(dst);
    const std::int64_t n = layout_numel(layout);
    if (is_row_major(layout)) {
      const bool zero_bytes = value == 0.0 && !std::signbit(value);
      const std::int64_t threads = omp_get_max_threads();
      const std::int64_t run = zero_bytes ? std::max(kChunk, (n + threads - 1) / threads) : kChunk;
      parallel_for_chunks(n, run, n, [&](std::int64_t begin, std::int64_t end) {
        const auto count = static_cast<std::size_t>(end - begin);
        if (zero_bytes) return static_cast<void>(std::memset(static_cast<void*>(out + begin), 0, count * sizeof(T)));
        std::fill_n(out + begin, count, v);
      });
      return;
    }
    parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
      StridedCursor cursor(layout, begin);
      for (std::int64_t i = begin; i < end; ++i, cursor.advance()) out[cursor.offset()] = v;
    });
  });
}

void random_fill(void* dst, DType dtype, std::int64_t numel, const RandomSpec& spec) {
  visit_dtype(dtype, [&]<typename T>() {
    T* out = static_cast<T*>(dst);
    const std::int64_t blocks = philox_blocks_for(numel);
    parallel_for(blocks, numel, [&](std::int64_t block) { random_fill_block(out, numel, spec, block); });
  });
}

}  // namespace frugal::cpu
