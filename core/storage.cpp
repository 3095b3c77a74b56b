// Storage (see storage.h).
#include "core/storage.h"

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"

namespace frugal {

namespace {
Allocator& storage_allocator(Device device, bool pinned) {
  if (!pinned) return allocator_for(device);
  FRUGAL_CHECK_AS(DeviceError, device.is_cpu(), "pinned memory is host memory: a pinned tensor must be on the CPU, not ",
                  device.str());
  return pinned_host_allocator();
}
}  // namespace

Storage::Storage(std::size_t bytes, Device device, Stream stream, bool pinned)
    : data_(storage_allocator(device, pinned).allocate(bytes, stream)), bytes_(bytes), device_(device), pinned_(pinned) {}

void Storage::release() { data_ = DataPtr(); }

void Storage::reallocate() {
  if (resident()) return;
  data_ = storage_allocator(device_, pinned_).allocate(bytes_, Stream{});
}

void Storage::ensure_resident() {
  if (resident()) return;
  FRUGAL_CHECK_VALUE(materialize_ != nullptr, "a storage of ", bytes_, " bytes on ", device_.str(),
                     " was released and nothing can gather it again");
  materialize_();
  FRUGAL_CHECK(resident(), "a released storage of ", bytes_, " bytes was not gathered by its owner");
}

}  // namespace frugal
