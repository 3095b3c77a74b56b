// The CUDA runtime side of the backend: device query, device selection, streams and byte copies
// (see core/cuda/runtime.h). The allocator's CUDA backings are in cuda_backing.cpp.
#include "core/cuda/runtime.h"

#include "core/cuda/check.h"

namespace frugal::cuda {

namespace {
std::string unusable_reason(cudaError_t error, int driver_version, int runtime_version) {
  const std::string suffix = ": running on CPU";
  if (driver_version == 0) return "no CUDA driver" + suffix;
  if (error == cudaErrorInsufficientDriver)
    return "CUDA driver supports CUDA " + cuda_version_string(driver_version) + " but this build needs " +
           cuda_version_string(runtime_version) + suffix;
  if (error == cudaErrorNoDevice) return "no CUDA device found" + suffix;
  return std::string("CUDA device query failed (") + cudaGetErrorName(error) + ": " + cudaGetErrorString(error) + ")" +
         suffix;
}
}  // namespace

CudaStatus query_status() {
  CudaStatus status;
  status.compiled = true;
  status.emulated = FRUGAL_CUDA_EMULATED;
  // Neither call needs a device; the driver version is 0 when no driver is installed.
  cudaDriverGetVersion(&status.driver_version);
  cudaRuntimeGetVersion(&status.runtime_version);
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // the query's error must not surface in a later, unrelated check
    status.reason = unusable_reason(error, status.driver_version, status.runtime_version);
    return status;
  }
  if (count == 0) {
    status.reason = unusable_reason(cudaErrorNoDevice, status.driver_version, status.runtime_version);
    return status;
  }
  status.usable = true;
  status.device_count = count;
  return status;
}

CudaDeviceInfo device_info(int index) {
  cudaDeviceProp properties{};
  FRUGAL_CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  CudaDeviceInfo info;
  info.name = properties.name;
  info.compute_major = properties.major;
  info.compute_minor = properties.minor;
  info.multiprocessors = properties.multiProcessorCount;
  int memory_clock_khz = 0, bus_width_bits = 0;
  FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, index));
  FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  constexpr double kTransfersPerClock = 2.0;  // double data rate
  info.peak_bandwidth_bytes_per_s = kTransfersPerClock * memory_clock_khz * 1e3 * bus_width_bits / 8.0;
  set_current_device(index);
  FRUGAL_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

void set_current_device(int index) { FRUGAL_CUDA_CHECK(cudaSetDevice(index)); }

void synchronize(int index) {
  set_current_device(index);
  FRUGAL_CUDA_CHECK(cudaDeviceSynchronize());
}

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  FRUGAL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

Stream create_side_stream(int index) {
  set_current_device(index);  // a stream belongs to the device current when it is created
  cudaStream_t stream = nullptr;
  FRUGAL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream{stream};
}

void synchronize_stream(int index, Stream stream) {
  set_current_device(index);
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
}

void copy_bytes_async(void* dst, const void* src, std::size_t bytes, Stream stream) {
  FRUGAL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream.handle)));
}

void* record_event(int index, Stream stream) {
  set_current_device(index);  // an event belongs to the device current when it is created
  cudaEvent_t event = nullptr;
  FRUGAL_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));  // timing costs, and is unused
  FRUGAL_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream.handle)));
  return event;
}

void synchronize_event(void* event) { FRUGAL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

void destroy_event(void* event) {
  const cudaError_t status = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorCudartUnloading) return;  // at exit, the event goes with the process
  FRUGAL_CUDA_CHECK(status);
}

// The wait is queued on `waiter` when this returns; the event can go at once (CUDA releases it when
// the wait no longer needs it).
void stream_wait(int index, Stream waiter, Stream producer) {
  void* event = record_event(index, producer);
  FRUGAL_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter.handle), static_cast<cudaEvent_t>(event), 0));
  destroy_event(event);
}

}  // namespace frugal::cuda
