// Device: where a tensor's bytes live (the CPU, or one CUDA GPU by index).
// Not here: whether CUDA is usable at run time (core/cuda_status.h) or how memory is obtained
// (core/allocator.h).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace frugal {

enum class DeviceType : std::uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;  // the CPU
  constexpr Device(DeviceType type, int index) : type_(type), index_(type == DeviceType::CPU ? 0 : index) {}

  static constexpr Device cpu() { return Device(); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  // Parses "cpu", "cuda" (index 0) and "cuda:N"; throws ValueError on anything else.
  static Device parse(std::string_view text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"

  constexpr bool operator==(const Device&) const = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace frugal
