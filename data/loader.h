// DataLoader: batches of a Dataset in a sampler's order, loaded ahead of the caller by worker
// threads, transformed per sample, and handed out on the training device (torch.utils.data's
// DataLoader, with threads where torch uses processes: frugal's datasets are thread-safe maps of
// files, so there is no interpreter lock to escape).
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2, .seed = 7});
//   for (Batch& batch : loader.epoch(e)) train_step(batch.inputs, batch.labels);
//
// Note [Bounded, ordered prefetching]
// The epoch's batches are numbered 0, 1, ... in sampler order; an epoch resumed at batch k (start_epoch's
// first_batch) keeps those numbers and starts at k. Workers claim numbers in increasing order, but
// only inside a window of `num_workers * prefetch` numbers starting at the next batch the caller will
// take; a finished batch waits in slot (number % window) until the caller takes it.
//   - At most `window` batches are loaded or loading at once, whatever the dataset's size: host
//     memory is O(workers x prefetch x batch), plus the batch the caller holds.
//   - The caller receives batches in sampler order even when workers finish out of order; a batch's
//     content depends only on (sampler order, seed, epoch, its number) and never on which worker built
//     it or which batch the epoch started at, so a seed gives the same batches for any num_workers,
//     and an epoch resumed at batch k hands out exactly batches k, k+1, ... of the uninterrupted one.
//   - An exception while loading (a dataset's get or a transform throwing) is kept in the batch's
//     slot and thrown from next() when the caller reaches that batch, as the same frugal error type
//     with "sample N: " added to its message. It ends the epoch.
// Workers live for one epoch: the epoch's end, start_epoch() and the destructor stop and join them,
// and free the batches still in flight.
//
// Devices: batches are assembled on the host under MemoryTag::data. For a CUDA device the worker
// that built a batch also copies it (inputs and labels) to the device, asynchronously on a side
// stream of its own (core/stream.h): a non-blocking stream, so the copy overlaps the kernels the
// caller has queued on the default stream, where a plain cudaMemcpy would wait for them. The worker
// then waits for its side stream (its own copies alone, up to kSideStreams workers; beyond, workers
// share streams round robin and wait for each other's copies too) and hands out a complete batch. With pin_memory the batch is
// assembled in page-locked staging buffers from pinned_host_allocator(), which the GPU reads by DMA;
// without, the driver stages pageable memory itself and the copy takes longer. The device memory is
// allocated from the side stream's pool and recorded as used by the default stream, so a freed
// batch is reused only after the caller's kernels that read it are done.
// Not here: the datasets (data/dataset.h and the formats), per-sample transforms (data/transforms.h),
// index orders (data/sampler.h).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace frugal::data {

// B = the batch's sample count: batch_size, or fewer in an epoch's last batch.
struct Batch {
  Tensor inputs;                      // [B, ...sample shape after transforms], on the loader's device
  Tensor labels;                      // [B] i64, on the loader's device
  std::vector<std::int64_t> indices;  // the dataset index of each row
};

struct LoaderOptions {
  std::int64_t batch_size = 1;
  bool drop_last = false;              // drop an epoch's last batch when it is short
  bool shuffle = false;                // without a sampler: RandomSampler(seed), else SequentialSampler
  std::shared_ptr<Sampler> sampler{};  // instead of `shuffle` (a DistributedSampler, say); its epoch is set here
  int num_workers = 0;                 // loading threads; 0 = load inside next(), in the caller's thread
  int prefetch = 2;                    // batches in flight per worker (torch's prefetch_factor)
  Compose transforms{};                // applied to each sample's input, keyed by (seed, epoch, index)
  Device device = Device::cpu();       // where batches are handed out
  std::uint64_t seed = 0;              // for the shuffle and the random transforms
  bool pin_memory = false;             // CUDA devices: stage batches in page-locked memory (ignored for the CPU)
};

// Counted since construction (or reset_stats()).
struct LoaderStats {
  std::int64_t batches = 0;   // handed to the caller
  std::int64_t samples = 0;   // rows of those batches
  std::int64_t bytes = 0;     // inputs plus labels of those batches
  double wait_seconds = 0.0;  // the caller inside next() waiting for a batch (with 0 workers: loading it)
  double load_seconds = 0.0;  // summed over workers: reading, transforming, batching, copying to the device
};

class EpochRange;

class DataLoader {
 public:
  DataLoader(DatasetPtr dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  std::int64_t num_batches() const;  // per epoch
  // Stops the epoch in flight, if any, and starts `epoch`: the sampler's order for it, workers started.
  // `first_batch` > 0 resumes the epoch there (a training run restarted from a checkpoint taken
  // mid-epoch): batches first_batch, first_batch + 1, ... exactly as the whole epoch would have had
  // them. IndexError unless 0 <= first_batch <= num_batches() (num_batches(): nothing left to load).
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  // The next batch in sampler order; nullopt once the epoch is done. Throws what loading it threw.
  std::optional<Batch> next();
  // start_epoch(epoch, first_batch), then the range `for (Batch& batch : loader.epoch(e))` walks.
  EpochRange epoch(std::int64_t epoch, std::int64_t first_batch = 0);

  LoaderStats stats() const;
  void reset_stats();
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  // One batch as a worker leaves it: the batch or what loading it threw.
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
    double load_seconds = 0.0;
    bool ready() const { return batch.has_value() || error != nullptr; }
  };

  std::int64_t batches_of(std::int64_t samples) const;  // with batch_size and drop_last
  Slot load(std::int64_t batch, int worker) const;      // never throws: errors go into the slot
  Batch load_batch(std::int64_t batch, Stream copy_stream) const;
  Sample load_sample(std::int64_t index) const;                        // get, then the transforms
  std::int64_t read_sample_into(std::int64_t index, std::byte* row) const;  // no transforms: get_into
  Slot take_from_workers();
  void worker_loop(int worker);  // worker 0, 1, ...; the caller's thread counts as worker 0
  void stop_workers();

  DatasetPtr dataset_;
  LoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  std::int64_t window_;  // num_workers * prefetch: see Note [Bounded, ordered prefetching]

  // The epoch in flight. Set by start_epoch before workers start; read-only while they run.
  std::int64_t epoch_ = -1;
  std::vector<std::int64_t> order_;
  std::int64_t epoch_batches_ = 0;

  // Shared with the workers, under mutex_.
  mutable std::mutex mutex_;
  std::condition_variable may_claim_;    // workers wait here for room in the window
  std::condition_variable batch_ready_;  // the caller waits here for its next batch
  std::int64_t next_out_ = 0;            // the next batch the caller takes
  std::int64_t next_claim_ = 0;          // the next batch a worker claims
  std::vector<Slot> slots_;              // window_ slots, batch b in slots_[b % window_]
  bool stopping_ = false;
  LoaderStats stats_;
  std::vector<std::thread> workers_;
};

// The batches of one epoch as a range (an input range: each batch is visited once).
class EpochRange {
 public:
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    explicit Iterator(DataLoader& loader) : loader_(&loader), current_(loader.next()) {}
    Batch& operator*() const { return *current_; }
    Iterator& operator++() {
      current_.reset();  // free the batch before taking the next: the caller holds one, not two
      current_ = loader_->next();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    DataLoader* loader_;
    mutable std::optional<Batch> current_;
  };

  explicit EpochRange(DataLoader& loader) : loader_(loader) {}
  Iterator begin() { return Iterator(loader_); }
  std::default_sentinel_t end() { return {}; }

 private:
  DataLoader& loader_;
};

}  // namespace frugal::data
