// Benchmarks reached through `frugal bench NAME [--json]`. A benchmark measures cases; each case is
// measured for frugal and for its peers (memcpy, a naive loop, cuBLAS, ...) in the same run, so
// their ratio means something on a noisy machine. With --json the report is one object:
//   {"bench": NAME, "device": "...", "threads": N,
//    "results": [{"case": "...", "impl": "...", "value": X, "unit": "...", "higher_is_better": true}, ...],
//    "notes": ["why a peer or a row is absent", ...]}          (only when there are notes)
// Not here: pass/fail thresholds. Targets compare ratios from one report (docs/benchmarks.md).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
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
  int threads = 1;     // the CPU threads frugal runs on (already set), and that a peer process gets
  // Python interpreters that `bench train` runs its PyTorch peers in (--peer-python); empty: its defaults.
  std::vector<std::string> peer_pythons;
};

// What a benchmark returns: its results, and one line for each peer or row it had to leave out.
struct Report {
  std::vector<Result> results;
  std::vector<std::string> notes;
  // false on the ranks other than 0 of a benchmark run by mpirun: rank 0 reports for them all.
  bool this_rank_reports = true;
  Report(std::vector<Result> r = {}, std::vector<std::string> n = {}) : results(std::move(r)), notes(std::move(n)) {}
};

struct Benchmark {
  std::string name;
  std::string description;
  std::function<Report(const Options&)> run;
};

const std::vector<Benchmark>& all_benchmarks();

// Median wall time in seconds of `fn` over repeated runs (after one warm-up run), repeating until
// both `min_runs` runs and `min_seconds` of measuring have passed. `sync` runs after each call
// (it waits for the GPU when timing device work).
double median_seconds(const std::function<void()>& fn, const std::function<void()>& sync, int min_runs, double min_seconds);
// median_seconds of work on `device`, waiting for the GPU after each run when it is one.
double device_median_seconds(const Device& device, const std::function<void()>& fn, int min_runs, double min_seconds);
// The middle value (the upper of the two middle ones for an even count); an Error for no values.
double median(std::vector<double> values);

// How alternating runs are warmed up: one untimed round first, or also an untimed run of the same
// function right before each timed one, for runs that take turns with other processes (Note [A timed
// run follows one of its own] in harness.cpp).
enum class Warm { first_round, every_run };

// The median seconds of each of `runs`, taken in turn (runs[0], runs[1], ..., runs[0], ...) so that
// all of them see the same drift of a shared machine: one warm-up round, then rounds until both
// `min_runs` rounds and `min_seconds` of measuring have passed (the untimed runs of Warm::every_run
// not counted, so each impl gets as many timed runs either way). Each run times itself and returns
// its seconds (a peer process times its own work, without the pipe to it).
std::vector<double> alternating_median_seconds(const std::vector<std::function<double()>>& runs, int min_runs,
                                               double min_seconds, Warm warm = Warm::first_round);
// The same rounds, every time kept: seconds[i][r] is run i's time in round r.
struct AlternatingTimes {
  std::vector<std::vector<double>> seconds;
  std::vector<double> medians() const;
  // Run `run`'s time over run `baseline`'s in the same round, the median over rounds: a drift of the
  // machine's speed that lasts longer than a round cancels in each ratio, unlike in a ratio of medians.
  double median_ratio(std::size_t run, std::size_t baseline) const;
  // median_ratio of every run over `baseline`.
  std::vector<double> median_ratios(std::size_t baseline) const;
};
AlternatingTimes alternating_seconds(const std::vector<std::function<double()>>& runs, int min_runs, double min_seconds,
                                    Warm warm = Warm::first_round);

// A fresh folder under the system's temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix);  // the folder: PREFIX, a dash, six random characters (mkdtemp)
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace frugal::bench
