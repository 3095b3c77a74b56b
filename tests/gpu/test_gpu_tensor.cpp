// GPU suite: tensors on cuda:0 against the same operations on the CPU. Runs only where a CUDA
// device is usable (see main.cpp); everything here has a CPU twin in tests/cpu.
#include <doctest/doctest.h>

#include "core/cuda_status.h"
#include "core/random.h"
#include "core/tensor.h"

using namespace frugal;

namespace {
const Device kGpu = Device::cuda(0);
}

TEST_CASE("device info describes a real device") {
  const CudaDeviceInfo info = cuda_device_info(0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
  CHECK(info.compute_major >= 8);  // the build targets sm_80 and newer
}

TEST_CASE("every dtype survives a CPU -> GPU -> CPU round trip bit for bit") {
  const Tensor source = from_vector<float>({0, 1, -2.5f, 3.75f, 100, 0.5f, -7, 42}, {2, 4});
  for (DType dtype : kAllDTypes) {
    const Tensor cpu = source.to(dtype);
    const Tensor gpu = cpu.to(kGpu);
    CHECK(gpu.device() == kGpu);
    CHECK(gpu.dtype() == dtype);
    CHECK(gpu.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());
  }
}

TEST_CASE("strided copies, casts and fills match the CPU") {
  const Tensor cpu = uniform({3, 4, 5}, -10.0, 10.0);  // negative values exercise the float -> u8 wrap
  const Tensor gpu = cpu.to(kGpu);
  const Tensor cpu_view = cpu.permute({2, 0, 1}).slice(1, 0, 3, 2);
  const Tensor gpu_view = gpu.permute({2, 0, 1}).slice(1, 0, 3, 2);
  CHECK(gpu_view.contiguous().to_vector<float>() == cpu_view.contiguous().to_vector<float>());
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes)
      CHECK_MESSAGE(gpu_view.to(from).to(to).to_vector<double>() == cpu_view.to(from).to(to).to_vector<double>(),
                    from << " -> " << to);
  Tensor filled = zeros({4, 4}, {.device = kGpu});
  filled.slice(1, 1, 4, 2).fill_(3.0);
  Tensor expected = zeros({4, 4});
  expected.slice(1, 1, 4, 2).fill_(3.0);
  CHECK(filled.to_vector<float>() == expected.to_vector<float>());
  // A strided GPU destination filled from a CPU source crosses devices through a staging buffer.
  Tensor column = zeros({4, 4}, {.dtype = DType::f64, .device = kGpu}).select(1, 2);
  column.copy_(from_vector<float>({1, 2, 3, 4}));
  CHECK(column.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("the same seed gives the same random numbers as the CPU") {
  constexpr std::int64_t n = 100003;  // not a multiple of 4: the last Philox block is partial
  auto draw = [&](Device device) {
    Generator generator(2024);
    std::vector<std::vector<double>> out;
    out.push_back(uniform({n}, -1.0, 1.0, {.device = device}, &generator).to_vector<double>());
    out.push_back(randint(0, 1000, {n}, {.dtype = DType::i64, .device = device}, &generator).to_vector<double>());
    out.push_back(bernoulli({n}, 0.3, {.device = device}, &generator).to_vector<double>());
    out.push_back(uniform({n}, 0.0, 1.0, {.dtype = DType::bf16, .device = device}, &generator).to_vector<double>());
    // Bounds whose arithmetic is inexact: an fma on the GPU would change the last bit.
    out.push_back(uniform({n}, 0.1, 0.7, {.dtype = DType::f64, .device = device}, &generator).to_vector<double>());
    out.push_back(uniform({n}, 1000.0, 1001.0, {.device = device}, &generator).to_vector<double>());
    out.push_back(uniform({n}, 0.0, 1.0, {.dtype = DType::f16, .device = device}, &generator).to_vector<double>());
    out.push_back(normal({n}, 0.3, 1.7, {.dtype = DType::f64, .device = device}, &generator).to_vector<double>());
    return out;
  };
  const auto cpu = draw(Device::cpu()), gpu = draw(kGpu);
  const std::size_t normals = cpu.size() - 1;
  for (std::size_t d = 0; d < normals; ++d) CHECK_MESSAGE(cpu[d] == gpu[d], "distribution " << d);
  // Normals go through log/sin/cos, whose last bit may differ between libm and CUDA's math library.
  double worst = 0;
  for (std::int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(cpu[normals][i] - gpu[normals][i]) / (1 + std::abs(cpu[normals][i])));
  CHECK(worst < 1e-13);
}

TEST_CASE("an impossible allocation throws OutOfMemoryError and the device stays usable") {
  constexpr std::int64_t kPebibyteFloats = std::int64_t{1} << 48;  // 1 PiB: larger than any GPU
  CHECK_THROWS_AS(empty({kPebibyteFloats}, {.device = kGpu}), OutOfMemoryError);
  CHECK(ones({8}, {.device = kGpu}).to_vector<float>() == std::vector<float>(8, 1.0f));
}

TEST_CASE("device memory is returned when the last view goes") {
  Allocator& allocator = allocator_for(kGpu);
  const std::int64_t before = allocator.stats().requested_bytes.current;
  {
    const Tensor t = zeros({1 << 20}, {.device = kGpu});
    CHECK(allocator.stats().requested_bytes.current == before + (4 << 20));
  }
  CHECK(allocator.stats().requested_bytes.current == before);
}
