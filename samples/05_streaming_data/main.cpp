// Sample 05: a dataset streamed through the DataLoader, against the same dataset held in RAM.
//   1. Fashion-MNIST's train split (Debian's dataset-fashion-mnist; a generated shard of the same
//      shape when it is not installed) streamed from its file by 2 worker threads, shuffled,
//      with ToFloat and Normalize applied to each sample.
//   2. The same loader over InMemoryDataset, which first reads every sample into RAM.
// For each pass: samples/s, MB/s of batches, the time the loop waited for data, the peak of memory
// tagged `data` (the allocator's own books), and the process's peak RSS.
// Batches go to cuda:0 through pinned staging buffers when a GPU is usable, else stay on the CPU.
// Checked (samples/checks.h; the sample exits 1 when one is false): each pass hands out every sample
// once; streaming holds at most the loader's window of batches, plus the one the loop holds and the
// samples being built; the in-memory dataset holds every sample before its first batch.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "data/dataset_ops.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/shard.h"
#include "samples/checks.h"

using namespace frugal;
using namespace frugal::data;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// The process's peak resident set so far, in MB (Linux reports KiB). It only ever grows.
double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e6;
}

std::int64_t data_bytes(bool peak) {
  const Stat tag = allocator_for(Device::cpu()).stats().tag_bytes[static_cast<int>(MemoryTag::data)];
  return peak ? tag.peak : tag.current;
}

// 60000 [1, 28, 28] u8 images with a pattern and labels i % 10, as a shard in `folder`.
DatasetPtr generated_shard(const fs::path& folder) {
  const std::string path = (folder / "fashion-like.shard").string();
  ShardWriter writer(path, {1, 28, 28}, DType::u8);
  Tensor image = empty({1, 28, 28}, {.dtype = DType::u8});
  for (std::int64_t i = 0; i < 60000; ++i) {
    image.fill_(static_cast<double>(i % 256));
    writer.add(image, i % 10);
  }
  writer.finish();
  return std::make_shared<ShardDataset>(path);
}

constexpr std::int64_t kBatch = 256, kWorkers = 2, kPrefetch = 2;

// One pass over `dataset`; returns the bytes tagged `data` held before it and the peak during it.
std::pair<std::int64_t, std::int64_t> stream(const char* title, const DatasetPtr& dataset, Device device,
                                             samples::Checks& checks) {
  allocator_for(Device::cpu()).reset_peak_stats();
  const std::int64_t held_before = data_bytes(false);
  // Fashion-MNIST's pixel mean and standard deviation over the train split.
  const Compose normalize{std::make_shared<ToFloat>(1.0 / 255),
                          std::make_shared<Normalize>(std::vector<double>{0.2860}, std::vector<double>{0.3530})};
  DataLoader loader(dataset, {.batch_size = kBatch, .shuffle = true, .num_workers = kWorkers, .prefetch = kPrefetch,
                              .transforms = normalize, .device = device, .pin_memory = true});
  const auto start = Clock::now();
  for (Batch& batch : loader.epoch(0)) static_cast<void>(batch);  // a training step would use the batch here
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const LoaderStats stats = loader.stats();
  std::printf("%s\n", title);
  std::printf("   %lld samples in %.2f s: %.0f samples/s, %.0f MB/s of f32 batches (%lld batches)\n",
              static_cast<long long>(stats.samples), seconds, static_cast<double>(stats.samples) / seconds,
              static_cast<double>(stats.bytes) / 1e6 / seconds, static_cast<long long>(stats.batches));
  std::printf("   the loop waited %.3f s for data; workers spent %.2f s loading (two threads, so up to 2x the wall)\n",
              stats.wait_seconds, stats.load_seconds);
  std::printf("   memory tagged data: %s held before the epoch, peak %s during it; peak RSS so far %.0f MB\n",
              format_size(static_cast<std::size_t>(held_before)).c_str(),
              format_size(static_cast<std::size_t>(data_bytes(true))).c_str(), peak_rss_mb());
  checks.expect(stats.samples == dataset->size(), std::string(title) + ": every sample handed out once");
  std::printf("\n");
  return {held_before, data_bytes(true)};
}

}  // namespace

int main() {
  const Device device = cuda_available() ? Device::cuda(0) : Device::cpu();
  std::printf("batches on %s%s\n\n", device.str().c_str(), device.is_cuda() ? " (pinned staging)" : "");
  const fs::path temp = fs::temp_directory_path() / ("frugal-sample-05-" + std::to_string(getpid()));
  fs::create_directories(temp);

  DatasetPtr dataset;
  if (fs::exists(fs::path(kFashionMnistFolder) / "train-images-idx3-ubyte.gz")) {
    std::string cache;  // the default cache folder ($XDG_CACHE_HOME or ~/.cache/frugal) when there is one
    try {
      default_cache_dir();
    } catch (const ValueError&) {
      cache = temp.string();
    }
    dataset = std::make_shared<IdxDataset>(fashion_mnist("train", cache));
  } else {
    std::printf("Fashion-MNIST is not installed (Debian: dataset-fashion-mnist); generating a shard instead\n");
    dataset = generated_shard(temp);
  }
  std::printf("dataset: %s\n\n", dataset->describe().c_str());

  samples::Checks checks;
  const auto [streamed_before, streamed_peak] = stream("1. streaming from the file", dataset, device, checks);
  // Note [Bounded, ordered prefetching] (data/loader.h): the window's batches, the one the loop holds,
  // and while the window is full each worker's samples in the making: at most one batch more.
  const std::int64_t sample_bytes = shape_numel(dataset->sample_shape()) * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t batch_bytes = kBatch * (sample_bytes + static_cast<std::int64_t>(sizeof(std::int64_t)));
  checks.expect(streamed_peak - streamed_before <= (kWorkers * kPrefetch + 2) * batch_bytes,
                "streaming holds a few batches of data, whatever the dataset's size");
  const auto start = Clock::now();
  const DatasetPtr in_memory = std::make_shared<InMemoryDataset>(*dataset);
  std::printf("InMemoryDataset read every sample in %.2f s\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  const std::int64_t held = stream("2. from RAM (InMemoryDataset)", in_memory, device, checks).first;
  const std::int64_t dataset_bytes =
      dataset->size() * shape_numel(dataset->sample_shape()) * static_cast<std::int64_t>(dtype_size(dataset->sample_dtype()));
  checks.expect(held >= dataset_bytes, "InMemoryDataset holds every sample before the first batch");
  std::printf("Peak RSS only grows, so pass 2's figure includes pass 1's; the data-tag peaks are per pass.\n");
  fs::remove_all(temp);
  return checks.exit_code("05_streaming_data");
}
