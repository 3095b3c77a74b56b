#!/usr/bin/env bash
# Checks what runs as a job of ranks under mpirun: tests/mpi_check.sh CHECK MPIRUN PROGRAM
#   rank_*:          PROGRAM is frugal_mpi_tests. Each runs a failure scenario of
#                    tests/mpi/test_mpi_failures.cpp with 2 ranks and checks the exit code, the message
#                    the surviving rank printed, and that it all ended quickly (the scenarios' watchdog
#                    timeout is 2 s).
#   bench_allreduce: PROGRAM is frugal. `frugal bench allreduce --quick --json` with 2 ranks, and alone.
# The environment lets mpirun run as root (tests/CMakeLists.txt).
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
    # the job with exit code 3 (what mpi_abort was given); rank 1 is ended by mpirun.
    run_scenario rank_stalls
    [ "$code" -eq 3 ] || fail "mpirun exited $code, expected 3 (mpi_abort's code): $out"
    grep -q "rank 0: DistributedError: all_reduce #2 of 1024 f32 did not complete within 2 s on rank 0" <<<"$out" \
      || fail "rank 0 did not report the stalled all_reduce: $out"
    # (mpirun's own "MPI_ABORT was invoked" text is not checked: its help printer sometimes fails with
    # "ORTE_ERROR_LOG: Out of resource in show_help.c" and prints nothing; the exit code is the evidence.)
    ;;
  bench_allreduce)
    # With 2 ranks: one JSON report (rank 0's), algbw and busbw of MPI per size (busbw = algbw for
    # n = 2: 2 (n - 1) / n = 1), each beside a memcpy row, and DDP's overlap (a fraction) with its
    # communication, wait and compute times. Alone: a note and the memcpy rows only.
    start=$SECONDS
    expect_exit 0 "$mpirun" -np 2 --oversubscribe "$tests" bench allreduce --quick --json
    seconds=$((SECONDS - start)); code=0
    [ "$(wc -l <<<"$out")" -eq 1 ] || fail "expected one report (rank 0's), got: $out"
    python3 - "$out" <<'PY' || fail "bench allreduce --json under mpirun is not as expected: $out"
import json, sys
report = json.loads(sys.argv[1])
assert report["bench"] == "allreduce" and report["device"] == "cpu", report
rows = {(r["case"], r["impl"]): r["value"] for r in report["results"]}
for size in ("4 KiB", "64 KiB"):
    algbw = rows[(f"all_reduce {size} algbw", "mpi (2 ranks)")]
    busbw = rows[(f"all_reduce {size} busbw", "mpi (2 ranks)")]
    assert algbw > 0 and abs(busbw - algbw) <= 1e-9 * algbw, (size, algbw, busbw)
    assert rows[(f"all_reduce {size} algbw", "memcpy (one local copy)")] > 0, size
overlap = [v for (case, impl), v in rows.items() if case.startswith("ddp mobilenet_v2") and case.endswith("overlap")]
assert len(overlap) == 1 and 0.0 <= overlap[0] <= 1.0, rows
assert len(rows) == 10, rows
PY
    expect_exit 0 "$tests" bench allreduce --quick --json
    grep -q "one rank has nothing to communicate" <<<"$err" || fail "one process: no note saying why: $err"
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert {r["impl"] for r in d["results"]} == {"memcpy (one local copy)"}; assert d["notes"]' <<<"$out" \
      || fail "one process: expected the memcpy rows and a note: $out"
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check (${seconds} s, mpirun exit $code)"
