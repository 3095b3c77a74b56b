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
  alloc_replay)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    printf '# two 1 KiB blocks alive at once\n+ a 1KiB\n+ b 1024 0 activation\n- a\n- b\n' >"$dir/ok.txt"
    printf '+ a 1MiB\n+ b 1MiB\n\n+ c 3MiB\n' >"$dir/oom.txt"
    printf '+ a 1\n- a\n- a\n' >"$dir/bad.txt"
    printf 'Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x10,4096,0x0\n1,0.2,free,0x10,4096,0x0\n' >"$dir/rmm.csv"
    expect_exit 0 "$frugal" alloc-replay "$dir/ok.txt" --json --expandable off
    python3 - "$out" <<'PY' || fail "alloc-replay --json is not the expected JSON: $out"
import json, sys
r = json.loads(sys.argv[1])
assert list(r) == ["events", "peak_live_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "backing_allocs",
                   "backing_frees", "alloc_retries", "num_ooms", "final_allocated_bytes", "final_reserved_bytes",
                   "ns_per_op"], list(r)
assert (r["events"], r["peak_live_bytes"], r["peak_allocated_bytes"]) == (4, 2048, 2048), r
assert r["peak_reserved_bytes"] == 2 << 20 and r["backing_allocs"] == 1 and r["num_ooms"] == 0, r
PY
    expect_exit 0 "$frugal" alloc-replay "$dir/ok.txt"
    grep -q 'peak reserved .*1024.000x peak live' <<<"$out" || fail "no peak reserved ratio in: $out"
    expect_exit 0 "$frugal" alloc-replay "$dir/rmm.csv" --allocator direct --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["backing_allocs"] == 1 and r["peak_reserved_bytes"] == 4096, r' <<<"$out" \
      || fail "RMM log not replayed directly: $out"
    # Stopped by an OOM: exit 3, and the JSON still says where.
    expect_exit 3 "$frugal" alloc-replay "$dir/oom.txt" --limit 4MiB --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["oom"]["event"] == 4 and r["oom"]["requested_bytes"] == 3 << 20 and r["events"] == 2, r' <<<"$out" \
      || fail "no oom at line 4 in: $out"
    # Bad input: exit 2 and one line naming FILE:LINE.
    expect_exit 2 "$frugal" alloc-replay "$dir/bad.txt"
    [ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected a one-line error, got: $err"
    grep -q "^frugal alloc-replay: $dir/bad.txt:3: free of unknown id 'a'" <<<"$err" || fail "no FILE:LINE in: $err"
    expect_exit 2 "$frugal" alloc-replay "$dir/missing.txt"
    grep -q "missing.txt:0: cannot open" <<<"$err" || fail "missing file not named: $err"
    expect_exit 2 "$frugal" alloc-replay "$dir/ok.txt" --limit lots
    grep -q "^frugal alloc-replay: --limit: " <<<"$err" || fail "bad --limit not named: $err"
    expect_exit 2 "$frugal" alloc-replay "$dir/ok.txt" --allocator magic
    expect_exit 2 "$frugal" alloc-replay
    expect_exit 0 "$frugal" alloc-replay --training-trace --batch 4 --steps 2 --json
    ;;
  bench_alloc_json)
    expect_exit 0 "$frugal" bench alloc --json --quick --device cpu
    python3 - "$out" <<'PY' || fail "bench alloc --json is not as expected: $out"
import json, sys
report = json.loads(sys.argv[1])
assert report["bench"] == "alloc" and report["device"] == "cpu"
cases = {}
for r in report["results"]:
    assert set(r) == {"case", "impl", "value", "unit", "higher_is_better"}, r
    assert r["value"] > 0 and r["higher_is_better"] is False, r
    cases.setdefault(r["case"], {})[r["impl"]] = r
for case in ("training_trace", "random_mix"):
    assert {"caching", "direct"} <= set(cases[case]), cases[case]
    assert all(r["unit"] == "ns/op" for r in cases[case].values())
ratios = cases["peak_reserved_over_live"]
assert set(ratios) == {"caching-expandable", "pytorch-rules"}, ratios
assert all(r["unit"] == "ratio" and r["value"] >= 1.0 for r in ratios.values()), ratios
PY
    ;;
  bench_ops_json)
    expect_exit 0 "$frugal" bench ops --json --quick --device cpu
    python3 - "$out" <<'PY' || fail "bench ops --json is not as expected: $out"
import json, sys
report = json.loads(sys.argv[1])
assert report["bench"] == "ops" and report["device"] == "cpu"
impls = {}
for r in report["results"]:
    assert set(r) == {"case", "impl", "value", "unit", "higher_is_better"}, r
    assert r["value"] > 0, r
    impls.setdefault(r["case"].split("_")[0], set()).add(r["impl"])
assert impls["gemm"] == {"blocked", "openblas"}, impls
for family in ("relu", "sum", "conv3x3", "depthwise3x3", "cross", "max", "batch"):
    assert family in impls, (family, impls)
assert impls["conv3x3"] == {"native"} and impls["depthwise3x3"] == {"native"}, impls
PY
    # The CUDA convolution choice for a run: a bad value is a one-line error, not a silent default.
    expect_exit 2 env FRUGAL_CONV_IMPL=winograd "$frugal" bench ops --quick --device cpu
    grep -q "unknown convolution implementation 'winograd'" <<<"$err" || fail "bad FRUGAL_CONV_IMPL not named: $err"
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
