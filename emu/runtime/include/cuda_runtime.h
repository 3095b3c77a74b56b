// The emulated CUDA runtime's public header: what `#include <cuda_runtime.h>` finds in the build
// with FRUGAL_CUDA=emulated (and only there: its folder is on the include path of that build alone).
// It declares the runtime calls frugal makes, with CUDA's names, types and error codes, so that
// core/cuda/, kernels/cuda/ and data/'s and dist/'s CUDA code compile unchanged against it; the
// calls behave as the CUDA runtime documents them, on the CPU (emu/runtime/runtime.cpp, and
// docs/cuda-emulator.md's table).
//
// Deliberately not here: the rest of the CUDA runtime (graphs, textures, managed memory, peer
// access, ...): a call frugal does not make is not emulated, so using one is a compile error, not
// a silent no-op. Numeric values of the enumerators are CUDA's, so messages read the same.
#pragma once

#include <cstddef>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,  // the direction from the pointers (unified addressing)
};

enum cudaDeviceAttr {
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
};

enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};

inline constexpr unsigned int cudaStreamDefault = 0x0;
inline constexpr unsigned int cudaStreamNonBlocking = 0x1;  // does not wait for the legacy default stream
inline constexpr unsigned int cudaEventDefault = 0x0;
inline constexpr unsigned int cudaEventDisableTiming = 0x2;
inline constexpr unsigned int cudaHostAllocDefault = 0x0;
inline constexpr unsigned long long cudaEnableDefault = 0x0;

struct CUstream_st;  // defined by the emulated runtime
struct CUevent_st;
using cudaStream_t = CUstream_st*;  // nullptr: the device's legacy default stream
using cudaEvent_t = CUevent_st*;
using cudaHostFn_t = void (*)(void* user_data);

// The fields frugal reads; the real struct has many more.
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

// ---- errors
cudaError_t cudaGetLastError();   // the last error of this host thread, then reset
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
// The text for `error`; when it is this thread's last error, the emulator's detailed account of it
// (which call, which pointer or handle, what was wrong).
const char* cudaGetErrorString(cudaError_t error);

// ---- versions and devices
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int cuda_version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status);

// ---- memory
cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaHostAlloc(void** pointer, std::size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes);

// ---- streams and events
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* user_data);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
