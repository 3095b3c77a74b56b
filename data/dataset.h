// The interface every dataset of data/ implements, and the sample it hands out. A dataset is
// map-style (as torch.utils.data.Dataset): a size and random access by index, so samplers can
// shuffle and shard it and the loader's workers can read it in parallel.
// Not here: file formats (data/idx.h, data/cifar.h, data/shard.h, data/image_folder.h), batching
// (data/loader.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace frugal::data {

struct Sample {
  Tensor input;        // a CPU tensor; for images [C, H, W] (1-channel images too), u8 as stored
  std::int64_t label;  // the class index
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // Sample `index` in [0, size()); IndexError otherwise. Must be safe to call from several threads
  // at once (the loader's workers do); a mapped dataset returns a copy of the record, so the sample
  // does not keep the mapping's pages alive.
  virtual Sample get(std::int64_t index) const = 0;
  // Sample `index`'s input written into `out` (contiguous, sample_shape() of sample_dtype()) and its
  // label returned: what the loader calls when no transform needs the sample as a tensor, so the
  // bytes go from the file straight into the batch (a pinned staging buffer, for a GPU) with no
  // tensor in between. The default copies get()'s input, after checking it against the declared
  // shape and dtype (ShapeError/DTypeError); the file-backed datasets read in place.
  virtual std::int64_t get_into(std::int64_t index, void* out) const;
  // What every sample looks like: get(i).input has this shape and dtype for every i.
  virtual Shape sample_shape() const = 0;
  virtual DType sample_dtype() const = 0;
  virtual std::int64_t num_classes() const = 0;
  virtual std::string describe() const = 0;  // one line: format, file, record count

 protected:
  // get() for a dataset that implements get_into: a fresh contiguous CPU tensor of the declared
  // shape and dtype, allocated under MemoryTag::data, filled by get_into.
  Sample get_by_reading(std::int64_t index) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// Bytes of one sample's input as the dataset declares it: numel(sample_shape()) * dtype size.
std::size_t sample_bytes(const Dataset& dataset);

}  // namespace frugal::data
