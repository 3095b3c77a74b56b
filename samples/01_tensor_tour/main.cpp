// Sample 01: a tour of frugal's tensor core, measured by the allocator that serves it.
// Shows that views (transpose, slice, expand, reshape) cost zero bytes, that contiguous() and
// to(dtype) allocate exactly what the new layout needs, that memory is returned the moment the last
// view of a storage goes, how memory tags attribute bytes, and that a seed fixes random numbers on
// every device. Runs on cuda:0 when a GPU is usable, otherwise on the CPU.
#include <cstdio>
#include <iostream>

#include "core/cuda_status.h"
#include "core/random.h"
#include "core/tensor.h"

using namespace frugal;

namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Prints one step and the allocator's live bytes after it.
void report(const Allocator& allocator, const char* step) {
  std::printf("  %-52s %8.2f MiB live\n", step, mib(allocator.stats().requested_bytes.current));
}

}  // namespace

int main() {
  const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::cout << "device: " << device;
  if (device.is_cpu()) std::cout << " (" << cuda_status().reason << ")";
  std::cout << "\n\n";
  const Allocator& allocator = allocator_for(device);
  const TensorOptions on_device{.device = device};

  std::cout << "1. Views share storage: they cost no bytes\n";
  report(allocator, "start");
  Tensor x = uniform({1024, 1024}, -1.0, 1.0, on_device);
  report(allocator, "x = uniform([1024, 1024]) f32");
  Tensor xt = x.t();
  Tensor rows = x.slice(0, 0, 512);
  Tensor flat = x.view({-1});
  Tensor wide = x.select(0, 0).unsqueeze(0).expand({4096, 1024});
  report(allocator, "x.t(), x.slice(0, 0, 512), x.view(-1), expand");
  std::cout << "     x.t() strides " << shape_str(xt.strides()) << ", expand strides " << shape_str(wide.strides())
            << ", all share x's storage: " << std::boolalpha
            << (xt.shares_storage_with(x) && rows.shares_storage_with(x) && flat.shares_storage_with(x) &&
                wide.shares_storage_with(x))
            << "\n\n";

  std::cout << "2. Copies allocate exactly the new layout\n";
  Tensor xt_packed = xt.contiguous();
  report(allocator, "xt.contiguous()  (+4 MiB)");
  Tensor x16 = x.to(DType::f16);
  report(allocator, "x.to(f16)        (+2 MiB: half the bytes)");
  const double max_error = [&] {
    const auto a = x.to_vector<float>(), b = x16.to_vector<float>();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    return worst;
  }();
  std::printf("     largest f32 -> f16 rounding error on [-1, 1): %.3g (half an f16 step at 0.5-1 is 2^-12 = %.3g)\n\n",
              max_error, 1.0 / 4096);

  std::cout << "3. Memory returns when the last view goes\n";
  x = Tensor();
  report(allocator, "x = Tensor()     (views still hold the storage)");
  xt = rows = flat = wide = Tensor();
  report(allocator, "drop every view  (-4 MiB)");
  xt_packed = x16 = Tensor();
  report(allocator, "drop the copies");
  std::cout << "\n";

  std::cout << "4. Tags say what the bytes are for\n";
  {
    MemoryTagScope scope(MemoryTag::activation);
    Tensor activation = zeros({256, 1024}, on_device);
    const auto stats = allocator.stats();
    std::printf("  under MemoryTagScope(activation): %.2f MiB tagged activation, %.2f MiB tagged other\n\n",
                mib(stats.tag_bytes[static_cast<int>(MemoryTag::activation)].current),
                mib(stats.tag_bytes[static_cast<int>(MemoryTag::other)].current));
  }

  std::cout << "5. A seed fixes the numbers, on any device and thread count\n";
  Generator first(42), second(42);
  const Tensor a = normal({2, 3}, 0.0, 1.0, on_device, &first);
  const Tensor b = normal({2, 3}, 0.0, 1.0, {.device = Device::cpu()}, &second);
  std::cout << "  normal([2, 3]) with seed 42 on " << device << ":\n" << a << "\n";
  std::cout << "  identical on the CPU: " << (a.to_vector<float>() == b.to_vector<float>()) << "\n\n";

  std::cout << "peak live bytes on " << device << " during the tour: " << mib(allocator.stats().requested_bytes.peak)
            << " MiB\n";
  if (device.is_cpu())
    std::cout << "  (step 2's 10 MiB plus the temporary f32 copy that to_vector() made of the f16 tensor;\n"
                 "   on a GPU that copy lands in host memory and the device peak is step 2's 10 MiB)\n";
  return 0;
}
