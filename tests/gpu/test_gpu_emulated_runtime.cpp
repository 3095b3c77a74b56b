// GPU suite, emulated CUDA build only: what the emulated runtime checks that a GPU would punish
// (emu/runtime/, docs/cuda-emulator.md). Each case makes the mistake on purpose and checks that it
// fails loudly here, instead of passing by luck as it might on a CPU, or silently as it might on a
// GPU: a host read of device memory, a result read before its stream was waited for, a copy of the
// wrong kind, memory freed under queued work, an event recorded on another device's stream, a
// destroyed stream used again, a kernel given host memory, a kernel running past its block.
// The test kernels are built as frugal's own CUDA sources are in this build (FRUGAL_CUDA_SOURCE_EMULATED).
#define FRUGAL_CUDA_SOURCE_EMULATED 1
#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/kernel_support.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "emu/runtime/emulated_runtime.h"
#include "kernels/elementwise.h"
#include "tests/skip.h"

namespace {

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

__global__ void write_at(float* x, int index) {
  if (threadIdx.x == 0) x[index] = 1.0f;
}

void launch_add_one(float* x, int n, cudaStream_t stream) {
  FRUGAL_LAUNCH((n + 63) / 64, 64, 0, stream, add_one)(x, n);
}

std::string last_account(cudaError_t error) { return cudaGetErrorString(error); }

// Runs `body` in a child process with stderr captured: how the child ended and what it said.
struct ChildEnd {
  bool crashed = false;  // killed by a signal, or exited non-zero (the sanitizer's report exits 1)
  std::string stderr_text;
};
ChildEnd run_in_child(const std::function<void()>& body) {
  int pipe_ends[2];
  REQUIRE(pipe(pipe_ends) == 0);
  std::fflush(nullptr);  // nothing buffered before the fork is written twice
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child ends at the fault: the default action, after the runtime's handler has spoken
    // (doctest's own handler would report the case and carry on in the child).
    signal(SIGSEGV, SIG_DFL);
    frugal::emu::runtime::install_fault_handler();
    if (!std::freopen("/dev/null", "w", stdout)) _exit(4);
    dup2(pipe_ends[1], STDERR_FILENO);
    close(pipe_ends[0]);
    body();
    _exit(0);
  }
  close(pipe_ends[1]);
  ChildEnd end;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_ends[0], buffer, sizeof buffer)) > 0;) end.stderr_text.append(buffer, static_cast<std::size_t>(n));
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  end.crashed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  return end;
}

}  // namespace

using namespace frugal;

TEST_CASE("emulated runtime: host code reading a cuda:0 tensor's bytes faults and says so") {
  const Tensor t = ones({16}, {.device = Device::cuda(0)});
  const ChildEnd end = run_in_child([&] {
    volatile float value = static_cast<const float*>(t.data_ptr())[3];  // what a CPU kernel given it would do
    static_cast<void>(value);
  });
  CHECK(end.crashed);
  CHECK(end.stderr_text.find("host code touched device memory of cuda:0") != std::string::npos);
  CHECK(t.to(Device::cpu()).to_vector<float>()[3] == 1.0f);  // through a copy it is fine
}

TEST_CASE("emulated runtime: queued work has not run until something waits, and what it will write reads as poison") {
  constexpr int n = 256;
  float* device = nullptr;
  float* pinned = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n * sizeof(float), cudaHostAllocDefault) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  for (int i = 0; i < n; ++i) pinned[i] = static_cast<float>(i);
  REQUIRE(cudaMemcpyAsync(device, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream) == cudaSuccess);
  launch_add_one(device, n, stream);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(pinned, device, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
  // The missing synchronize: the host reads the copy's destination too early.
  CHECK(std::isnan(pinned[7]));
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(pinned[7] == 8.0f);
  CHECK(cudaStreamQuery(stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaFree(device) == cudaSuccess);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
}

TEST_CASE("emulated runtime: a kernel on another stream reads poison unless an event orders it after the copy") {
  constexpr int n = 64;
  std::vector<float> host(n, 2.0f), back(n);
  for (bool with_event : {false, true}) {
    CAPTURE(with_event);
    float* device = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(float)) == cudaSuccess);
    cudaStream_t copy_stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, copy_stream) == cudaSuccess);
    cudaEvent_t copied = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventRecord(copied, copy_stream) == cudaSuccess);
    CHECK(cudaEventQuery(copied) == cudaErrorNotReady);
    if (with_event) REQUIRE(cudaStreamWaitEvent(nullptr, copied, 0) == cudaSuccess);
    launch_add_one(device, n, nullptr);  // the default stream does not wait for a non-blocking stream
    REQUIRE(cudaMemcpy(back.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    if (with_event)
      CHECK(back[0] == 3.0f);
    else
      CHECK(std::isnan(back[0]));  // it ran before the copy: the race shows as NaN, not as luck
    REQUIRE(cudaStreamSynchronize(copy_stream) == cudaSuccess);
    CHECK(cudaEventQuery(copied) == cudaSuccess);
    CHECK(cudaEventDestroy(copied) == cudaSuccess);
    CHECK(cudaStreamDestroy(copy_stream) == cudaSuccess);
    CHECK(cudaFree(device) == cudaSuccess);
  }
}

