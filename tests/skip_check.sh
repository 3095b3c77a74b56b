#!/usr/bin/env bash
# Checks that a CPU case which skips itself reaches CTest as Skipped, never Passed:
#   tests/skip_check.sh PATH/TO/frugal_tests
# Alone, a skipped case exits 77 (CTest's SKIP_RETURN_CODE) and says why; beside a case that
# passes, the run exits 0 and counts the skip.
set -uo pipefail
tests=$1
probe='FRUGAL_SKIP: a case that cannot run here says why and ends as skipped'
fail() { echo "FAIL: $*" >&2; exit 1; }

err=$(FRUGAL_TEST_SKIP_PROBE=1 "$tests" -tc="$probe" 2>&1 >/dev/null); code=$?
[ "$code" -eq 77 ] || fail "a skipping case exited $code, expected 77: $err"
grep -q "SKIPPED: $probe: FRUGAL_TEST_SKIP_PROBE is set" <<<"$err" || fail "the reason is not printed: $err"

"$tests" -tc="$probe" >/dev/null 2>&1; code=$?
[ "$code" -eq 0 ] || fail "the probe without FRUGAL_TEST_SKIP_PROBE exited $code, expected 0"

err=$(FRUGAL_TEST_SKIP_PROBE=1 "$tests" -tc="$probe,set_data*" 2>&1 >/dev/null); code=$?
[ "$code" -eq 0 ] || fail "a run with one pass and one skip exited $code, expected 0: $err"
grep -q "1 of 2 case(s) skipped themselves" <<<"$err" || fail "the skip is not counted: $err"
echo "skip_check: skipped alone -> 77, beside a pass -> 0 with the skip counted"

# A name that selects no case (as CTest passes one it cut at a ';') fails rather than passing empty.
err=$("$tests" -tc='no case has this name' 2>&1 >/dev/null); code=$?
[ "$code" -ne 0 ] || fail "a filter that selects no case exited 0"
grep -q "no test case has the name asked for" <<<"$err" || fail "no reason given for selecting nothing: $err"
