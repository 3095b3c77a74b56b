// Shared memory as an emulated kernel sees it: SharedPtr<T>, a checked pointer, where nvcc has a
// plain T* (core/cuda/kernel_support.h declares both through FRUGAL_DYNAMIC_SHARED and
// FRUGAL_SHARED_ARRAY). Indexing it gives a SharedRef<T>, which reads when converted to T and
// writes when assigned to; each access first asks the emulator whether it lies inside its array and
// whether it races with another thread's (check_shared_access, hazard_checker.h).
//
// The kernel source stays plain CUDA: p[i], *p, p + n, p[i] = v, p[i] += v, &p[i] for an atomic, and
// a SharedRef converts to T wherever a T is expected. What a proxy cannot be, it refuses to compile:
//   - `auto v = p[i];` names a reference, not a value: SharedRef works only inside the expression that
//     made it (its members take *this as an rvalue), so keeping it and reading it after a later write
//     or barrier, which would read a different value than the GPU, does not compile. Write the type.
//   - p->member, and passing &p[i] where a T* is expected: read the element into a local first.
//   - template deduction from an element (std::max(p[i], x)): name the type, std::max<float>.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "emu/emulator.h"

namespace frugal::emu {

template <typename T>
class SharedRef;

template <typename T>
class SharedPtr {
  static_assert(std::is_trivially_copyable_v<T>, "shared memory holds trivially copyable values");

 public:
  explicit SharedPtr(SharedSpan span, std::ptrdiff_t offset = 0) : span_(span), offset_(offset) {}

  SharedRef<T> operator[](std::ptrdiff_t index) const { return SharedRef<T>(*this + index); }
  SharedRef<T> operator*() const { return SharedRef<T>(*this); }
  SharedPtr operator+(std::ptrdiff_t count) const { return SharedPtr(span_, offset_ + count * kSize); }
  SharedPtr operator-(std::ptrdiff_t count) const { return SharedPtr(span_, offset_ - count * kSize); }
  friend SharedPtr operator+(std::ptrdiff_t count, SharedPtr pointer) { return pointer + count; }
  SharedPtr& operator+=(std::ptrdiff_t count) { return *this = *this + count; }
  SharedPtr& operator-=(std::ptrdiff_t count) { return *this = *this - count; }
  std::ptrdiff_t operator-(const SharedPtr& other) const { return (offset_ - other.offset_) / kSize; }

  // The element's address, once the emulator has checked and recorded this access to it.
  T* checked(SharedAccess kind) const {
    return static_cast<T*>(check_shared_access(span_, offset_, sizeof(T), kind));
  }

 private:
  static constexpr auto kSize = static_cast<std::ptrdiff_t>(sizeof(T));
  SharedSpan span_;
  std::ptrdiff_t offset_;  // in bytes from span_.begin: may point anywhere, only accesses are checked
};

template <typename T>
class SharedRef {
 public:
  explicit SharedRef(SharedPtr<T> at) : at_(at) {}
  SharedRef(const SharedRef&) = delete;
  SharedRef& operator=(const SharedRef&) = delete;

  operator T() const&& { return load(); }
  void operator=(const T& value) && { store(value); }
  void operator=(SharedRef&& other) && { store(other.load()); }  // p[i] = q[j]
  void operator+=(const T& value) && { store(load() + value); }
  void operator-=(const T& value) && { store(load() - value); }
  void operator*=(const T& value) && { store(load() * value); }
  void operator/=(const T& value) && { store(load() / value); }
  SharedPtr<T> operator&() const&& { return at_; }

 private:
  T load() const {
    T value;
    std::memcpy(&value, at_.checked(SharedAccess::read), sizeof(T));
    return value;
  }
  void store(const T& value) const { std::memcpy(at_.checked(SharedAccess::write), &value, sizeof(T)); }

  SharedPtr<T> at_;
};

// What FRUGAL_DYNAMIC_SHARED and FRUGAL_SHARED_ARRAY declare.
template <typename T>
SharedPtr<T> dynamic_shared() {
  return SharedPtr<T>(dynamic_shared_span());
}
template <typename T, std::size_t kCount>
SharedPtr<T> static_shared(T (&array)[kCount], const char* name) {
  return SharedPtr<T>(SharedSpan{reinterpret_cast<unsigned char*>(array), sizeof(array), name});
}

}  // namespace frugal::emu
