// DataLoader (see loader.h and its Note [Bounded, ordered prefetching]).
#include "data/loader.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/stream.h"
#include "data/mapped_file.h"  // FileError

namespace frugal::data {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Throws a copy of `error` as the first of the types that it is (Error last, matching any), with a
// new message and the original's file, line and expression.
template <typename E, typename... Rest>
[[noreturn]] void throw_same_type(const Error& error, std::string message) {
  if constexpr (sizeof...(Rest) > 0) {
    if (dynamic_cast<const E*>(&error)) throw E(std::move(message), error.file(), error.line(), error.expression());
    throw_same_type<Rest...>(error, std::move(message));
  } else {
    throw E(std::move(message), error.file(), error.line(), error.expression());
  }
}

// Rethrows the exception being handled, naming the sample it came from. frugal's errors keep their
// type; an exception from outside frugal passes through unchanged, as there is no general way to copy
// one with a new message.
[[noreturn]] void rethrow_naming_sample(std::int64_t index) {
  try {
    throw;
  } catch (const Error& error) {
    throw_same_type<FileError, ValueError, IndexError, ShapeError, DTypeError, DeviceError, OutOfMemoryError,
                    LibraryError, Error>(
        error, detail::str("sample ", index, ": ", error.message()));
  }
}

// Host memory a batch is assembled in, then copied from: a CPU tensor, which is the batch when the
// loader hands out CPU batches; or, for a CUDA device with pin_memory, a page-locked buffer from
// pinned_host_allocator(), which the GPU's copy engine reads by DMA (from pageable memory the driver
// would first copy into a pinned bounce buffer of its own, and the copy would not be asynchronous).
class HostBuffer {
 public:
  HostBuffer(Shape shape, DType dtype, bool pinned) : shape_(std::move(shape)), dtype_(dtype) {
    if (pinned) {
      pinned_ = pinned_host_allocator().allocate(static_cast<std::size_t>(shape_numel(shape_)) * dtype_size(dtype));
      data_ = static_cast<std::byte*>(pinned_.get());
    } else {
      tensor_ = empty(shape_, {.dtype = dtype_});
      data_ = static_cast<std::byte*>(tensor_.data_ptr());
    }
  }

  std::byte* data() const { return data_; }

  // The batch on `device`. For CUDA: queued as a copy on `stream` (a side stream), so this buffer
  // must stay alive until the stream is synchronized. The device memory comes from the side
  // stream's pool and is recorded as used by the default stream, where the caller's kernels read
  // it: once freed, it waits for them before a later copy on the side stream may reuse it.
  Tensor to_device(Device device, Stream stream) const {
    if (device.is_cpu()) return tensor_;  // never pinned: pin_memory is for CUDA devices only
    Tensor out = empty(shape_, {.dtype = dtype_, .device = device, .stream = stream});
    record_stream(out, Stream{});
    copy_bytes_async(out.data_ptr(), device, data_, Device::cpu(), out.nbytes(), stream);
    return out;
  }

 private:
  Shape shape_;
  DType dtype_;
  Tensor tensor_;   // not pinned
  DataPtr pinned_;  // pinned
  std::byte* data_ = nullptr;
};

// A batch's inputs, assembled row by row in a HostBuffer: [rows, ...sample shape].
class BatchInputs {
 public:
  BatchInputs(std::int64_t rows, Shape sample_shape, DType dtype, bool pinned)
      : sample_shape_(std::move(sample_shape)), dtype_(dtype),
        row_bytes_(static_cast<std::size_t>(shape_numel(sample_shape_)) * dtype_size(dtype)),
        buffer_(batch_shape(rows, sample_shape_), dtype, pinned) {}

  std::byte* row(std::int64_t row) const { return buffer_.data() + static_cast<std::size_t>(row) * row_bytes_; }

  // Copies the input of sample `index` into row `row`. Every sample of a batch must look alike.
  void put(std::int64_t row, const Tensor& input, std::int64_t index) {
    FRUGAL_CHECK_DEVICE(input.device().is_cpu(), "DataLoader: sample ", index, " is on ", input.device(),
                        "; datasets and transforms hand out CPU tensors");
    FRUGAL_CHECK_SHAPE(input.shape() == sample_shape_, "DataLoader: sample ", index, " has shape ",
                       shape_str(input.shape()), ", the batch's first sample ", shape_str(sample_shape_));
    FRUGAL_CHECK_DTYPE(input.dtype() == dtype_, "DataLoader: sample ", index, " is ", input.dtype(),
                       ", the batch's first sample ", dtype_);
    if (row_bytes_ == 0) return;
    const Tensor contiguous = input.contiguous();
    std::memcpy(this->row(row), contiguous.data_ptr(), row_bytes_);
  }

