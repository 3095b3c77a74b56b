// Reading and writing integers of a fixed byte order at any address of a byte buffer: IDX files are
// big-endian, frugal's shard header is little-endian, and neither may depend on the host's order.
// memcpy makes unaligned addresses safe (a mapped record is aligned only to what the format says).
// Not here: whole-array conversion (a format that needs it loops over these).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>

namespace frugal::data {

// The value of type T (an integer or a float of 1, 2, 4 or 8 bytes) stored at `bytes` in the given
// byte order.
template <typename T>
T load(const std::uint8_t* bytes, std::endian order) {
  std::uint8_t ordered[sizeof(T)];
  std::memcpy(ordered, bytes, sizeof(T));
  if (order != std::endian::native) {
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(ordered[i], ordered[sizeof(T) - 1 - i]);
  }
  T value;
  std::memcpy(&value, ordered, sizeof(T));
  return value;
}

template <typename T>
T load_be(const std::uint8_t* bytes) { return load<T>(bytes, std::endian::big); }
template <typename T>
T load_le(const std::uint8_t* bytes) { return load<T>(bytes, std::endian::little); }

// Stores `value` at `bytes` in little-endian order.
template <typename T>
void store_le(std::uint8_t* bytes, T value) {
  std::memcpy(bytes, &value, sizeof(T));
  if (std::endian::native != std::endian::little) {
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(bytes[i], bytes[sizeof(T) - 1 - i]);
  }
}

}  // namespace frugal::data
