// CPU implementations of core's data-moving kernels (declared in core/copy.h): readable loops,
// parallel over independent chunks of elements when they are big enough (core/cpu/parallel.h).
#include <cstring>

#include "core/convert.h"
#include "core/copy.h"
#include "core/cpu/parallel.h"
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
      parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) dst[i] = convert<To>(src[i]);
      });
    }
    return;
  }
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

void fill_strided(void* dst, DType dtype, const StridedLayout& layout, double value) {
  visit_dtype(dtype, [&]<typename T>() {
    const T v = convert<T>(value);
    T* out = static_cast<T*>(dst);
    const std::int64_t n = layout_numel(layout);
    parallel_for_chunks(n, kChunk, n, [&](std::int64_t begin, std::int64_t end) {
      StridedCursor cursor(layout, begin);
      for (std::int64_t i = begin; i < end; ++i, cursor.advance()) out[cursor.offset()] = v;
    });
  });
}

void random_fill(void* dst, DType dtype, std::int64_t numel, const RandomSpec& spec) {
  visit_dtype(dtype, [&]<typename T>() {
    T* out = static_cast<T*>(dst);
    const std::int64_t blocks = (numel + 3) / 4;  // each Philox call yields four 32-bit words
    parallel_for(blocks, numel, [&](std::int64_t block) { random_fill_block(out, numel, spec, block); });
  });
}

}  // namespace frugal::cpu
