// `frugal bench loader`: the DataLoader against the disk it reads from and against RAM.
//   case           impls                    unit       what
//   peak_rss       streaming, in_memory,    MB         peak RSS of a child process that iterates the
//                  streaming_whole_shard               shard's first 1 GB with the loader, read from the
//                                                      file or after InMemoryDataset read it all; and
//                                                      streaming over the whole 3 GB
//   large_shard    loader, raw_read         MB/s       cold passes over a generated shard (3 GB;
//                                                      --quick: 4 MB): the loader with 2 workers, and
//                                                      read() in 8 MiB chunks of the same file; 5 of
//                                                      each in turn, the median
//   fashion_mnist  loader, no_workers       samples/s  Debian's Fashion-MNIST train split with ToFloat and
//                                                      Normalize, 2 workers or none (when the files exist)
// "Cold": before each pass the file's pages are dropped from the page cache (posix_fadvise
// DONTNEED; the shard was synced when written), so both passes read the disk.
// The shard is generated here in a temporary folder and removed afterwards.
// Not here: GPU copies (the loader's device path needs a GPU and is timed by training, not here).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "data/dataset_ops.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/shard.h"

namespace frugal::bench {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using data::DataLoader;
using data::DatasetPtr;

struct Sizes {
  double shard_bytes;            // the generated shard
  double rss_bytes;              // the part of it that peak_rss iterates (in_memory puts it all in RAM)
  std::int64_t fashion_samples;  // 0: the whole split
  int min_runs;
};
// Several GB: more than the loader could ever keep, so only streaming can pass it.
constexpr Sizes kFullSizes{3e9, 1e9, 0, 5};
constexpr Sizes kQuickSizes{4e6, 2e6, 2048, 1};

// CIFAR-sized images upscaled to 64 x 64: 12 KiB records, as a resized ImageNet-style dataset packs.
const Shape kSampleShape{3, 64, 64};
constexpr std::int64_t kBatch = 64;
constexpr int kWorkers = 2;
constexpr std::size_t kReadChunk = 8 << 20;  // big enough that read() calls cost nothing next to the disk
constexpr double kMB = 1e6;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Writes a shard of about `bytes`: each record a fixed pattern stamped with its index, labels i % 10.
std::string write_shard(const fs::path& folder, double bytes) {
  const std::string path = (folder / "large.shard").string();
  data::ShardWriter writer(path, kSampleShape, DType::u8);
  const auto records = static_cast<std::int64_t>(bytes / static_cast<double>(writer.info().record_size));
  std::vector<std::uint8_t> sample(static_cast<std::size_t>(writer.info().sample_bytes));
  for (std::size_t k = 0; k < sample.size(); ++k) sample[k] = static_cast<std::uint8_t>(k * 7);
  for (std::int64_t i = 0; i < records; ++i) {
    std::memcpy(sample.data(), &i, sizeof(i));
    writer.add_raw(sample.data(), i % 10);
  }
  writer.finish();
  return path;
}

// Drops the file's pages from the page cache, so the next pass reads the disk.
void drop_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  FRUGAL_CHECK(fd >= 0, "bench loader: cannot open ", path, ": ", std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double raw_read_seconds(const std::string& path) {
  drop_from_page_cache(path);
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  FRUGAL_CHECK(fd >= 0, "bench loader: cannot open ", path, ": ", std::strerror(errno));
  std::vector<char> chunk(kReadChunk);
  while (::read(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
  return seconds_since(start);
}

// One epoch with nothing done to the batches: what the loader alone costs.
void drain(DataLoader& loader) {
  for (data::Batch& batch : loader.epoch(0)) static_cast<void>(batch);
}

double loader_seconds(const std::string& path) {
  drop_from_page_cache(path);
  const auto start = Clock::now();
  DataLoader loader(std::make_shared<data::ShardDataset>(path), {.batch_size = kBatch, .num_workers = kWorkers});
  drain(loader);
  return seconds_since(start);
}

// The first `records` samples of the shard, read from the file or first copied into RAM.
DatasetPtr rss_dataset(const std::string& path, std::int64_t records, bool in_memory) {
  auto shard = std::make_shared<data::ShardDataset>(path);
  auto part = std::make_shared<data::Subset>(shard, data::sequential_indices(std::min(records, shard->size())));
  if (!in_memory) return part;
  return std::make_shared<data::InMemoryDataset>(*part);
}

// Peak RSS is per process and only ever grows, so each way of iterating runs in a child of its own
// (fork), which reports its own ru_maxrss through a pipe. The children run before this process
// starts any thread, so fork copies no half-held lock. A child's RSS starts with the pages it shares
// with this process, the same for both.
double child_peak_rss_mb(const std::string& path, std::int64_t records, bool in_memory) {
  int fds[2];
  FRUGAL_CHECK(::pipe(fds) == 0, "bench loader: pipe failed: ", std::strerror(errno));
  const pid_t pid = ::fork();
  FRUGAL_CHECK(pid >= 0, "bench loader: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    double peak_mb = -1.0;  // -1 tells the parent the child failed
    try {
      DataLoader loader(rss_dataset(path, records, in_memory), {.batch_size = kBatch, .num_workers = kWorkers});
      drain(loader);
      rusage usage{};
      ::getrusage(RUSAGE_SELF, &usage);
      peak_mb = static_cast<double>(usage.ru_maxrss) * 1024.0 / kMB;  // Linux reports KiB
    } catch (const std::exception&) {
    }
    const bool sent = ::write(fds[1], &peak_mb, sizeof(peak_mb)) == sizeof(peak_mb);
    ::_exit(sent && peak_mb >= 0 ? 0 : 1);  // no destructors or atexit handlers: they are the parent's
  }
  ::close(fds[1]);
  double peak_mb = -1.0;
  const bool received = ::read(fds[0], &peak_mb, sizeof(peak_mb)) == sizeof(peak_mb);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  FRUGAL_CHECK(received && WIFEXITED(status) && WEXITSTATUS(status) == 0 && peak_mb >= 0,
               "bench loader: the ", in_memory ? "in_memory" : "streaming", " child failed");
  return peak_mb;
}

void fashion_mnist_cases(const Sizes& sizes, const fs::path& temp, std::vector<Result>& results) {
  const fs::path images = fs::path(data::kFashionMnistFolder) / "train-images-idx3-ubyte.gz";
  if (!fs::exists(images)) return;  // Debian's dataset-fashion-mnist is not installed
  std::string cache;  // the default cache folder, when the environment names one
  try {
    data::default_cache_dir();
  } catch (const ValueError&) {
    cache = temp.string();
  }
  DatasetPtr dataset = std::make_shared<data::IdxDataset>(data::fashion_mnist("train", cache));
  if (sizes.fashion_samples > 0)
    dataset = std::make_shared<data::Subset>(dataset, data::sequential_indices(sizes.fashion_samples));
  // Fashion-MNIST's own pixel mean and standard deviation, over the train split.
  const data::Compose normalize{
      std::make_shared<data::ToFloat>(1.0 / 255),
      std::make_shared<data::Normalize>(std::vector<double>{0.2860}, std::vector<double>{0.3530})};
  for (int workers : {kWorkers, 0}) {
    DataLoader loader(dataset,
                      {.batch_size = 256, .shuffle = true, .num_workers = workers, .transforms = normalize});
    const double seconds = median_seconds([&] { drain(loader); }, [] {}, sizes.min_runs, 0.0);
    results.push_back({"fashion_mnist", workers > 0 ? "loader" : "no_workers",
                       static_cast<double>(dataset->size()) / seconds, "samples/s", true});
  }
}

}  // namespace

std::vector<Result> loader_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  const TempDir temp("frugal-loader-bench");
  const std::string shard = write_shard(temp.path, sizes.shard_bytes);
  const double shard_mb = static_cast<double>(fs::file_size(shard)) / kMB;
  std::vector<Result> results;

  const auto record_bytes = static_cast<double>(data::read_shard_info(shard).record_size);
  const auto rss_records = static_cast<std::int64_t>(sizes.rss_bytes / record_bytes);
  results.push_back({"peak_rss", "streaming", child_peak_rss_mb(shard, rss_records, false), "MB", false});
  results.push_back({"peak_rss", "in_memory", child_peak_rss_mb(shard, rss_records, true), "MB", false});
  // The same loader over the whole shard (3x the records): streaming's peak must not grow with it.
  const std::int64_t all_records = data::read_shard_info(shard).records;
  results.push_back({"peak_rss", "streaming_whole_shard", child_peak_rss_mb(shard, all_records, false), "MB", false});

  // Cold passes in turn, loader then raw read, and the median of each: the disk's speed drifts over
  // seconds (other machines share it), and alternating puts both under the same drift.
  std::vector<double> loader_runs, raw_runs;
  for (int run = 0; run < sizes.min_runs; ++run) {
    loader_runs.push_back(loader_seconds(shard));
    raw_runs.push_back(raw_read_seconds(shard));
  }
  results.push_back({"large_shard", "loader", shard_mb / median(loader_runs), "MB/s", true});
  results.push_back({"large_shard", "raw_read", shard_mb / median(raw_runs), "MB/s", true});

  fashion_mnist_cases(sizes, temp.path, results);
  return results;
}

}  // namespace frugal::bench
