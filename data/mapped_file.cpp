// tensor_from_bytes: a record copied out of a mapping into a tensor tagged as data.
#include "data/mapped_file.h"

#include <cstring>

#include "core/allocator.h"

namespace frugal::data {

Tensor tensor_from_bytes(const std::uint8_t* record, const Shape& shape, DType dtype) {
  MemoryTagScope scope(MemoryTag::data);
  Tensor tensor = empty(shape, {.dtype = dtype});
  std::memcpy(tensor.data_ptr(), record, tensor.nbytes());
  return tensor;
}

}  // namespace frugal::data
