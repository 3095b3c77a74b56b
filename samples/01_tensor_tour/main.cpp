// Sample 01: a tour of frugal's tensor core, measured by the allocator that serves it.
// Shows that views (transpose, slice, expand, reshape) cost zero bytes, that contiguous() and
// to(dtype) allocate exactly what the new layout needs, that memory is returned the moment the last
// view of a storage goes, how memory tags attribute bytes, and that a seed fixes random numbers on
// every device. Runs on cuda:0 when a GPU is usable, otherwise on the CPU. Each of those claims is
// checked on the bytes the allocator reports, and the sample exits 1 when one is false.
#include <cstdio>
#include <iostream>

#include "core/cuda_status.h"
#include "core/random.h"
#include "core/tensor.h"
#include "samples/checks.h"

using namespace frugal;

namespace {

double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

constexpr std::int64_t kMiB = 1 << 20;

// Prints one step and the allocator's live bytes after it, and returns them.
std::int64_t report(const Allocator& allocator, const char* step) {
  const std::int64_t live = allocator.stats().requested_bytes.current;
  std::printf("  %-52s %8.2f MiB live\n", step, mib(live));
  return live;
}

}  // namespace

int main() {
  const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::cout << "device: " << device;
  if (device.is_cpu()) std::cout << " (" << cuda_status().reason << ")";
  std::cout << "\n\n";
  const Allocator& allocator = allocator_for(device);
  const TensorOptions on_device{.device = device};
  samples::Checks checks;

  std::cout << "1. Views share storage: they cost no bytes\n";
  const std::int64_t start = report(allocator, "start");
  Tensor x = uniform({1024, 1024}, -1.0, 1.0, on_device);
  const std::int64_t with_x = report(allocator, "x = uniform([1024, 1024]) f32");
  checks.expect(with_x - start == 4 * kMiB, "x takes 4 MiB");
  Tensor xt = x.t();
  Tensor rows = x.slice(0, 0, 512);
  Tensor flat = x.view({-1});
  Tensor wide = x.select(0, 0).unsqueeze(0).expand({4096, 1024});
  checks.expect(report(allocator, "x.t(), x.slice(0, 0, 512), x.view(-1), expand") == with_x, "views add no bytes");
  const bool shared = xt.shares_storage_with(x) && rows.shares_storage_with(x) && flat.shares_storage_with(x) &&
                      wide.shares_storage_with(x);
  std::cout << "     x.t() strides " << shape_str(xt.strides()) << ", expand strides " << shape_str(wide.strides())
            << ", all share x's storage: " << std::boolalpha << shared << "\n";
  checks.expect(shared, "every view shares x's storage");
  std::cout << "\n";

  std::cout << "2. Copies allocate exactly the new layout\n";
  Tensor xt_packed = xt.contiguous();
  const std::int64_t packed = report(allocator, "xt.contiguous()  (+4 MiB)");
  checks.expect(packed - with_x == 4 * kMiB, "contiguous() of the transpose adds exactly 4 MiB");
  Tensor x16 = x.to(DType::f16);
  const std::int64_t copies = report(allocator, "x.to(f16)        (+2 MiB: half the bytes)");
  checks.expect(copies - packed == 2 * kMiB, "to(f16) adds exactly 2 MiB");
  const double max_error = [&] {
    const auto a = x.to_vector<float>(), b = x16.to_vector<float>();
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    return worst;
  }();
  std::printf("     largest f32 -> f16 rounding error on [-1, 1): %.3g (half an f16 step at 0.5-1 is 2^-12 = %.3g)\n",
              max_error, 1.0 / 4096);
  checks.expect(max_error <= 1.0 / 4096, "f32 -> f16 rounds to nearest: no error above half a step");
  std::cout << "\n";

  std::cout << "3. Memory returns when the last view goes\n";
  x = Tensor();
  checks.expect(report(allocator, "x = Tensor()     (views still hold the storage)") == copies,
                "dropping x frees nothing while its views live");
  xt = rows = flat = wide = Tensor();
  checks.expect(copies - report(allocator, "drop every view  (-4 MiB)") == 4 * kMiB, "dropping the last view frees x's 4 MiB");
  xt_packed = x16 = Tensor();
  checks.expect(report(allocator, "drop the copies") == start, "dropping the copies returns to the start");
  std::cout << "\n";

  std::cout << "4. Tags say what the bytes are for\n";
  {
    MemoryTagScope scope(MemoryTag::activation);
    Tensor activation = zeros({256, 1024}, on_device);
    const auto stats = allocator.stats();
    const std::int64_t tagged = stats.tag_bytes[static_cast<int>(MemoryTag::activation)].current;
    std::printf("  under MemoryTagScope(activation): %.2f MiB tagged activation, %.2f MiB tagged other\n", mib(tagged),
                mib(stats.tag_bytes[static_cast<int>(MemoryTag::other)].current));
    checks.expect(tagged == static_cast<std::int64_t>(activation.nbytes()),
                  "the allocator counts the 1 MiB tensor as activation memory");
    std::cout << "\n";
  }

  std::cout << "5. A seed fixes the numbers, on any device and thread count\n";
  Generator first(42), second(42);
  const Tensor a = normal({2, 3}, 0.0, 1.0, on_device, &first);
  const Tensor b = normal({2, 3}, 0.0, 1.0, {.device = Device::cpu()}, &second);
  std::cout << "  normal([2, 3]) with seed 42 on " << device << ":\n" << a << "\n";
  const bool identical = a.to_vector<float>() == b.to_vector<float>();
  std::cout << "  identical on the CPU: " << identical << "\n";
  checks.expect(identical, "seed 42 gives the same numbers on " + device.str() + " as on the CPU");
  std::cout << "\n";

  std::cout << "peak live bytes on " << device << " during the tour: " << mib(allocator.stats().requested_bytes.peak)
            << " MiB\n";
  if (device.is_cpu())
    std::cout << "  (step 2's 10 MiB plus the temporary f32 copy that to_vector() made of the f16 tensor;\n"
                 "   on a GPU that copy lands in host memory and the device peak is step 2's 10 MiB)\n";
  return checks.exit_code("01_tensor_tour");
}
