// The CUDA emulation header: what a kernel source sees when the host compiler builds it for the
// emulator instead of nvcc building it for a GPU (core/cuda/kernel_support.h chooses). It provides
// the names kernels use, with CUDA's meaning, on top of the fiber scheduler in emulator.h: dim3,
// threadIdx/blockIdx/blockDim/gridDim, __global__/__device__/__host__/__forceinline__, checked shared
// memory (shared_memory.h), __syncthreads, warp primitives, atomics, the math intrinsics frugal's
// kernels call, and the few runtime calls their launchers make. See docs/cuda-emulator.md.
//
// Deliberately not here: cuBLAS, cuDNN, NCCL (those paths need a GPU), real streams and events (a
// launch runs to completion before it returns), speed (it checks logic, not performance), and
// half-precision arithmetic operators (__half + __half computes in float here).
//
// Every name lives in frugal::emu and is brought to the global namespace with using-declarations,
// so an emulated kernel library links into the same binary as the real CUDA runtime without a clash.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>
#include <utility>

#include "core/half.h"
#include "emu/emulator.h"
#include "emu/shared_memory.h"

namespace frugal::emu {

// ---- the runtime calls launchers make (the FRUGAL_CUDA=emulated build has the emulated runtime's)
#if !defined(FRUGAL_CUDA_SOURCE_EMULATED)
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
using cudaStream_t = EmulatedStream*;
// Emulated device memory is host memory, so every copy is a memcpy.
inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
// Errors inside emulated kernels throw at once, so nothing is ever pending here.
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t error) { return error == cudaSuccess ? "no error" : "invalid value"; }

#endif

// ---- half precision types kernels name
using __half = frugal::Half;
using __nv_bfloat16 = frugal::BFloat16;
inline __half __float2half(float value) { return __half(value); }
inline float __half2float(__half value) { return static_cast<float>(value); }
inline __nv_bfloat16 __float2bfloat16(float value) { return __nv_bfloat16(value); }
inline float __bfloat162float(__nv_bfloat16 value) { return static_cast<float>(value); }

// ---- math intrinsics: the fast GPU versions compute the same thing, more precisely, on the host
inline float fast_exp(float x) { return std::exp(x); }  // __expf and __logf, as macros below: glibc
inline float fast_log(float x) { return std::log(x); }  // declares functions of those names it does not export
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <typename T>
T __ldg(const T* address) { return *address; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, sizeof i); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, sizeof x); return x; }
inline __half __float2half_rn(float value) { return __half(value); }

// ---- atomics. Emulated threads run one at a time and switch only at barriers and warp
// primitives, so a read-modify-write is atomic by construction; these return the old value. The
// target is a T* in global memory or a SharedPtr<T>, whose access the hazard checker records as
// atomic (two atomics on one word do not race).
template <typename T>
T* atomic_target(T* address) { return address; }
template <typename T>
T* atomic_target(SharedPtr<T> address) { return address.checked(SharedAccess::atomic); }
template <typename Address>
using AtomicValue = std::remove_pointer_t<decltype(atomic_target(std::declval<Address>()))>;

template <typename Address, typename Update>
AtomicValue<Address> atomic_update(Address address, Update update) {
  AtomicValue<Address>* target = atomic_target(address);
  const AtomicValue<Address> old = *target;
  *target = update(old);
  return old;
}
template <typename Address>
AtomicValue<Address> atomicAdd(Address address, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto old) { return old + value; });
}
template <typename Address>
AtomicValue<Address> atomicSub(Address address, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto old) { return old - value; });
}
template <typename Address>
AtomicValue<Address> atomicMax(Address address, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto old) { return old < value ? value : old; });
}
template <typename Address>
AtomicValue<Address> atomicMin(Address address, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto old) { return value < old ? value : old; });
}
template <typename Address>
AtomicValue<Address> atomicExch(Address address, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto) { return value; });
}
template <typename Address>
AtomicValue<Address> atomicCAS(Address address, AtomicValue<Address> compare, AtomicValue<Address> value) {
  return atomic_update(address, [&](auto old) { return old == compare ? value : old; });
}