  const HostBuffer& buffer() const { return buffer_; }

 private:
  static Shape batch_shape(std::int64_t rows, const Shape& sample_shape) {
    Shape shape{rows};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    return shape;
  }

  Shape sample_shape_;
  DType dtype_;
  std::size_t row_bytes_;
  HostBuffer buffer_;
};

}  // namespace

// ---- construction

DataLoader::DataLoader(DatasetPtr dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  FRUGAL_CHECK_VALUE(dataset_ != nullptr, "DataLoader: no dataset");
  FRUGAL_CHECK_VALUE(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  FRUGAL_CHECK_VALUE(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  FRUGAL_CHECK_VALUE(options_.prefetch >= 1, "DataLoader: prefetch must be >= 1, got ", options_.prefetch);
  FRUGAL_CHECK_VALUE(!(options_.sampler && options_.shuffle),
                     "DataLoader: give either a sampler or shuffle = true, not both (the sampler sets the order)");
  FRUGAL_CHECK_DEVICE(options_.device.is_cpu() || cuda_available(), "DataLoader: cannot hand out batches on ",
                      options_.device, ": ", cuda_status().reason);
  if (options_.sampler)
    sampler_ = options_.sampler;
  else if (options_.shuffle)
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  else
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  window_ = std::int64_t{options_.num_workers} * options_.prefetch;
}

DataLoader::~DataLoader() { stop_workers(); }

std::int64_t DataLoader::num_batches() const { return batches_of(sampler_->size()); }

std::int64_t DataLoader::batches_of(std::int64_t samples) const {
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? samples / b : (samples + b - 1) / b;
}

EpochRange DataLoader::epoch(std::int64_t epoch, std::int64_t first_batch) {
  start_epoch(epoch, first_batch);
  return EpochRange(*this);
}

// ---- the caller's side

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  // The checks and the new order first: if either is refused, the epoch in flight is left as it was.
  FRUGAL_CHECK_INDEX(first_batch >= 0 && first_batch <= num_batches(), "DataLoader: cannot start epoch ", epoch,
                     " at batch ", first_batch, ": it has ", num_batches(), " batches");
  sampler_->set_epoch(epoch);
  std::vector<std::int64_t> order = sampler_->indices();
  stop_workers();
  order_ = std::move(order);
  epoch_ = epoch;
  epoch_batches_ = batches_of(static_cast<std::int64_t>(order_.size()));
  // Batch numbers, and so each batch's rows and random transforms, are those of the whole epoch.
  next_out_ = next_claim_ = first_batch;
  slots_.resize(static_cast<std::size_t>(window_));
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

std::optional<Batch> DataLoader::next() {
  FRUGAL_CHECK_VALUE(epoch_ >= 0, "DataLoader::next: no epoch started (call start_epoch(e), or iterate epoch(e))");
  if (next_out_ >= epoch_batches_) {  // only this thread writes next_out_, so reading it unlocked is safe
    stop_workers();                   // they have all finished: join them now, not at the next epoch
    return std::nullopt;
  }
  const auto start = Clock::now();
  Slot slot;
  if (options_.num_workers == 0) {
    slot = load(next_out_++, 0);
  } else {
    slot = take_from_workers();
  }
  const double waited = seconds_since(start);
  if (slot.error) {
    stop_workers();
    next_out_ = epoch_batches_;  // the epoch ends at its first error
    std::rethrow_exception(slot.error);
  }
  std::lock_guard lock(mutex_);
  stats_.wait_seconds += waited;
  if (options_.num_workers == 0) stats_.load_seconds += slot.load_seconds;
  stats_.batches += 1;
  stats_.samples += static_cast<std::int64_t>(slot.batch->indices.size());
  stats_.bytes += static_cast<std::int64_t>(slot.batch->inputs.nbytes() + slot.batch->labels.nbytes());
  return std::move(slot.batch);
}

DataLoader::Slot DataLoader::take_from_workers() {
  std::unique_lock lock(mutex_);
  Slot& slot = slots_[static_cast<std::size_t>(next_out_ % window_)];
  batch_ready_.wait(lock, [&] { return slot.ready(); });
  Slot taken = std::move(slot);
  slot = Slot{};
  ++next_out_;
  lock.unlock();
  may_claim_.notify_one();  // the window moved on by one batch
  return taken;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void DataLoader::reset_stats() {
  std::lock_guard lock(mutex_);
  stats_ = LoaderStats{};
}

// ---- the workers' side

void DataLoader::worker_loop(int worker) {
  // As torch's workers: the workers are the parallelism, so a sample's copies and fills (core's
  // OpenMP loops) stay on the worker's own thread instead of each starting a team of its own.
  omp_set_num_threads(1);
  std::unique_lock lock(mutex_);
  while (true) {
    may_claim_.wait(lock, [&] {
      return stopping_ || next_claim_ >= epoch_batches_ || next_claim_ < next_out_ + window_;
    });
    if (stopping_ || next_claim_ >= epoch_batches_) return;
    const std::int64_t batch = next_claim_++;
    lock.unlock();
    Slot loaded = load(batch, worker);
    lock.lock();
    if (stopping_) return;  // nobody will take it: `loaded` is freed here
    stats_.load_seconds += loaded.load_seconds;
    slots_[static_cast<std::size_t>(batch % window_)] = std::move(loaded);
    batch_ready_.notify_one();  // only the caller waits there
  }
}

void DataLoader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  may_claim_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  slots_.clear();  // frees the batches loaded but never taken
  stopping_ = false;
}

// ---- loading one batch (any thread)

DataLoader::Slot DataLoader::load(std::int64_t batch, int worker) const {
  const auto start = Clock::now();
  Slot slot;
  try {
    // Each worker copies on a side stream of its own (while there are enough), so one worker's
    // synchronize waits for its own copies only.
    slot.batch = load_batch(batch, side_stream(options_.device, worker % kSideStreams));
  } catch (...) {
    slot.error = std::current_exception();
  }
  slot.load_seconds = seconds_since(start);
  return slot;
}

Batch DataLoader::load_batch(std::int64_t batch, Stream copy_stream) const {
  MemoryTagScope tag(MemoryTag::data);  // samples, transforms' temporaries, the batch, its device copy
  MemoryContextScope made_by("data loader");  // what a memory report names as their maker
  const std::int64_t first = batch * options_.batch_size;
  const std::int64_t rows = std::min(options_.batch_size, static_cast<std::int64_t>(order_.size()) - first);
  const bool pinned = options_.pin_memory && options_.device.is_cuda();
  Batch out;
  out.indices.assign(order_.begin() + first, order_.begin() + first + rows);
  HostBuffer labels({rows}, DType::i64, pinned);
  auto* label_at = reinterpret_cast<std::int64_t*>(labels.data());
  std::optional<BatchInputs> inputs;
  if (options_.transforms.empty()) {
    // Each sample read straight into its row: no tensor per sample, and for a shard no copy but
    // the file system's.
    inputs.emplace(rows, dataset_->sample_shape(), dataset_->sample_dtype(), pinned);
    for (std::int64_t row = 0; row < rows; ++row) label_at[row] = read_sample_into(out.indices[row], inputs->row(row));
  } else {
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t index = out.indices[row];
      const Sample sample = load_sample(index);
      // Shaped by the first sample: what the transforms made of it.
      if (!inputs) inputs.emplace(rows, sample.input.shape(), sample.input.dtype(), pinned);
      inputs->put(row, sample.input, index);
      label_at[row] = sample.label;
    }
  }
  try {
    out.inputs = inputs->buffer().to_device(options_.device, copy_stream);
    out.labels = labels.to_device(options_.device, copy_stream);
  } catch (...) {
    // The labels failed (out of device memory, say) with the inputs' copy already queued: wait for
    // it before the host buffer it reads goes back to its pool. The first error is the one to report.
    try {
      synchronize_stream(options_.device, copy_stream);
    } catch (const Error&) {
    }
    throw;
  }
  // The batch is complete when handed out, and the host buffers may go back to their pools: this
  // waits for the two copies only, never for the caller's kernels on the default stream.
  synchronize_stream(options_.device, copy_stream);
  return out;
}

std::int64_t DataLoader::read_sample_into(std::int64_t index, std::byte* row) const {
  try {
    return dataset_->get_into(index, row);
  } catch (...) {
    rethrow_naming_sample(index);
  }
}

Sample DataLoader::load_sample(std::int64_t index) const {
  try {
    Sample sample = dataset_->get(index);
    if (!options_.transforms.empty()) sample.input = options_.transforms(sample.input, options_.seed, epoch_, index);
    return sample;
  } catch (...) {
    rethrow_naming_sample(index);
  }
}

}  // namespace frugal::data
