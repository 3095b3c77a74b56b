// StridedLayout: a tensor's sizes and strides packed into a fixed-size struct that can be passed by
// value to a CUDA kernel, and the index math that turns a linear element number into a memory
// offset. Shared by CPU loops and CUDA kernels, so the CPU tests check the GPU's index math.
// Not here: Tensor itself (core/tensor.h), which builds these from its shape.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace frugal {

// The most dims a kernel sees. Kernel arguments are fixed-size, and 8 covers every layout frugal
// uses (NCHW plus batch and group splits) with room to spare.
inline constexpr int kMaxDims = 8;

struct StridedLayout {
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};  // in elements, not bytes
};

// Offset (in elements, from the tensor's first element) of the element whose row-major position
// among all elements is `linear`. Peels off the last dim first, as row-major order does.
FRUGAL_HOST_DEVICE inline std::int64_t strided_offset(const StridedLayout& layout, std::int64_t linear) {
  std::int64_t offset = 0;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    const std::int64_t size = layout.sizes[d];
    offset += (linear % size) * layout.strides[d];
    linear /= size;
  }
  return offset;
}

// True when the layout is plain row-major: element i sits at offset i. Size-1 dims never matter.
FRUGAL_HOST_DEVICE inline bool is_row_major(const StridedLayout& layout) {
  std::int64_t expected = 1;
  for (int d = layout.ndim - 1; d >= 0; --d) {
    if (layout.sizes[d] == 1) continue;
    if (layout.strides[d] != expected) return false;
    expected *= layout.sizes[d];
  }
  return true;
}

FRUGAL_HOST_DEVICE inline std::int64_t layout_numel(const StridedLayout& layout) {
  std::int64_t n = 1;
  for (int d = 0; d < layout.ndim; ++d) n *= layout.sizes[d];
  return n;
}

}  // namespace frugal
