// Storage: one reference-counted allocation that tensors view. Tensors hold it through a
// shared_ptr, so the memory goes back to its allocator the moment the last view of it goes away.
// It also carries the version counter that every view shares: in-place writes bump it, and autograd
// uses it to refuse a saved tensor that was modified after being saved.
// Not here: shape, dtype or strides; a storage is only bytes on a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

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

  // A parameter sharded by ZeRO-3 (dist/ddp.h) gives its memory back between uses while every
  // tensor viewing it stays: release() frees the bytes (data() is then null), reallocate() takes
  // them again (a new address, the same size and device, under this thread's tag; the contents are
  // the caller's to write). The version does not change: a saved tensor of a released parameter is
  // still the one saved, once its owner has gathered it again. `materialize` is how the owner gathers
  // it: ensure_resident() calls it when the memory is released, and is an error when none was given.
  void release();
  void reallocate();
  bool resident() const { return bytes_ == 0 || data_.get() != nullptr; }
  void set_materializer(std::function<void()> materialize) { materialize_ = std::move(materialize); }
  void ensure_resident();

 private:
  DataPtr data_;
  std::size_t bytes_;
  Device device_;
  bool pinned_;
  std::uint64_t version_ = 0;
  std::function<void()> materialize_;
};

}  // namespace frugal
