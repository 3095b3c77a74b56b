// cuda_status and friends (see cuda_status.h): forwards to core/cuda/ when CUDA is compiled in,
// otherwise answers "not compiled in"; and the dispatch errors of core/dispatch.h.
#include "core/cuda_status.h"

#include "core/dispatch.h"
#include "core/error.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal {

void throw_no_cuda(const char* op) {
  FRUGAL_THROW(DeviceError, op, ": CUDA tensors need a build with CUDA (this one has FRUGAL_CUDA=OFF)");
}

void throw_library_unavailable(const char* library, const char* op, const char* instead) {
  FRUGAL_THROW(DeviceError, op, ": ", library, " is not in the emulated CUDA build (FRUGAL_CUDA=emulated runs on the CPU, "
               "where NVIDIA's libraries cannot run): ", instead);
}

void throw_meta_has_no_data(const char* op) {
  FRUGAL_THROW(DeviceError, op, ": a meta tensor has a shape but no data to read (the meta device only plans memory)");
}

const CudaStatus& cuda_status() {
#if FRUGAL_WITH_CUDA
  static const CudaStatus status = cuda::query_status();
#else
  static const CudaStatus status{.reason = "CUDA not compiled in (FRUGAL_CUDA=OFF): running on CPU"};
#endif
  return status;
}

void check_device_usable(Device device) {
  FRUGAL_CHECK_VALUE(!device.is_meta(), "the meta device has shapes but no data: nothing can run on it (frugal plan uses it to predict memory)");
  if (!device.is_cuda()) return;
  const int index = device.index();
  FRUGAL_CHECK_DEVICE(cuda_available(), "cuda:", index, " is not usable: ", cuda_status().reason);
  FRUGAL_CHECK_DEVICE(index >= 0 && index < cuda_status().device_count, "cuda:", index, " does not exist: ",
                      cuda_status().device_count, " device(s) visible");
}

CudaDeviceInfo cuda_device_info(int index) {
  check_device_usable(Device::cuda(index));
#if FRUGAL_WITH_CUDA
  return cuda::device_info(index);
#else
  return {};
#endif
}

std::string version_string(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

void cuda_synchronize([[maybe_unused]] int index) {
#if FRUGAL_WITH_CUDA
  if (cuda_available()) cuda::synchronize(index);
#endif
}

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace frugal
