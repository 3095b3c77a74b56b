// GPU suite: the DataLoader's device path. Batches handed out on cuda:0, staged through pinned host
// memory or not, must equal the CPU loader's batches bit for bit (that their copies do not wait
// behind the default stream's kernels is in test_gpu_streams.cpp; tests/cpu/test_loader.cpp covers
// everything else).
#include <doctest/doctest.h>

#include "core/caching_allocator.h"
#include "data/loader.h"

using namespace frugal;
using namespace frugal::data;

namespace {

// [3, 5, 5] u8 images whose element k of sample i is (31 i + k) mod 256.
class Pattern final : public Dataset {
 public:
  std::int64_t size() const override { return 37; }
  Sample get(std::int64_t index) const override {
    Tensor input = empty({3, 5, 5}, {.dtype = DType::u8});
    for (std::int64_t k = 0; k < input.numel(); ++k)
      input.data<std::uint8_t>()[k] = static_cast<std::uint8_t>((31 * index + k) % 256);
    return {input, index % 10};
  }
  Shape sample_shape() const override { return {3, 5, 5}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return 10; }
  std::string describe() const override { return "pattern"; }
};

}  // namespace

TEST_CASE("DataLoader on cuda:0: the CPU loader's batches, with and without pinned staging") {
  auto dataset = std::make_shared<Pattern>();
  const Compose augment{std::make_shared<RandomCrop>(4, 4, 1), std::make_shared<ToFloat>(1.0 / 255)};
  const LoaderOptions cpu_options{.batch_size = 8, .shuffle = true, .num_workers = 2, .transforms = augment, .seed = 3};
  DataLoader cpu_loader(dataset, cpu_options);
  std::vector<Batch> expected;
  for (Batch& batch : cpu_loader.epoch(1)) expected.push_back(batch);

  for (bool pinned : {false, true}) {
    CAPTURE(pinned);
    const std::int64_t pinned_before = pinned_host_allocator().caching_stats().allocations.allocated;
    LoaderOptions options = cpu_options;
    options.device = Device::cuda(0);
    options.pin_memory = pinned;
    DataLoader loader(dataset, options);
    std::size_t b = 0;
    for (Batch& batch : loader.epoch(1)) {
      REQUIRE(b < expected.size());
      CHECK(batch.inputs.device() == Device::cuda(0));
      CHECK(batch.labels.device() == Device::cuda(0));
      CHECK(batch.indices == expected[b].indices);
      CHECK(batch.inputs.to_vector<float>() == expected[b].inputs.to_vector<float>());
      CHECK(batch.labels.to_vector<std::int64_t>() == expected[b].labels.to_vector<std::int64_t>());
      ++b;
    }
    CHECK(b == expected.size());
    const std::int64_t staged = pinned_host_allocator().caching_stats().allocations.allocated - pinned_before;
    // Two staging buffers per batch: inputs and labels.
    CHECK(staged == (pinned ? 2 * static_cast<std::int64_t>(expected.size()) : 0));
  }
}
