// Storage: one reference-counted allocation that tensors view. Tensors hold it through a
// shared_ptr, so the memory goes back to its allocator the moment the last view of it goes away.
// It also carries the version counter that every view shares: in-place writes bump it, and autograd
// uses it to refuse a saved tensor that was modified after being saved.
// Not here: shape, dtype or strides; a storage is only bytes on a device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"

namespace frugal {

class Storage {
 public:
  // Allocates from allocator_for(device), from the pool of `stream`: the stream that first uses it;
  // `pinned`: from pinned_host_allocator() instead (device must be the CPU).
  Storage(std::size_t bytes, Device device, Stream stream = {}, bool pinned = false);

  void* data() const { return data_.get(); }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryTag tag() const { return data_.tag(); }
  std::uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  DataPtr data_;
  std::size_t bytes_;
  Device device_;
  std::uint64_t version_ = 0;
};

}  // namespace frugal
