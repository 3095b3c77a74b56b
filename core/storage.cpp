// Storage (see storage.h).
#include "core/storage.h"

namespace frugal {

Storage::Storage(std::size_t bytes, Device device, Stream stream)
    : data_(allocator_for(device).allocate(bytes, stream)), bytes_(bytes), device_(device) {}

}  // namespace frugal