TEST_CASE("emulated runtime: stream 0 waits for blocking streams, not for non-blocking ones") {
  constexpr int n = 32;
  std::vector<float> host(n, 1.0f), back(n);
  float* device = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  cudaStream_t blocking_stream = nullptr;
  REQUIRE(cudaStreamCreate(&blocking_stream) == cudaSuccess);
  launch_add_one(device, n, blocking_stream);
  // A copy on stream 0 comes after the blocking stream's kernel, as CUDA's legacy stream orders it.
  REQUIRE(cudaMemcpy(back.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back[0] == 2.0f);
  CHECK(cudaStreamQuery(blocking_stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(blocking_stream) == cudaSuccess);
  CHECK(cudaFree(device) == cudaSuccess);
}

TEST_CASE("emulated runtime: a copy whose kind contradicts its pointers is an error naming the call") {
  float* device = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), 64) == cudaSuccess);
  std::vector<float> host(16, 1.0f);
  const cudaError_t error = cudaMemcpy(host.data(), device, 64, cudaMemcpyHostToDevice);  // really device to host
  CHECK(error == cudaErrorInvalidMemcpyDirection);
  const std::string account = last_account(error);
  CHECK(account.find("cudaMemcpy: kind cudaMemcpyHostToDevice") != std::string::npos);
  CHECK(account.find("(cudaMemcpyDeviceToHost)") != std::string::npos);
  CHECK(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  CHECK(cudaGetLastError() == cudaSuccess);  // read once, as CUDA's
  CHECK(cudaFree(device) == cudaSuccess);
}

TEST_CASE("emulated runtime: freeing memory that queued work still uses is an error, and fine once waited for") {
  float *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&a), 4096) == cudaSuccess);
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&b), 4096) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
  const cudaError_t error = cudaFree(a);
  CHECK(error == cudaErrorIllegalState);
  CHECK(last_account(error).find("cudaFree(") != std::string::npos);
  CHECK(last_account(error).find("cudaMemcpyAsync cudaMemcpyDeviceToDevice") != std::string::npos);
  cudaGetLastError();
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("emulated runtime: an event recorded on another device's stream is an error naming both devices") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  if (count < 2) FRUGAL_SKIP("needs two emulated devices (FRUGAL_EMULATED_DEVICES=2, as CTest sets)");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaEvent_t event = nullptr;
  REQUIRE(cudaEventCreate(&event) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  const cudaError_t error = cudaEventRecord(event, stream);
  CHECK(error == cudaErrorInvalidResourceHandle);
  CHECK(last_account(error).find("belongs to cuda:0 but the stream to cuda:1") != std::string::npos);
  cudaGetLastError();
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaEventDestroy(event) == cudaSuccess);
}

TEST_CASE("emulated runtime: a stream or event used after its destroy is an error naming the call") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  const cudaError_t error = cudaStreamSynchronize(stream);
  CHECK(error == cudaErrorInvalidResourceHandle);
  CHECK(last_account(error).find("cudaStreamSynchronize: stream") != std::string::npos);
  CHECK(last_account(error).find("was destroyed (cudaStreamDestroy)") != std::string::npos);
  cudaGetLastError();
  // Through frugal's own check: a typed LibraryError with the call and the account.
  CHECK_THROWS_AS(synchronize_stream(Device::cuda(0), Stream{stream}), LibraryError);
  cudaEvent_t event = nullptr;
  REQUIRE(cudaEventCreate(&event) == cudaSuccess);
  REQUIRE(cudaEventDestroy(event) == cudaSuccess);
  CHECK(cudaEventQuery(event) == cudaErrorInvalidResourceHandle);
  CHECK(last_account(cudaErrorInvalidResourceHandle).find("cudaEventQuery: event") != std::string::npos);
  cudaGetLastError();
}

TEST_CASE("emulated runtime: a kernel given pageable host memory fails at its launch") {
  std::vector<float> host(64, 0.0f);
  launch_add_one(host.data(), 64, nullptr);
  const cudaError_t error = cudaGetLastError();
  CHECK(error == cudaErrorIllegalAddress);
  CHECK(last_account(error).find("pointer argument 0 is pageable host memory") != std::string::npos);
}

TEST_CASE("emulated runtime: a kernel writing past its block faults (ASan names it within the block's last page)") {
  // 1024 floats fill whole pages: index 1024 lies in the unmapped guard page after the block.
  const ChildEnd guard = run_in_child([] {
    float* device = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&device), 1024 * sizeof(float)) != cudaSuccess) _exit(3);
    FRUGAL_LAUNCH(1, 32, 0, nullptr, write_at)(device, 1024);
    cudaDeviceSynchronize();
  });
  CHECK(guard.crashed);
  // The fault handler's account, or, where the guard page was a freed block's before (poisoned for
  // the sanitizer when it was freed), AddressSanitizer's report of the same access.
  CHECK((guard.stderr_text.find("host code touched device memory of cuda:0") != std::string::npos ||
         guard.stderr_text.find("AddressSanitizer") != std::string::npos));
#if defined(__SANITIZE_ADDRESS__)
  // 100 floats: index 100 is in the block's page but past its bytes, which the sanitizer poisons.
  const ChildEnd tail = run_in_child([] {
    float* device = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&device), 100 * sizeof(float)) != cudaSuccess) _exit(3);
    FRUGAL_LAUNCH(1, 32, 0, nullptr, write_at)(device, 100);
    cudaDeviceSynchronize();
  });
  CHECK(tail.crashed);
  CHECK(tail.stderr_text.find("AddressSanitizer") != std::string::npos);
#endif
}

TEST_CASE("emulated runtime: launches, copies and waits are counted") {
  frugal::emu::runtime::reset_statistics();
  const Tensor x = ones({1000}, {.device = Device::cuda(0)});
  const Tensor y = add(x, x);
  CHECK(y.to(Device::cpu()).to_vector<float>()[999] == 2.0f);
  const frugal::emu::runtime::Statistics s = frugal::emu::runtime::statistics();
  CHECK(s.kernel_launches >= 2);  // the fill and the add
  CHECK(s.copies_device_to_host == 1);
  CHECK(s.waits >= 1);
}
