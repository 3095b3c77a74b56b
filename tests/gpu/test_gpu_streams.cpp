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
#include "core/random.h"
#include "core/stream.h"
#include "data/loader.h"
#include "kernels/gemm.h"
#include "nn/activation_offload.h"
#include "nn/autograd.h"
#include "nn/functional.h"

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

TEST_CASE("stream_wait and StreamEvent: a side stream's copy waits for the default stream's kernel, the host for that copy alone") {
  const Stream side = side_stream(kGpu, kOffloadStreamSlot);
  const std::int64_t n = cuda_status().emulated ? 64 : 4096;  // the emulated runtime runs nothing until something waits
  const Tensor a = full({n, n}, 1.0, {.device = kGpu});
  const Tensor product = matmul(a, a);  // queued on the default stream: every element n
  DataPtr pinned = pinned_host_allocator().allocate(product.nbytes());
  stream_wait(kGpu, side, Stream{});
  copy_bytes_async(pinned.get(), Device::cpu(), product.data_ptr(), kGpu, product.nbytes(), side);
  const StreamEvent copied(kGpu, side);
  copied.synchronize();
  const auto* host = static_cast<const float*>(pinned.get());
  CHECK(std::all_of(host, host + n * n, [n](float v) { return v == static_cast<float>(n); }));
}

// Offloaded activations (nn/activation_offload.h) on cuda:0: saved to pinned host memory on the side
// stream after the default stream's kernels, back before the nodes that read them. In the emulated
// CUDA build a copy that did not wait for its kernel, or a node that did not wait for its copy, reads
// memory that was never written.
TEST_CASE("offloaded activations on cuda:0: the gradients are those of the activations kept on the device, bit for bit") {
  Generator generator(4);
  // Elementwise ops and sums only: their CUDA kernels add in a fixed order (a library convolution's
  // backward may not), so the two backward passes can be compared bit for bit.
  const Tensor x = normal({4, 3, 10, 10}, 0.0, 1.0, {}, &generator).to(kGpu);
  Tensor w1 = normal({1, 3, 10, 10}, 0.0, 2.0, {}, &generator).to(kGpu), w2 = normal({1, 3, 10, 10}, 0.0, 1.0, {}, &generator).to(kGpu);
  autograd::set_requires_grad(w1);
  autograd::set_requires_grad(w2);
  const auto loss = [&] {
    const Tensor h = functional::relu6(functional::mul(x, w1));  // h is saved by relu6 and the next mul: one copy
    const Tensor y = functional::mul(h, w2);
    return functional::sum(functional::mul(y, y));
  };
  autograd::backward(loss());
  const std::vector<float> g1 = autograd::grad(w1).to_vector<float>(), g2 = autograd::grad(w2).to_vector<float>();
  autograd::set_grad(w1, Tensor());
  autograd::set_grad(w2, Tensor());
  Tensor offloaded_loss;
  {
    const nn::ActivationOffloadScope scope;
    offloaded_loss = loss();
  }
  CHECK(nn::offloaded_activation_bytes().now > 0);
  autograd::backward(offloaded_loss);
  CHECK(nn::offloaded_activation_bytes().now == 0);
  CHECK(autograd::grad(w1).to_vector<float>() == g1);
  CHECK(autograd::grad(w2).to_vector<float>() == g2);
}
