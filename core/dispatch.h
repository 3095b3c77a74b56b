// What every op's device switch says when a CUDA tensor reaches a build without CUDA. The switch
// itself stays in each op's .cpp, readable at the call site:
//   case DeviceType::CUDA:
//   #if FRUGAL_WITH_CUDA
//     return cuda::op(...);
//   #else
//     throw_no_cuda("op");
//   #endif
// core's own dispatch sites (copy.cpp, stream.cpp) and every op in kernels/ use it.
// Not here: any dispatch table; a plain switch per op reads better than a registry.
#pragma once

namespace frugal {

// DeviceError naming `op`. Defined in every build, so callers need no guard around the declaration.
[[noreturn]] void throw_no_cuda(const char* op);

}  // namespace frugal
