// kernels/workspace.h: scratch memory tagged `workspace`.
#include "kernels/workspace.h"

namespace frugal {

DataPtr allocate_workspace(Device device, std::size_t bytes) {
  MemoryTagScope scope(MemoryTag::workspace);
  return allocator_for(device).allocate(bytes);
}

Tensor empty_workspace(const Shape& shape, const TensorOptions& options) {
  MemoryTagScope scope(MemoryTag::workspace);
  return empty(shape, options);
}

}  // namespace frugal
