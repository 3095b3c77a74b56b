// The one optional argument some samples take: how many training steps to run, so a reader can run a
// sample longer than its test does. Shared so that every sample reads it alike and refuses the same
// bad input with the same one-line usage error.
// Not here: anything a sample judges (samples/checks.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace frugal::samples {

// argv[1] as a whole number in [least, most], or `fallback` without one. On anything else (not a
// number, out of range, more arguments) it prints "usage: SAMPLE [STEPS]: ..." to stderr and returns
// nullopt: main then exits 2.
inline std::optional<std::int64_t> steps_argument(int argc, char** argv, const char* sample, std::int64_t least,
                                                  std::int64_t most, std::int64_t fallback) {
  if (argc < 2) return fallback;
  char* end = nullptr;
  const long long steps = std::strtoll(argv[1], &end, 10);
  if (argc == 2 && end != argv[1] && *end == '\0' && steps >= least && steps <= most) return steps;
  std::fprintf(stderr, "usage: %s [STEPS]: STEPS must be a whole number from %lld to %lld\n", sample,
               static_cast<long long>(least), static_cast<long long>(most));
  return std::nullopt;
}

}  // namespace frugal::samples
