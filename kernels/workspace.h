// Scratch memory for a kernel (the CPU convolution's im2col buffer, cuDNN's workspaces), taken from
// frugal's allocator for the device under the tag `workspace`, so memory reports show what the
// kernels borrowed and the caching allocator reuses it across calls. Freed when the DataPtr goes.
// Not here: any cap on workspace size; the ops that can trade memory for speed take their own
// limit (kernels/conv.h) and ask for no more than it.
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "core/tensor.h"

namespace frugal {

DataPtr allocate_workspace(Device device, std::size_t bytes);
Tensor empty_workspace(const Shape& shape, const TensorOptions& options);  // an uninitialised tensor, tagged

}  // namespace frugal
