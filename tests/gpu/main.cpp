// The GPU test suite's entry point. Without a usable CUDA device the suite does not pretend: it
// prints why and exits with kSkipCode, which CTest reports as "Skipped" (never "Passed"). With
// FRUGAL_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it) a missing device is a failure instead. With a
// device, run_cases (tests/run_cases.cpp) counts a case that cannot run on it (FRUGAL_SKIP) as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/cuda_status.h"
#include "tests/skip.h"
#include "kernels/cpu_runtime.h"

namespace {
using frugal::test::kSkipCode;

// doctest's listing options run no test, so they must work without a GPU (CTest discovers the
// cases by listing them at build time).
bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0 ||
        std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)
      return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  if (!only_lists(argc, argv) && !frugal::cuda_available()) {
    const char* require = std::getenv("FRUGAL_REQUIRE_GPU");
    const bool required = require && std::strcmp(require, "1") == 0;
    std::cerr << (required ? "FAILED" : "SKIPPED") << ": GPU suite needs a usable CUDA device: "
              << frugal::cuda_status().reason << (required ? " (FRUGAL_REQUIRE_GPU=1)" : "") << "\n";
    return required ? EXIT_FAILURE : kSkipCode;
  }
  return frugal::test::run_cases(argc, argv);
}
