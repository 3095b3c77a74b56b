// Device: parsing and printing, and the default device of tensor factories (see device.h).
#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace frugal {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text == "meta") return meta();
  constexpr std::string_view prefix = "cuda:";
  if (text.starts_with(prefix)) {
    std::string_view digits = text.substr(prefix.size());
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  FRUGAL_THROW(ValueError, "unknown device '", text, "': expected cpu, cuda, cuda:N or meta");
}

std::string Device::str() const {
  switch (type_) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda:" + std::to_string(index_);
    case DeviceType::Meta: return "meta";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

namespace {
thread_local Device t_default_device = Device::cpu();
}  // namespace

Device default_device() { return t_default_device; }

DefaultDeviceScope::DefaultDeviceScope(Device device) : previous_(t_default_device) { t_default_device = device; }
DefaultDeviceScope::~DefaultDeviceScope() { t_default_device = previous_; }

}  // namespace frugal
