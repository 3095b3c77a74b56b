// Dataset's default get_into (see dataset.h).
#include "data/dataset.h"

#include <cstring>
#include <utility>

#include "core/allocator.h"

namespace frugal::data {

std::int64_t Dataset::get_into(std::int64_t index, void* out) const {
  const Sample sample = get(index);
  FRUGAL_CHECK_SHAPE(sample.input.shape() == sample_shape(), describe(), ": sample ", index, " has shape ",
                     shape_str(sample.input.shape()), ", the dataset declares ", shape_str(sample_shape()));
  FRUGAL_CHECK_DTYPE(sample.input.dtype() == sample_dtype(), describe(), ": sample ", index, " is ",
                     sample.input.dtype(), ", the dataset declares ", sample_dtype());
  const Tensor contiguous = sample.input.contiguous();
  std::memcpy(out, contiguous.data_ptr(), contiguous.nbytes());
  return sample.label;
}

Sample Dataset::get_by_reading(std::int64_t index) const {
  MemoryTagScope scope(MemoryTag::data);
  Tensor input = empty(sample_shape(), {.dtype = sample_dtype()});
  const std::int64_t label = get_into(index, input.data_ptr());
  return {std::move(input), label};
}

std::size_t sample_bytes(const Dataset& dataset) {
  return static_cast<std::size_t>(shape_numel(dataset.sample_shape())) * dtype_size(dataset.sample_dtype());
}

}  // namespace frugal::data
