// The benchmarks' timing harness (bench/bench.h): the order alternating runs are taken in, and the
// ratios read from them. Fed runs that record their calls and return made-up seconds, never timed.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "core/error.h"

using namespace frugal;
using bench::AlternatingTimes;

TEST_CASE("alternating_seconds: runs take turns, each timed run right after an untimed one of its own") {
  std::string order;
  int calls[2] = {0, 0};
  const auto run = [&](int index) {  // returns its own call count: which call's value was kept
    return std::function<double()>([&, index] {
      order += static_cast<char>('a' + index);
      return static_cast<double>(++calls[index]);
    });
  };
  const AlternatingTimes times = bench::alternating_seconds({run(0), run(1)}, 3, 0.0, bench::Warm::every_run);
  CHECK(order == "ab" "aabb" "aabb" "aabb");  // a warm-up round, then three rounds
  // Call 1 is the warm-up; then each round's untimed call and its timed one: 2 and 3, 4 and 5, 6 and 7.
  CHECK(times.seconds == std::vector<std::vector<double>>{{3.0, 5.0, 7.0}, {3.0, 5.0, 7.0}});
}

TEST_CASE("median_ratio: each round's ratio, the median over rounds, not a ratio of medians") {
  // Round 2 ran while the machine was 4x slower for both runs: its ratio is still 2. A ratio of the
  // medians (2.2 over 1) mixes rounds.
  const AlternatingTimes times{{{2.0, 8.0, 2.2, 2.0, 6.0}, {1.0, 4.0, 1.0, 1.0, 1.0}}};
  CHECK(times.median_ratio(0, 1) == doctest::Approx(2.0));  // ratios 2, 2, 2.2, 2, 6
  CHECK(times.median_ratio(1, 0) == doctest::Approx(0.5));  // ratios 0.5, 0.5, 0.45, 0.5, 0.17
  CHECK(times.medians()[0] / times.medians()[1] == doctest::Approx(2.2));
  const std::vector<double> over_second = times.median_ratios(1);
  CHECK(over_second.size() == 2);
  CHECK(over_second[0] == doctest::Approx(2.0));
  CHECK(over_second[1] == doctest::Approx(1.0));
  CHECK_THROWS_AS(times.median_ratio(0, 2), Error);
  CHECK_THROWS_AS(times.median_ratios(5), Error);
}
