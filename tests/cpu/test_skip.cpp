// FRUGAL_SKIP (tests/skip.h) itself. This case is the probe of tests/skip_check.sh (the CTest test
// cpu.skip_reports_skipped), which runs it with FRUGAL_TEST_SKIP_PROBE set and expects CTest's skip
// code, and without it expects a pass.
#include <doctest/doctest.h>

#include <cstdlib>

#include "tests/skip.h"

TEST_CASE("FRUGAL_SKIP: a case that cannot run here says why and ends as skipped") {
  if (std::getenv("FRUGAL_TEST_SKIP_PROBE") != nullptr) FRUGAL_SKIP("FRUGAL_TEST_SKIP_PROBE is set");
  CHECK(frugal::test::kSkipCode == 77);  // the SKIP_RETURN_CODE tests/CMakeLists.txt gives CTest
}
