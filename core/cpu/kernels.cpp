// CPU implementations of core's data-moving kernels (declared in core/copy.h): readable loops,
// parallelised with OpenMP over independent chunks of elements.
#include <omp.h>

#include <cstring>

#include "core/convert.h"
#include "core/copy.h"
#include "core/cpu/strided_cursor.h"

namespace frugal::cpu {

namespace {

template <typename To, typename From>
void copy_loop(To* dst, const StridedLayout& dst_layout, const From* src, const StridedLayout& src_layout) {
  const std::int64_t n = layout_numel(dst_layout);
  if (is_row_major(dst_layout) && is_row_major(src_layout)) {
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(To));
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t chunk = 0; chunk < n; chunk += kChunk) {
    StridedCursor out(dst_layout, chunk), in(src_layout, chunk);
    const std::int64_t end = std::min(n, chunk + kChunk);
    for (std::int64_t i = chunk; i < end; ++i, out.advance(), in.advance())
      dst[out.offset()] = convert<To>(src[in.offset()]);
  }
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

void fill_strided(void* dst, DType dtype, const StridedLayout& layout, double value) {
  visit_dtype(dtype, [&]<typename T>() {
    const T v = convert<T>(value);
    T* out = static_cast<T*>(dst);
    const std::int64_t n = layout_numel(layout);
#pragma omp parallel for schedule(static)
    for (std::int64_t chunk = 0; chunk < n; chunk += kChunk) {
      StridedCursor cursor(layout, chunk);
      const std::int64_t end = std::min(n, chunk + kChunk);
      for (std::int64_t i = chunk; i < end; ++i, cursor.advance()) out[cursor.offset()] = v;
    }
  });
}

void random_fill(void* dst, DType dtype, std::int64_t numel, const RandomSpec& spec) {
  visit_dtype(dtype, [&]<typename T>() {
    T* out = static_cast<T*>(dst);
    const std::int64_t blocks = (numel + 3) / 4;  // each Philox call yields four 32-bit words
#pragma omp parallel for schedule(static)
    for (std::int64_t block = 0; block < blocks; ++block) random_fill_block(out, numel, spec, block);
  });
}

}  // namespace frugal::cpu
