// GPU suite: side streams and the copies on them (core/stream.h), and the loader that uses them.
// These cases call the CUDA runtime themselves (stream flags, stream queries), so they are built
// only with FRUGAL_CUDA; tests/cpu/test_device.cpp checks the same functions on the CPU.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/stream.h"
#include "data/loader.h"
#include "kernels/gemm.h"

using namespace frugal;
using namespace frugal::data;

namespace {

const Device kGpu = Device::cuda(0);

// 37 samples of [2, 3] u8 zeros, labelled index % 10.
class Labels final : public Dataset {
 public:
  std::int64_t size() const override { return 37; }
  Sample get(std::int64_t index) const override { return {zeros({2, 3}, {.dtype = DType::u8}), index % 10}; }
  Shape sample_shape() const override { return {2, 3}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return 10; }
  std::string describe() const override { return "labels"; }
};

}  // namespace

TEST_CASE("side streams: one per slot, kept, non-blocking, and an asynchronous copy from pinned memory arrives") {
  const Stream first = side_stream(kGpu, 0), second = side_stream(kGpu, 1);
  CHECK(first.handle != nullptr);
  CHECK(first != second);
  CHECK(side_stream(kGpu, 0) == first);
  unsigned int flags = 0;
  REQUIRE(cudaStreamGetFlags(static_cast<cudaStream_t>(first.handle), &flags) == cudaSuccess);
  CHECK(flags == cudaStreamNonBlocking);  // it must not wait for the default stream's kernels

  constexpr std::int64_t kCount = 1 << 20;
  DataPtr pinned = pinned_host_allocator().allocate(kCount * sizeof(float));
  auto* host = static_cast<float*>(pinned.get());
  for (std::int64_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i % 1000);
  const Tensor device = empty({kCount}, {.device = kGpu, .stream = first});
  copy_bytes_async(device.data_ptr(), kGpu, host, Device::cpu(), device.nbytes(), first);
  synchronize_stream(kGpu, first);
  const std::vector<float> back = device.to_vector<float>();
  CHECK(std::equal(back.begin(), back.end(), host));
}

TEST_CASE("record_stream: a block from a side stream's pool, used on the default stream, is reused once that work is done") {
  const Stream side = side_stream(kGpu, 2);
  void* address = nullptr;
  {
    Tensor batch = empty({256, 1024}, {.device = kGpu, .stream = side});
    address = batch.data_ptr();
    record_stream(batch, Stream{});
    batch.fill_(1.0);  // default-stream work on it
  }
  // Freed with an event recorded on the default stream; once the device is idle the block is free
  // again, and the next request of its size on the side stream gets it back.
  cuda_synchronize(0);
  const Tensor again = empty({256, 1024}, {.device = kGpu, .stream = side});
  CHECK(again.data_ptr() == address);
}

TEST_CASE("DataLoader on cuda:0: a batch's copy does not wait behind the default stream's kernels") {
  auto dataset = std::make_shared<Labels>();
  const LoaderOptions options{.batch_size = 8, .device = Device::cuda(0), .pin_memory = true};
  DataLoader loader(dataset, options);
  // Warm up: side streams, pinned and device blocks are created now, so the measured batch makes
  // no cudaMalloc or cudaHostAlloc, which may synchronize the whole device.
  for (Batch& batch : loader.epoch(0)) static_cast<void>(batch);

  // Queue about a second of matrix products on the default stream (8192^3 f32, no TF32: ~1.1 TFLOP
  // each), then load a batch in this thread (num_workers = 0): its copy runs on a side stream. The
  // emulated runtime runs nothing until something waits, so there small products stay queued as well.
  const std::int64_t side = cuda_status().emulated ? 64 : 8192;
  const Tensor a = full({side, side}, 1.0, {.device = Device::cuda(0)});
  std::vector<Tensor> products;
  for (int i = 0; i < 40; ++i) products.push_back(matmul(a, a));
  loader.start_epoch(1);
  std::optional<Batch> batch = loader.next();
  REQUIRE(batch.has_value());
  // The batch is complete while the products are still running: the copy did not queue behind them.
  CHECK(cudaStreamQuery(nullptr) == cudaErrorNotReady);
  const std::vector<std::int64_t> labels = batch->labels.to_vector<std::int64_t>();  // waits for the products
  for (std::size_t row = 0; row < labels.size(); ++row) CHECK(labels[row] == batch->indices[row] % 10);
}
