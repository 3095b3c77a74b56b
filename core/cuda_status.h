// Whether CUDA can be used in this process, and why not. "No usable CUDA device" (any error from the
// device query: no driver, driver too old, no GPU) means CUDA is unavailable and everything runs on
// the CPU; the reason is kept so `frugal info` and the samples can say it in plain words.
// Works in every build: with FRUGAL_CUDA=OFF the answer is "not compiled in".
#pragma once

#include <cstddef>
#include <string>

#include "core/device.h"

namespace frugal {

// Whether this build links NVIDIA's libraries (cuBLAS, cuDNN, NCCL). A GPU build does; the emulated
// CUDA build (FRUGAL_CUDA=emulated) cannot run them on a CPU, so its library-backed paths default to
// frugal's hand-written kernels and asking for a library by name is a DeviceError.
inline constexpr bool kCudaLibraries = FRUGAL_CUDA_LIBRARIES;

struct CudaStatus {
  bool compiled = false;    // this build contains the CUDA backend
  bool emulated = false;    // ... against the emulated CUDA runtime: cuda:N runs on the CPU (docs/cuda-emulator.md)
  bool usable = false;      // at least one device answered
  int device_count = 0;
  int runtime_version = 0;  // e.g. 13000 for CUDA 13.0 (0 when not compiled)
  int driver_version = 0;   // highest CUDA version the driver supports, 0 when there is no driver
  std::string reason;       // why not usable, e.g. "no CUDA driver: running on CPU"
};

// Queried once per process, then cached.
const CudaStatus& cuda_status();
inline bool cuda_available() { return cuda_status().usable; }

struct CudaDeviceInfo {
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::size_t total_bytes = 0, free_bytes = 0;
  // Theoretical DRAM bandwidth from the memory clock and bus width the driver reports (two
  // transfers per clock); what bandwidth-bound kernels are measured against.
  double peak_bandwidth_bytes_per_s = 0.0;
};
CudaDeviceInfo cuda_device_info(int index);  // DeviceError if CUDA is not usable

// Whether a command can compute on `device`: nothing for the CPU; for cuda:N a DeviceError saying
// why it cannot be used (CUDA not usable, and why; or no device N, and how many there are); for the
// meta device a ValueError, since it holds no data to compute with.
void check_device_usable(Device device);

// A library's version as "major.minor.patch": what the shared library reports at run time
// ("loaded") and what its headers said at compile time ("built"); empty when not compiled in. core
// only names the shape: each library is reported by the layer that links it (kernels/: cuBLAS and
// cuDNN, kernels/library_versions.h; dist/: NCCL, dist/library_versions.h).
struct LibraryVersion {
  std::string loaded, built;
};
std::string version_string(int major, int minor, int patch);  // (9, 1, 0) -> "9.1.0"

// Waits for all work queued on the device (no-op without CUDA).
void cuda_synchronize(int index);

std::string cuda_version_string(int version);  // 13000 -> "13.0"

}  // namespace frugal
