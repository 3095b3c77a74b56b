// Device: where a tensor's bytes live (the CPU, or one CUDA GPU by index), or the meta device, where
// they do not live at all: a meta tensor has a shape, a dtype and an allocation counted by the meta
// allocator (fake addresses, no memory), and every op on it computes shapes and allocates its
// outputs exactly as on the CPU but runs no kernel. The memory planner runs models there.
// DefaultDeviceScope picks the device that tensor factories use when their options name none.
// Not here: whether CUDA is usable at run time (core/cuda_status.h) or how memory is obtained
// (core/allocator.h).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace frugal {

enum class DeviceType : std::uint8_t { CPU, CUDA, Meta };
inline constexpr int kNumDeviceTypes = 3;  // for tables indexed by DeviceType

class Device {
 public:
  constexpr Device() = default;  // the CPU
  constexpr Device(DeviceType type, int index) : type_(type), index_(type == DeviceType::CUDA ? index : 0) {}

  static constexpr Device cpu() { return Device(); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  static constexpr Device meta() { return Device(DeviceType::Meta, 0); }
  // Parses "cpu", "cuda" (index 0), "cuda:N" and "meta"; throws ValueError on anything else.
  static Device parse(std::string_view text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type_ == DeviceType::Meta; }
  std::string str() const;  // "cpu", "cuda:0", "meta"

  constexpr bool operator==(const Device&) const = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

// The device of a TensorOptions that names none (core/tensor.h): the CPU, or that of the innermost
// DefaultDeviceScope alive on this thread. As PyTorch's `with torch.device("meta"):`, it exists so a
// model can be built where it will live without a device argument threaded through every layer's
// constructor: the planner builds its models on the meta device, so that a 5 GB classifier takes no
// memory (and no time to initialise: random and fill ops do nothing there). Kept for construction:
// ops take their outputs' device from their inputs, never from here.
Device default_device();

class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace frugal