// ---- warp primitives (emulator.h does the exchange between lanes)
template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = kWarpSize) {
  return warp_shuffle(mask, value, WarpOp::shfl_idx, src_lane, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = kWarpSize) {
  return warp_shuffle(mask, value, WarpOp::shfl_down, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = kWarpSize) {
  return warp_shuffle(mask, value, WarpOp::shfl_up, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = kWarpSize) {
  return warp_shuffle(mask, value, WarpOp::shfl_xor, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return warp_vote(mask, WarpOp::ballot, predicate != 0); }
inline int __all_sync(unsigned mask, int predicate) { return static_cast<int>(warp_vote(mask, WarpOp::all, predicate != 0)); }
inline int __any_sync(unsigned mask, int predicate) { return static_cast<int>(warp_vote(mask, WarpOp::any, predicate != 0)); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { warp_sync(mask); }
// The call site tells barriers apart: threads of a block must all reach the same one.
inline void __syncthreads(const std::source_location& site = std::source_location::current()) { block_barrier(site); }

}  // namespace frugal::emu

using frugal::emu::__all_sync;
using frugal::emu::__any_sync;
using frugal::emu::__ballot_sync;
using frugal::emu::__bfloat162float;
using frugal::emu::__fdividef;
using frugal::emu::__float2bfloat16;
using frugal::emu::__float2half;
using frugal::emu::__float2half_rn;
using frugal::emu::__float_as_int;
using frugal::emu::__int_as_float;
using frugal::emu::__popc;
using frugal::emu::__popcll;
using frugal::emu::__half;
using frugal::emu::__half2float;
using frugal::emu::__ldg;
using frugal::emu::__nv_bfloat16;
using frugal::emu::__saturatef;
using frugal::emu::__shfl_down_sync;
using frugal::emu::__shfl_sync;
using frugal::emu::__shfl_up_sync;
using frugal::emu::__shfl_xor_sync;
using frugal::emu::__syncthreads;
using frugal::emu::__syncwarp;
using frugal::emu::atomicAdd;
using frugal::emu::atomicCAS;
using frugal::emu::atomicExch;
using frugal::emu::atomicMax;
using frugal::emu::atomicMin;
using frugal::emu::atomicSub;
using frugal::emu::dim3;
#if !defined(FRUGAL_CUDA_SOURCE_EMULATED)
using frugal::emu::cudaError_t;
using frugal::emu::cudaGetErrorString;
using frugal::emu::cudaGetLastError;
using frugal::emu::cudaMemcpy;
using frugal::emu::cudaMemcpyDefault;
using frugal::emu::cudaMemcpyDeviceToDevice;
using frugal::emu::cudaMemcpyDeviceToHost;
using frugal::emu::cudaMemcpyHostToDevice;
using frugal::emu::cudaMemcpyHostToHost;
using frugal::emu::cudaMemcpyKind;
using frugal::emu::cudaStream_t;
using frugal::emu::cudaSuccess;
#endif
using frugal::emu::rsqrt;
using frugal::emu::rsqrtf;

// Qualifiers: a kernel is a plain function; device functions are ordinary inline code.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static shared arrays are declared with FRUGAL_SHARED_ARRAY (core/cuda/kernel_support.h), whose
// accesses are checked; a plain __shared__ array would not be, so it does not compile here.
#define __shared__ _Pragma("GCC error \"declare shared arrays with FRUGAL_SHARED_ARRAY(type, name, count)\"")
#define __expf(x) ::frugal::emu::fast_exp(x)
#define __logf(x) ::frugal::emu::fast_log(x)
#define warpSize ::frugal::emu::kWarpSize

#define threadIdx (::frugal::emu::current_thread().thread_idx)
#define blockIdx (::frugal::emu::current_thread().block_idx)
#define blockDim (::frugal::emu::current_thread().block_dim)
#define gridDim (::frugal::emu::current_thread().grid_dim)
