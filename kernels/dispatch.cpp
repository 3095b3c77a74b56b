// kernels/dispatch.h: the one wording of "this build has no CUDA".
#include "kernels/dispatch.h"

#include "core/error.h"

namespace frugal {

void throw_no_cuda(const char* op) {
  FRUGAL_THROW(DeviceError, op, ": CUDA tensors need a build with CUDA (this one has FRUGAL_CUDA=OFF)");
}

}  // namespace frugal
