// StridedCursor: walks a strided layout in row-major order with additions only, for the CPU loops
// of every elementwise kernel (core's copies, kernels/'s math). Host code only.
#pragma once

#include <cstdint>

#include "core/strided.h"

namespace frugal::cpu {

// Elements per OpenMP chunk: large enough that scheduling costs nothing next to the work, small
// enough that 2-64 threads all get work on tensors of a few hundred thousand elements.
inline constexpr std::int64_t kChunk = 1 << 14;

// Walks a layout in row-major order from a given element, keeping the memory offset up to date
// with additions only (one division per chunk instead of one per element and dim).
class StridedCursor {
 public:
  StridedCursor(const StridedLayout& layout, std::int64_t linear) : layout_(layout) {
    offset_ = 0;
    for (int d = layout.ndim - 1; d >= 0; --d) {
      index_[d] = linear % layout.sizes[d];
      offset_ += index_[d] * layout.strides[d];
      linear /= layout.sizes[d];
    }
  }
  std::int64_t offset() const { return offset_; }
  void advance() {
    for (int d = layout_.ndim - 1; d >= 0; --d) {
      offset_ += layout_.strides[d];
      if (++index_[d] < layout_.sizes[d]) return;
      offset_ -= layout_.sizes[d] * layout_.strides[d];  // wrap this dim, carry into the next
      index_[d] = 0;
    }
  }

 private:
  const StridedLayout& layout_;
  std::int64_t index_[kMaxDims] = {};
  std::int64_t offset_ = 0;
};

}  // namespace frugal::cpu
