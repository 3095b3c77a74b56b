// The CPU test suite's entry point (doctest). Every case here runs on any machine, or says why it
// cannot with FRUGAL_SKIP (tests/skip.h); run_cases (tests/run_cases.cpp) reports a run of skipped
// cases as Skipped and a filter that selects nothing as a failure.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "kernels/cpu_runtime.h"
#include "tests/skip.h"

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  return frugal::test::run_cases(argc, argv);
}
