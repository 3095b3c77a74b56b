// Operands for the kernel tests that compare a fast path with a sum in double: floats from a seeded
// linear congruential generator, the same on every machine and run, without the tensor library's
// random number generators (whose own tests are elsewhere). Not here: assertions or tolerances.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal::test {

// `count` floats in [-2, 2], multiples of 1/500, from `seed`.
inline std::vector<float> seeded_values(std::int64_t count, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(count));
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<std::int64_t>(state >> 40) % 2001 - 1000) / 500.0f;
  }
  return v;
}

}  // namespace frugal::test
