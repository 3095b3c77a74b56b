#!/usr/bin/env bash
# Checks one behaviour of the frugal command: tests/cli_check.sh CHECK PATH/TO/frugal
# Prints what it compared and exits non-zero on the first mismatch.
set -euo pipefail
check=$1
frugal=$2

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_exit CODE COMMAND...: runs COMMAND, checks its exit code, keeps stdout/stderr in $out/$err.
expect_exit() {
  local want=$1; shift
  set +e
  out=$("$@" 2>/tmp/frugal-cli-err.$$); local got=$?
  set -e
  err=$(cat /tmp/frugal-cli-err.$$); rm -f /tmp/frugal-cli-err.$$
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want (stderr: $err)"
}

case $check in
  info)
    expect_exit 0 "$frugal" info
    grep -q '^frugal [0-9]' <<<"$out" || fail "no version line in: $out"
    grep -q '^CPU: .* threads' <<<"$out" || fail "no CPU line in: $out"
    # Either devices are listed, or the reason none is usable is given.
    grep -Eq '^devices: +([0-9]+ usable|none usable \(.+\))$' <<<"$out" || fail "no device line in: $out"
    ;;
  info_json)
    expect_exit 0 "$frugal" info --json
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["version"]; assert "usable" in d["cuda"]; assert d["cpu"]["threads"] >= 1' <<<"$out" \
      || fail "info --json is not the expected JSON: $out"
    ;;
  bad_args)
    expect_exit 2 "$frugal" --no-such-flag
    expect_exit 2 "$frugal" no-such-command
    expect_exit 2 "$frugal" info --bogus
    [ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected a one-line error, got: $err"
    expect_exit 2 "$frugal" bench no-such-bench
    expect_exit 2 "$frugal" bench tensor --device gpu7
    grep -q "unknown device 'gpu7'" <<<"$err" || fail "bad device not named: $err"
    expect_exit 0 "$frugal" --help
    expect_exit 0 "$frugal" info --help
    ;;
  bench_json)
    expect_exit 0 "$frugal" bench tensor --json --quick --device cpu
    python3 - "$out" <<'PY' || fail "bench --json does not follow the schema: $out"
import json, sys
report = json.loads(sys.argv[1])
assert set(report) == {"bench", "device", "threads", "results"}, report.keys()
assert report["bench"] == "tensor" and report["device"] == "cpu" and report["threads"] >= 1
cases = {}
for r in report["results"]:
    assert set(r) == {"case", "impl", "value", "unit", "higher_is_better"}, r
    assert r["value"] > 0 and isinstance(r["higher_is_better"], bool)
    cases.setdefault(r["case"], set()).add(r["impl"])
# every case measures frugal beside at least one peer on the CPU
for case, impls in cases.items():
    assert "frugal" in impls and len(impls) >= 2, (case, impls)
PY
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
