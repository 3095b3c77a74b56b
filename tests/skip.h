// Skipping honestly. A case that cannot run here (running as root, a Debian package or a source
// folder missing) calls FRUGAL_SKIP("why"): the case ends, the reason is printed, and the case is
// counted as skipped. CTest runs each case in a process of its own; a process in which every case
// that ran skipped itself exits kSkipCode, which CTest (SKIP_RETURN_CODE) reports as "Skipped",
// never "Passed". A run of many cases exits as usual and its summary counts the skips.
// run_cases (tests/run_cases.cpp) is every suite's doctest run with these rules.
// Not here: skipping a whole suite (tests/gpu/main.cpp does that before any case runs).
#pragma once

namespace frugal::test {

constexpr int kSkipCode = 77;  // the automake convention for "skipped", set as SKIP_RETURN_CODE in CTest

void mark_skipped(const char* reason);  // the current case skips; says why on stderr
int skipped_cases();                    // how many cases of this run skipped themselves

// doctest's run of the cases argv selects, exiting kSkipCode when every case that ran skipped itself
// and failing when a filter by name selects no case. Every suite's main returns it.
int run_cases(int argc, char** argv);

}  // namespace frugal::test

// Ends the current case (a return from the TEST_CASE's body) and counts it as skipped.
#define FRUGAL_SKIP(reason)                  \
  do {                                       \
    ::frugal::test::mark_skipped(reason);    \
    return;                                  \
  } while (0)
