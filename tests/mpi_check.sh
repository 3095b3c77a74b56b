#!/usr/bin/env bash
# Checks how a job of ranks ends when one of them fails: tests/mpi_check.sh CHECK MPIRUN PATH/TO/frugal_mpi_tests
# Each check runs a failure scenario of tests/mpi/test_mpi_failures.cpp under mpirun with 2 ranks and
# checks the exit code, the message the surviving rank printed, and that it all ended quickly (the
# scenarios' watchdog timeout is 2 s). The environment lets mpirun run as root (tests/CMakeLists.txt).
set -euo pipefail
check=$1
mpirun=$2
tests=$3

source "$(dirname "$0")/cli_lib.sh"

# The bound on a scenario's run: the 2 s timeout, MPI's start on a busy 2-core machine, and margin.
max_seconds=20

# run_scenario NAME [MPIRUN OPTIONS...]: runs it, keeps $code, $out (stdout and stderr) and $seconds.
run_scenario() {
  local name=$1; shift
  local start=$SECONDS
  set +e
  out=$("$mpirun" -np 2 --oversubscribe "$@" "$tests" --no-skip --force-colors=false -tc="scenario $name*" 2>&1)
  code=$?
  set -e
  seconds=$((SECONDS - start))
  [ "$seconds" -le "$max_seconds" ] || fail "scenario $name took ${seconds} s (at most ${max_seconds} s): $out"
}

case $check in
  rank_dies)
    # Rank 1 is killed (SIGKILL) in the middle of the all_reduce loop. mpirun notices, names it, and
    # ends rank 0 with SIGTERM; rank 0's line names the collective it was in.
    run_scenario rank_dies
    [ "$code" -ne 0 ] || fail "mpirun exited 0 after a rank was killed: $out"
    grep -q "process rank 1 .* exited on signal 9" <<<"$out" || fail "mpirun did not name the killed rank: $out"
    grep -Eq "frugal rank 0: ended by mpirun \(SIGTERM\) while all_reduce #[0-9]+ of 1024 f32 was in flight" <<<"$out" \
      || fail "rank 0 did not name the collective it was in: $out"
    ;;
  rank_dies_recovery)
    # With --enable-recovery mpirun leaves rank 0 alone: its watchdog fails the all_reduce with a
    # DistributedError, and mpi_abort ends the job. (OpenMPI 4.1's mpirun exits 0 in this mode even
    # after MPI_Abort, so the exit code is not checked here.)
    run_scenario rank_dies --enable-recovery
    grep -Eq "rank 0: DistributedError: all_reduce #[0-9]+ of 1024 f32 did not complete within 2 s on rank 0: a rank died" <<<"$out" \
      || fail "rank 0 did not report the all_reduce it waited for: $out"
    ;;
  rank_stalls)
    # Rank 1 never calls the last all_reduce: rank 0's watchdog fails it, rank 0 reports and aborts
    # the job with exit code 3 (what mpi_abort was given).
    run_scenario rank_stalls
    [ "$code" -eq 3 ] || fail "mpirun exited $code, expected 3 (mpi_abort's code): $out"
    grep -q "rank 0: DistributedError: all_reduce #2 of 1024 f32 did not complete within 2 s on rank 0" <<<"$out" \
      || fail "rank 0 did not report the stalled all_reduce: $out"
    grep -q "MPI_ABORT was invoked on rank 0" <<<"$out" || fail "the job was not aborted: $out"
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check (${seconds} s, mpirun exit $code)"
