// What every op's device switch says when a CUDA tensor reaches a build without CUDA. The switch
// itself stays in each op's .cpp, readable at the call site:
//   case DeviceType::CUDA:
//   #if FRUGAL_WITH_CUDA
//     return cuda::op(...);
//   #else
//     throw_no_cuda("op");
//   #endif
// core's own dispatch sites (copy.cpp, stream.cpp) and every op in kernels/ use it.
// A meta tensor (core/device.h) takes the `case DeviceType::Meta:` branch, which does no work.
// Not here: any dispatch table; a plain switch per op reads better than a registry.
#pragma once

namespace frugal {

// DeviceError naming `op`. Defined in every build, so callers need no guard around the declaration.
[[noreturn]] void throw_no_cuda(const char* op);

// DeviceError: `library` (cuBLAS, cuDNN, NCCL) is not in the emulated CUDA build (FRUGAL_CUDA=emulated
// runs on the CPU, where NVIDIA's libraries cannot); `instead` names what does the work there.
[[noreturn]] void throw_library_unavailable(const char* library, const char* op, const char* instead);

// A meta tensor has no bytes to read: ops on meta tensors allocate their outputs and return
// (`case DeviceType::Meta: break;`), but nothing can copy a meta tensor's values to another device.
[[noreturn]] void throw_meta_has_no_data(const char* op);

}  // namespace frugal
