// Benchmarks reached through `frugal bench NAME [--json]`. A benchmark measures cases; each case is
// measured for frugal and for its peers (memcpy, a naive loop, cuBLAS, ...) in the same run, so
// their ratio means something on a noisy machine. With --json the report is one object:
//   {"bench": NAME, "device": "...", "threads": N,
//    "results": [{"case": "...", "impl": "...", "value": X, "unit": "...", "higher_is_better": true}, ...]}
// Not here: pass/fail thresholds. Targets compare ratios from one report (docs/benchmarks.md).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/device.h"

namespace frugal::bench {

struct Result {
  std::string case_name;
  std::string impl;
  double value = 0.0;
  std::string unit;
  bool higher_is_better = true;
};

struct Options {
  Device device;
  bool quick = false;  // small sizes and few repeats: for tests of the harness, not for numbers
};

struct Benchmark {
  std::string name;
  std::string description;
  std::function<std::vector<Result>(const Options&)> run;
};

const std::vector<Benchmark>& all_benchmarks();

// Median wall time in seconds of `fn` over repeated runs (after one warm-up run), repeating until
// both `min_runs` runs and `min_seconds` of measuring have passed. `sync` runs after each call
// (it waits for the GPU when timing device work).
double median_seconds(const std::function<void()>& fn, const std::function<void()>& sync, int min_runs, double min_seconds);
// The middle value (the upper of the two middle ones for an even count); an Error for no values.
double median(std::vector<double> values);

}  // namespace frugal::bench
