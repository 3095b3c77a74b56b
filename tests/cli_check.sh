#!/usr/bin/env bash
# Checks one behaviour of the frugal command: tests/cli_check.sh CHECK PATH/TO/frugal
# Prints what it compared and exits non-zero on the first mismatch, or 77 (ctest: Skipped) when
# what a check needs is not on this machine.
set -euo pipefail
check=$1
frugal=$2

source "$(dirname "$0")/cli_lib.sh"


case $check in
  info)
    expect_exit 0 "$frugal" info
    grep -q '^frugal [0-9]' <<<"$out" || fail "no version line in: $out"
    grep -q '^CPU: .* threads' <<<"$out" || fail "no CPU line in: $out"
    # Either devices are listed, or the reason none is usable is given.
    grep -Eq '^devices: +([0-9]+ usable|none usable \(.+\))$' <<<"$out" || fail "no device line in: $out"
    # FRUGAL_BLAS_THREADS caps OpenBLAS's threads per GEMM for the run (kernels/cpu_runtime.h); a value
    # that is not a number of threads is refused, not ignored.
    expect_exit 0 env FRUGAL_BLAS_THREADS=1 "$frugal" info
    if ! grep -q '^CPU: .*, no OpenBLAS' <<<"$out"; then
      grep -q '^CPU: .*, threads per GEMM 1 (FRUGAL_BLAS_THREADS)' <<<"$out" || fail "the cap is not on the CPU line: $out"
    fi
    expect_exit 2 env FRUGAL_BLAS_THREADS=two "$frugal" info
    expect_one_line_error "^frugal: FRUGAL_BLAS_THREADS='two' is not a number of threads"
    ;;
  info_json)
    expect_exit 0 "$frugal" info --json
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["version"]; assert "usable" in d["cuda"]; assert d["cpu"]["threads"] >= 1' <<<"$out" \
      || fail "info --json is not the expected JSON: $out"
    expect_exit 0 env FRUGAL_BLAS_THREADS=1 "$frugal" info --json
    python3 -c 'import json,sys; assert json.load(sys.stdin)["cpu"]["blas_threads"] == 1' <<<"$out" || fail "no blas_threads 1 in: $out"
    ;;
  bad_args)
    expect_exit 2 "$frugal" --no-such-flag
    expect_exit 2 "$frugal" no-such-command
    expect_exit 2 "$frugal" info --bogus
    [ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected a one-line error, got: $err"
    expect_exit 2 "$frugal" bench no-such-bench
    expect_exit 2 "$frugal" bench tensor --device gpu7
    grep -q "unknown device 'gpu7'" <<<"$err" || fail "bad device not named: $err"
    # A device that parses but is not there is bad input too: one line naming it, no source location.
    expect_exit 2 "$frugal" bench tensor --device cuda:99
    grep -Eq "^frugal bench: --device cuda:99: cuda:99 (is not usable: .+|does not exist: [0-9]+ device\(s\) visible)$" <<<"$err" \
      || fail "missing device not explained in one line: $err"
    ! grep -q '\.cpp:[0-9]' <<<"$err" || fail "a source location reached the user: $err"
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
    # An OOM caused by segment rounding alone says so: 3 MiB fits an empty 8 MiB device, its 20 MiB segment does not.
    printf '+ a 3MiB\n- a\n' >"$dir/rounding.txt"
    expect_exit 3 "$frugal" alloc-replay "$dir/rounding.txt" --limit 8MiB --expandable off
    grep -q 'Hint: rounding: the request (3.00 MiB) fits in the 8.00 MiB free, but fixed segments round it up to a 20.00 MiB segment' <<<"$out" \
      || fail "the rounding is not named as the cause: $out"
    ! grep -q 'real shortage' <<<"$out" || fail "a rounding OOM called a real shortage: $out"
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
    # The training trace, recorded from MobileNetV2 at a small size: it replays to its end and ends
    # with the parameters and momentum still alive (the trace never frees them).
    expect_exit 0 "$frugal" alloc-replay --training-trace --batch 4 --steps 6 --resolution 32 --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["num_ooms"] == 0 and r["events"] > 6 * 1000 and r["final_allocated_bytes"] > 2 * 14_000_000, r' <<<"$out" \
      || fail "the training trace did not replay to the end with the model's state alive: $out"
    expect_exit 2 "$frugal" alloc-replay "$dir/ok.txt" --resolution 64
    expect_one_line_error "^frugal alloc-replay: --batch, --steps and --resolution describe --training-trace$"
    ;;
  bench_alloc_json)
    expect_exit 0 "$frugal" bench alloc --json --quick --device cpu
    check_bench_report alloc <<'PY'
assert all(not r["higher_is_better"] for c in cases.values() for r in c.values()), cases
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
    check_bench_report ops <<'PY'
impls = {}
for case, results in cases.items():
    impls.setdefault(case.split("_")[0], set()).update(results)
assert impls["gemm"] == {"blocked", "openblas"}, impls
for family in ("relu", "sum", "conv3x3", "depthwise3x3", "cross", "max", "batch"):
    assert family in impls, (family, impls)
assert impls["conv3x3"] == {"native"} and impls["depthwise3x3"] == {"native"}, impls
assert impls["pointwise"] == {"native", "openblas_gathered"}, impls
assert impls["dropout"] == {"frugal", "one_block"}, impls
PY
    # The CUDA convolution choice for a run: a bad value is a one-line error, not a silent default.
    expect_exit 2 env FRUGAL_CONV_IMPL=winograd "$frugal" bench ops --quick --device cpu
    grep -q "unknown convolution implementation 'winograd'" <<<"$err" || fail "bad FRUGAL_CONV_IMPL not named: $err"
    ;;
  bench_loader_json)
    expect_exit 0 "$frugal" bench loader --json --quick --device cpu
    check_bench_report loader <<'PY'
assert set(cases["large_shard"]) == {"loader", "raw_read"}, cases
assert all(r["unit"] == "MB/s" for r in cases["large_shard"].values()), cases
assert set(cases["peak_rss"]) == {"streaming", "in_memory", "streaming_whole_shard"}, cases
assert all(r["unit"] == "MB" and not r["higher_is_better"] for r in cases["peak_rss"].values()), cases
if os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
    assert set(cases["fashion_mnist"]) == {"loader", "no_workers"}, cases
PY
    ;;
  bench_saving_json)
    # Every way of saving for both stems, a speed, a step-time ratio and a saved-bytes row each; fewer
    # bytes than standard; the standard step over itself is 1 exactly.
    expect_exit 0 "$frugal" bench saving --json --quick --device cpu
    check_bench_report saving <<PY
ways = {"standard", "bn_from_output", "bn_from_output_bf16", "bn_from_output_bf16_bit_masks", "bn_from_output_int8_bit_masks"}
for suffix in ("", "_cifar"):
    speed, saved = cases["mobilenet_v2" + suffix + "_b64"], cases["activation_bytes_per_sample" + suffix]
    ratio = cases["step_time_over_standard" + suffix]
    assert set(speed) == ways and set(saved) == ways and set(ratio) == ways, (speed, saved, ratio)
    assert all(r["unit"] == "img/s" and r["higher_is_better"] for r in speed.values()), speed
    assert all(r["unit"] == "x" and not r["higher_is_better"] and r["value"] > 0 for r in ratio.values()), ratio
    assert ratio["standard"]["value"] == 1.0, ratio
    assert all(r["unit"] == "MiB/sample" and not r["higher_is_better"] for r in saved.values()), saved
    assert saved["bn_from_output"]["value"] <= 0.6 * saved["standard"]["value"], saved
    assert saved["bn_from_output_bf16_bit_masks"]["value"] <= 0.35 * saved["standard"]["value"], saved
assert len(cases) == 6, sorted(cases)
PY
    ;;
  bench_train_json)
    # PyTorch's rows are there exactly when the peer's interpreter can import torch, and a note says
    # which torch each row ran, or why a peer is missing. Debian's /usr/bin/python3 is the peer here
    # (--peer-python), with python3-torch where it is installed.
    expect_exit 0 "$frugal" bench train --json --quick --device cpu --threads 1 --peer-python /usr/bin/python3
    # A training step keeps the same tensors on any thread count: the 2-thread run below must report
    # the same peaks (the bench's own scaling loads are never alive during a speed case).
    training_peaks=$(python3 -c 'import json, sys
rows = json.loads(sys.argv[1])["results"]
print(sorted((r["case"], r["value"]) for r in rows if r["case"] in ("mobilenet_v2_b64_peak", "mobilenet_v2_cifar_b64_peak")))' "$out")
    if /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then torch=1; else torch=0; fi
    check_bench_report train <<PY
assert report["threads"] == 1, report
with_torch = $torch == 1
notes = report.get("notes", [])
assert all(isinstance(n, str) for n in notes), notes
if with_torch:  # --quick leaves torch.compile out (it takes a minute): the newest torch eager, both layouts
    assert notes[0].startswith("pytorch: torch ") and notes[0].endswith("(/usr/bin/python3), channels_last, eager"), notes
    assert notes[1].startswith("pytorch_nchw: torch ") and notes[1].endswith(", nchw, eager"), notes
    assert notes[2].startswith("pytorch has no peak") and len(notes) == 3, notes
else:
    assert len(notes) == 1 and notes[0].startswith("pytorch left out from /usr/bin/python3"), notes
speed_impls = {"frugal", "pytorch", "pytorch_nchw"} if with_torch else {"frugal"}
for stem in ("mobilenet_v2", "mobilenet_v2_cifar"):
    for kind in ("_b64", "_b64_eval"):
        assert set(cases[stem + kind]) == speed_impls, (stem + kind, cases[stem + kind])
        assert all(r["unit"] == "img/s" and r["higher_is_better"] for r in cases[stem + kind].values())
        peak = cases[stem + kind + "_peak"]
        assert set(peak) == {"frugal"} and peak["frugal"]["unit"] == "MiB" and not peak["frugal"]["higher_is_better"], peak
for suffix in ("", "_cifar"):
    saved = cases["activation_bytes_per_sample" + suffix]
    assert set(saved) == ({"frugal", "pytorch"} if with_torch else {"frugal"}), saved
    assert all(r["unit"] == "MiB/sample" for r in saved.values()), saved
assert len(cases) == 10, sorted(cases)  # --threads 1: no _scaling or _round_trip rows
PY
    grep -q "^frugal bench train: pytorch" <<<"$err" || fail "the notes are not on stderr: $err"
    if [ "$torch" -eq 1 ]; then
      # The same interpreter twice: the first is the newest (a tie keeps the order), the second is an
      # older peer, named by its version, channels_last.
      expect_exit 0 "$frugal" bench train --json --quick --device cpu --threads 1 \
        --peer-python /usr/bin/python3 --peer-python /usr/bin/python3
      version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__.split("+")[0])')
      check_bench_report train <<PY
assert set(cases["mobilenet_v2_b64"]) == {"frugal", "pytorch", "pytorch_nchw", "pytorch_$version"}, cases["mobilenet_v2_b64"]
assert set(cases["activation_bytes_per_sample"]) == {"frugal", "pytorch"}, cases["activation_bytes_per_sample"]
PY
    fi
    # With two threads: each stem's 1-thread over 2-thread ratio, training and eval, and the GEMM's,
    # the triad's and (with torch) PyTorch's from the same rounds; each speed case's round trip
    # between the two threads' cores.
    expect_exit 0 "$frugal" bench train --json --quick --device cpu --threads 2 --peer-python /usr/bin/python3
    check_bench_report train <<PY
assert report["threads"] == 2, report
scaling_impls = {"frugal", "openblas_gemm_1024", "triad_64mib"} | ({"pytorch"} if $torch == 1 else set())
for stem in ("mobilenet_v2", "mobilenet_v2_cifar"):
    for case in (stem + "_b64_scaling", stem + "_b64_eval_scaling"):
        scaling = cases[case]
        assert set(scaling) == scaling_impls, scaling
        assert all(r["unit"] == "x" and r["higher_is_better"] for r in scaling.values()), scaling
    for case in (stem + "_b64_round_trip", stem + "_b64_eval_round_trip"):  # where the two threads' cores sit
        (row,) = cases[case].values()
        assert row["impl"] == "host" and row["unit"] == "ns" and not row["higher_is_better"], row
        assert 1 < row["value"] < 1e6, row
assert len(cases) == 18, sorted(cases)
peaks = sorted((c, cases[c]["frugal"]["value"]) for c in ("mobilenet_v2_b64_peak", "mobilenet_v2_cifar_b64_peak"))
assert peaks == $training_peaks, (peaks, $training_peaks)
PY
    # Without torch (an import that fails, as on a machine without python3-torch), and with the
    # default interpreters (scripts/peers.sh's environment, Debian's): frugal's rows and a note for each.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    echo 'raise ImportError("no torch here")' >"$dir/torch.py"
    expect_exit 0 env PYTHONPATH="$dir" "$frugal" bench train --json --quick --device cpu --threads 1
    python3 - "$out" <<'PY' || fail "bench train without torch: $out"
import json, sys
report = json.loads(sys.argv[1])
notes = report["notes"]
assert len(notes) == 2 and all(n.startswith("pytorch left out from ") for n in notes), notes
assert notes[0].endswith("/peers-venv/bin/python not found") or notes[0].endswith("cannot import torch: no torch here"), notes
assert notes[1] == "pytorch left out from /usr/bin/python3 cannot import torch: no torch here", notes
assert {r["impl"] for r in report["results"]} == {"frugal"} and len(report["results"]) == 10, report["results"]
PY
    # A peer runs in the user's environment, not with the settings frugal made for itself (its
    # GOMP_SPINCOUNT; the passive waiting it once set halved PyTorch's speed): this "python" reports
    # what it was given.
    printf '#!/bin/sh\necho "unavailable OMP_WAIT_POLICY=${OMP_WAIT_POLICY-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT-unset}"\n' >"$dir/python"
    chmod +x "$dir/python"
    for policy in "" active; do   # "": unset (scripts/test.sh sets passive for the suites)
      expect_exit 0 env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ${policy:+OMP_WAIT_POLICY=$policy} "$frugal" bench train \
        --json --quick --threads 1 --peer-python "$dir/python"
      grep -q "^frugal bench train: pytorch left out from $dir/python cannot import torch: OMP_WAIT_POLICY=${policy:-unset} GOMP_SPINCOUNT=unset$" <<<"$err" ||
        fail "the peer's environment (OMP_WAIT_POLICY=${policy:-unset}, GOMP_SPINCOUNT unset expected): $err"
    done
    # --peer-python is a file, and for this benchmark only.
    expect_exit 2 "$frugal" bench train --quick --peer-python "$dir/no-such-python"
    grep -q -- "--peer-python" <<<"$err" || fail "--peer-python not named: $err"
    expect_exit 2 "$frugal" bench ops --quick --peer-python /usr/bin/python3
    [ "$err" = "frugal bench: --peer-python is for \`frugal bench train\` only" ] || fail "--peer-python on bench ops: $err"
    for threads in 0 -3 many 100000; do
      expect_exit 2 "$frugal" bench train --quick --device cpu --threads "$threads"
      [ "$(wc -l <<<"$err")" -eq 1 ] || fail "--threads $threads: expected a one-line error, got: $err"
      grep -q -- "--threads" <<<"$err" || fail "--threads $threads not named: $err"
    done
    ;;
  bench_roofline_json)
    # Every layer kind of both stems, measured beside its roofline; the machine's two rates.
    expect_exit 0 "$frugal" bench roofline --json --quick --device cpu --threads 1
    check_bench_report roofline <<'PY'
assert cases["copy_bandwidth"]["frugal"]["unit"] == "GB/s" and cases["copy_bandwidth"]["frugal"]["value"] > 0, cases
assert cases["gemm_rate"]["frugal"]["unit"] == "GFLOP/s" and cases["gemm_rate"]["frugal"]["value"] > 0, cases
kinds = {"stem_forward", "stem_backward_weight", "depthwise_forward", "depthwise_backward_input",
         "depthwise_backward_weight", "pointwise_forward", "pointwise_backward_input", "pointwise_backward_weight",
         "batch_norm_forward", "batch_norm_backward", "batch_norm_eval_forward", "batch_norm_relu6_forward",
         "batch_norm_relu6_backward", "batch_norm_relu6_eval_forward", "layers"}
for stem in ("standard", "cifar"):
    rows = {c[len(stem) + 1:]: r for c, r in cases.items() if c.startswith(stem + "_")}
    assert set(rows) == kinds, (stem, sorted(rows))
    for kind, r in rows.items():
        assert set(r) == {"frugal", "roofline"}, (kind, r)
        assert all(x["unit"] == "ms" and not x["higher_is_better"] and x["value"] > 0 for x in r.values()), (kind, r)
    total = sum(rows[k]["frugal"]["value"] for k in kinds - {"layers"})
    assert abs(total - rows["layers"]["frugal"]["value"]) <= 1e-6 * total, (total, rows["layers"])
PY
    ;;
  pack_inspect_idx)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data idx "$dir"
    expect_exit 0 "$frugal" pack --from idx --images "$dir/images" --labels "$dir/labels" --out "$dir/idx.shard"
    grep -q "^packed 5 records of \[1, 4, 6\] u8 into $dir/idx.shard: .* in [0-9.]* s$" <<<"$out" || fail "no pack summary in: $out"
    expect_exit 0 "$frugal" inspect "$dir/idx.shard" --samples 2
    grep -q "^$dir/idx.shard: frugal shard$" <<<"$out" || fail "no format line in: $out"
    grep -Eq '^  records +5$' <<<"$out" || fail "no record count in: $out"
    grep -Eq '^  sample +\[1, 4, 6\] u8$' <<<"$out" || fail "no sample line in: $out"
    grep -q '^sample 1, label 1:$' <<<"$out" || fail "no sample 1 in: $out"
    grep -q '^    | @    |$' <<<"$out" || fail "no ASCII art of image 1 in: $out"
    expect_exit 0 "$frugal" inspect "$dir/idx.shard" --json
    python3 - "$out" <<'PY' || fail "inspect --json of a shard is not as expected: $out"
import json, sys
r = json.loads(sys.argv[1])
assert list(r) == ["file", "format", "description", "records", "sample_shape", "sample_dtype", "header", "num_classes",
                   "class_counts", "samples"], list(r)
assert (r["format"], r["records"], r["sample_shape"], r["sample_dtype"]) == ("shard", 5, [1, 4, 6], "u8"), r
assert r["num_classes"] == 3 and r["class_counts"] == [2, 2, 1], r
assert r["header"]["version"] == 1 and r["header"]["label_dtype"] == "i64", r["header"]
assert [s["label"] for s in r["samples"]] == [0, 1, 2], r["samples"]
assert r["samples"][2]["ascii"] == ["  @   ", "   @  ", "    @ ", "     @"], r["samples"][2]
PY
    # The same from the gzipped files, decompressed into --cache-dir; and the IDX files themselves.
    expect_exit 0 "$frugal" pack --from idx --images "$dir/images.gz" --labels "$dir/labels.gz" --cache-dir "$dir/cache" --out "$dir/gz.shard"
    cmp -s "$dir/idx.shard" "$dir/gz.shard" || fail "packing the .gz files gave another shard"
    expect_exit 0 "$frugal" inspect "$dir/images.gz" --cache-dir "$dir/cache" --json --samples 1
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert (r["format"], r["records"], r["sample_shape"], r["class_counts"]) == ("idx", 5, [1, 4, 6], None), r; assert r["samples"] == [{"index": 0, "label": None, "ascii": ["@     ", " @    ", "  @   ", "   @  "]}], r' <<<"$out" \
      || fail "inspect --json of IDX images is not as expected: $out"
    expect_exit 0 "$frugal" inspect "$dir/labels" --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert (r["format"], r["records"], r["sample_shape"], r["class_counts"]) == ("idx", 5, [], [2, 2, 1]), r' <<<"$out" \
      || fail "inspect --json of IDX labels is not as expected: $out"
    expect_exit 0 "$frugal" inspect "$dir/labels"
    grep -Eq '^ +2 +1  #{20}$' <<<"$out" || fail "no histogram bar for class 2 in: $out"
    ;;
  pack_inspect_cifar)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data cifar "$dir"
    expect_exit 0 "$frugal" pack --from cifar10 --out "$dir/c10.shard" "$dir/c10.bin" "$dir/c10.bin"
    grep -q "^packed 8 records of \[3, 32, 32\] u8 into $dir/c10.shard" <<<"$out" || fail "no pack summary in: $out"
    expect_exit 0 "$frugal" inspect "$dir/c10.shard" --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert (r["records"], r["sample_shape"], r["num_classes"]) == (8, [3, 32, 32], 10), r; assert r["class_counts"] == [0, 2, 0, 4, 0, 0, 0, 0, 0, 2], r; assert r["samples"][0] == {"index": 0, "label": 3, "ascii": []}, r' <<<"$out" \
      || fail "inspect --json of a CIFAR-10 shard is not as expected: $out"
    expect_exit 0 "$frugal" inspect "$dir/c10.bin" --json
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert (r["format"], r["records"], r["class_counts"][3]) == ("cifar10", 4, 2), r' <<<"$out" \
      || fail "inspect --json of a CIFAR-10 batch is not as expected: $out"
    expect_exit 0 "$frugal" pack --from cifar100 --label coarse --out "$dir/c100.shard" "$dir/c100.bin"
    expect_exit 0 "$frugal" inspect "$dir/c100.shard" --json  # the dataset's 20 coarse classes, though labels stop at 7
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["num_classes"] == 20 and [s["label"] for s in r["samples"]] == [4, 7], r' <<<"$out" \
      || fail "inspect --json of a CIFAR-100 coarse shard is not as expected: $out"
    expect_exit 0 "$frugal" inspect "$dir/c100.bin"
    grep -q "^$dir/c100.bin: CIFAR-100 batch$" <<<"$out" || fail "CIFAR-100 not recognised: $out"
    grep -q '^sample 1, label 71$' <<<"$out" || fail "no fine label of sample 1 in: $out"
    ;;
  pack_inspect_folder)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data folder "$dir"
    expect_exit 0 "$frugal" inspect "$dir/f" --json --size 4x4
    python3 -c 'import json,sys; r=json.load(sys.stdin); assert (r["format"], r["records"], r["sample_shape"], r["classes"], r["class_counts"]) == ("folder", 3, [3, 4, 4], ["cat", "dog"], [2, 1]), r' <<<"$out" \
      || fail "inspect --json of a folder is not as expected: $out"
    expect_exit 0 "$frugal" pack --from folder --size 4x4 --out "$dir/f.shard" "$dir/f"
    grep -q "^packed 3 records of \[3, 4, 4\] u8 into $dir/f.shard" <<<"$out" || fail "no pack summary in: $out"
    expect_exit 0 "$frugal" inspect "$dir/f.shard"
    grep -Eq '^ +0 +2  #{40}$' <<<"$out" || fail "no histogram of the folder's shard in: $out"
    # A corrupt image in the middle of the folder: exit 2 naming it, and nothing under --out.
    cp -r "$dir/f" "$dir/g"
    printf 'not a png' >"$dir/g/cat/ab.png"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/g.shard" "$dir/g"
    expect_one_line_error "^frugal pack: $dir/g/cat/ab.png: not a PNG, JPEG or BMP image \(no known signature\)$"
    [ -z "$(ls "$dir" | grep '^g.shard')" ] || fail "a failed pack left files: $(ls "$dir")"
    ;;
  pack_interrupted)
    # Ctrl-C (or SIGTERM) while packing a folder of large images: exit 128 + the signal, nothing
    # under --out, no temporary file.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data big "$dir"
    for signal in INT:130 TERM:143 HUP:129 QUIT:131; do
      "$frugal" pack --from folder --size 256x256 --out "$dir/big.shard" "$dir/big" >/dev/null 2>"$dir/err" &
      pid=$!
      wait_for_writer "$pid" "$dir" >/dev/null || fail "the pack never started writing"
      kill -"${signal%:*}" "$pid"
      set +e; wait "$pid"; got=$?; set -e
      [ "$got" -eq "${signal#*:}" ] || fail "a pack stopped by SIG${signal%:*} exited $got, expected ${signal#*:} ($(cat "$dir/err"))"
      grep -q "^frugal pack: interrupted after [0-9]* of 1000 records; nothing written to $dir/big.shard$" "$dir/err" \
        || fail "no interruption message: $(cat "$dir/err")"
      [ -z "$(ls "$dir" | grep '^big.shard')" ] || fail "an interrupted pack left files: $(ls "$dir")"
    done
    ;;
  pack_inspect_fashion_mnist)
    data=/usr/share/datasets/fashion-mnist
    if [ ! -f "$data/t10k-images-idx3-ubyte.gz" ]; then echo "SKIPPED: $data not installed (apt-get install dataset-fashion-mnist)"; exit 77; fi
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    expect_exit 0 "$frugal" pack --from idx --images "$data/t10k-images-idx3-ubyte.gz" --labels "$data/t10k-labels-idx1-ubyte.gz" \
      --cache-dir "$dir/cache" --out "$dir/t10k.shard"
    grep -q "^packed 10000 records of \[1, 28, 28\] u8" <<<"$out" || fail "no pack summary in: $out"
    expect_exit 0 "$frugal" inspect "$dir/t10k.shard" --json --samples 1
    python3 - "$out" <<'PY' || fail "inspect --json of Fashion-MNIST t10k is not as expected: $out"
import json, sys
r = json.loads(sys.argv[1])
assert (r["records"], r["sample_shape"], r["sample_dtype"], r["num_classes"]) == (10000, [1, 28, 28], "u8", 10), r
assert r["class_counts"] == [1000] * 10, r["class_counts"]
sample = r["samples"][0]
assert sample["label"] == 9 and len(sample["ascii"]) == 28 and all(len(row) == 28 for row in sample["ascii"]), sample
assert any(c != " " for row in sample["ascii"] for c in row), sample  # the first test image (an ankle boot) is not blank
PY
    ;;
  pack_inspect_bad_input)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data idx "$dir"
    make_data cifar "$dir"
    make_data folder "$dir"
    expect_exit 2 "$frugal" pack --from tiff --out "$dir/x" "$dir/f"
    expect_one_line_error "--from: tiff not in \{idx,cifar10,cifar100,folder\}"
    mkfifo "$dir/fifo"  # opening it to read would wait for a writer forever
    expect_exit 2 timeout 20 "$frugal" inspect "$dir/fifo"
    expect_one_line_error "^frugal inspect: $dir/fifo: is not a regular file or a folder"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 "$dir/f"
    expect_one_line_error "--out is required"
    expect_exit 2 "$frugal" pack --from idx --images "$dir/missing" --labels "$dir/labels" --out "$dir/x"
    expect_one_line_error "^frugal pack: $dir/missing: cannot open"
    expect_exit 2 "$frugal" pack --from idx --images "$dir/c10.bin" --labels "$dir/labels" --out "$dir/x"
    expect_one_line_error "^frugal pack: $dir/c10.bin: wrong magic number"
    expect_exit 2 "$frugal" pack --from idx --images "$dir/labels" --labels "$dir/labels" --out "$dir/x"
    expect_one_line_error "^frugal pack: $dir/labels"
    expect_exit 2 "$frugal" pack --from idx --images "$dir/images" --out "$dir/x"
    expect_one_line_error "^frugal pack: --from idx needs --images and --labels$"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/x" "$dir/images"
    expect_one_line_error "^frugal pack: $dir/images"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/x"
    expect_one_line_error "^frugal pack: --from cifar10 needs one or more batch files$"
    expect_exit 2 "$frugal" pack --from cifar10 --size 4x4 --out "$dir/x" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --size does not apply to --from cifar10$"
    expect_exit 2 "$frugal" pack --from cifar10 --label coarse --out "$dir/x" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --label does not apply to --from cifar10$"
    expect_exit 2 "$frugal" pack --from cifar100 --label medium --out "$dir/x" "$dir/c100.bin"
    for size in 0x4 4x 4x4x4 big -3x4 4X4; do
      expect_exit 2 "$frugal" pack --from folder --size "$size" --out "$dir/x" "$dir/f"
      expect_one_line_error "^frugal pack: --size: expected HEIGHTxWIDTH with positive integers \(e.g. 32x32\), got '$size'$"
    done
    expect_exit 2 "$frugal" pack --from folder --out "$dir/x" "$dir/f"
    expect_one_line_error "^frugal pack: --from folder needs --size HxW$"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/x" "$dir/missing"
    expect_one_line_error "^frugal pack: image folder $dir/missing: does not exist$"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/x" "$dir/f/cat"
    expect_one_line_error "^frugal pack: image folder $dir/f/cat: no class folders"
    mkdir "$dir/f/empty"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/x" "$dir/f"
    expect_one_line_error "^frugal pack: image folder $dir/f: class folder $dir/f/empty holds no .png, .jpg, .jpeg or .bmp file$"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/no/such/folder/x" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: .*$dir/no/such/folder"
    [ ! -e "$dir/x" ] || fail "a failed pack wrote $dir/x"
    expect_exit 2 "$frugal" inspect "$dir/missing"
    expect_one_line_error "^frugal inspect: $dir/missing: does not exist$"
    : >"$dir/empty"
    expect_exit 2 "$frugal" inspect "$dir/empty"
    expect_one_line_error "^frugal inspect: $dir/empty: is empty$"
    printf 'hello, world' >"$dir/text"
    expect_exit 2 "$frugal" inspect "$dir/text"
    expect_one_line_error "^frugal inspect: $dir/text: not a frugal shard, IDX file, CIFAR batch, safetensors file or image folder \(12 bytes, starting 68 65 6c 6c 6f 2c 20 77\)$"
    head -c 100 "$dir/images" >"$dir/short-idx"
    expect_exit 2 "$frugal" inspect "$dir/short-idx"
    expect_one_line_error "^frugal inspect: $dir/short-idx: "
    expect_exit 2 "$frugal" inspect "$dir/f" --size 4
    expect_one_line_error "^frugal inspect: --size: expected HEIGHTxWIDTH"
    expect_exit 2 "$frugal" inspect "$dir/labels" --samples -1
    expect_exit 0 "$frugal" pack --help
    grep -q -- "--from folder --size 32x32" <<<"$out" || fail "pack --help has no examples: $out"
    expect_exit 0 "$frugal" inspect --help
    ;;
  pack_out_refused)
    # --out that is not a new name or a regular file, or that is an input: exit 2, one line naming
    # it, before any work, and what stood there is untouched. (Never the real /dev/null: a FIFO here
    # stands for any special file.)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data idx "$dir"
    make_data cifar "$dir"
    make_data folder "$dir"
    mkfifo "$dir/fifo"
    expect_exit 2 timeout 20 "$frugal" pack --from cifar10 --out "$dir/fifo" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --out $dir/fifo: is a FIFO; frugal writes a new file or replaces a regular one"
    [ -p "$dir/fifo" ] || fail "the FIFO was replaced"
    # A symbolic link is followed: its target gets the shard, the link stays a link; a link to an
    # input is that input.
    ln -s "$dir/target.shard" "$dir/link"
    expect_exit 0 "$frugal" pack --from cifar10 --out "$dir/link" "$dir/c10.bin"
    [ -L "$dir/link" ] && [ -f "$dir/target.shard" ] || fail "the link was not followed to its target"
    expect_exit 0 "$frugal" inspect "$dir/target.shard"
    ln -s "$dir/c10.bin" "$dir/link_in"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/link_in" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --out $dir/link_in: is the input $dir/c10.bin \(the same file\)"
    mkdir "$dir/folder"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/folder" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --out $dir/folder: is a folder"
    cp "$dir/c10.bin" "$dir/c10.orig"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/c10.bin" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --out $dir/c10.bin: is the input $dir/c10.bin \(the same file\); writing it would destroy what is read$"
    (cd "$dir" && expect_exit 2 "$frugal" pack --from cifar10 --out ./c10.bin c10.bin) || exit 1
    ln "$dir/c10.bin" "$dir/hard"
    expect_exit 2 "$frugal" pack --from cifar10 --out "$dir/hard" "$dir/c100.bin" "$dir/c10.bin"
    expect_one_line_error "^frugal pack: --out $dir/hard: is the input $dir/c10.bin"
    cmp -s "$dir/c10.bin" "$dir/c10.orig" || fail "the input was changed"
    expect_exit 2 "$frugal" pack --from idx --images "$dir/images.gz" --labels "$dir/labels.gz" --cache-dir "$dir/cache" --out "$dir/labels.gz"
    expect_one_line_error "^frugal pack: --out $dir/labels.gz: is the input --labels $dir/labels.gz"
    [ ! -e "$dir/cache" ] || fail "the work started before --out was refused: $(ls "$dir/cache")"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/f/dog/c.Png" "$dir/f"
    expect_one_line_error "^frugal pack: --out $dir/f/dog/c.Png: is inside the input folder $dir/f \(where its images are\)"
    # A new file among the images would join them: refused too.
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/f/cat/new.bmp" "$dir/f"
    expect_one_line_error "^frugal pack: --out $dir/f/cat/new.bmp: is inside the input folder $dir/f"
    [ ! -e "$dir/f/cat/new.bmp" ] || fail "a file was written among the images"
    expect_exit 2 "$frugal" pack --from cifar10 --out "" "$dir/c10.bin"
    expect_one_line_error "--out: must not be empty"
    # A regular file that is no input is replaced whole.
    printf 'old' >"$dir/old.shard"
    expect_exit 0 "$frugal" pack --from cifar10 --out "$dir/old.shard" "$dir/c10.bin"
    expect_exit 0 "$frugal" inspect "$dir/old.shard"
    ;;
  pack_killed)
    # SIGKILL, which nothing can catch, while the .gz is inflated into the cache and while the shard
    # is written: nothing is left in the cache or beside --out but whole files. With O_TMPFILE the
    # temporaries have no name; where the file system has none, the next run removes what is left.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    mkdir "$dir/in" "$dir/out"
    make_big_idx "$dir/in"
    pack=("$frugal" pack --from idx --images "$dir/in/images.gz" --labels "$dir/in/labels.gz" --cache-dir "$dir/cache" --out "$dir/out/s.shard")
    leftovers() { find "$dir/cache" "$dir/out" -name '*.tmp-*' 2>/dev/null; }
    for stage in cache out; do
      # A pack that ends before it is caught writing (a loaded machine) is tried again from the start.
      how=
      for _ in 1 2 3 4 5; do
        rm -f "$dir/out/s.shard"
        [ "$stage" = out ] || rm -rf "$dir/cache"
        how=$(kill_while_writing "$dir/$stage" "${pack[@]}") && break
      done
      [ -n "$how" ] || fail "in 5 tries, the pack was never caught writing in $stage"
      [ ! -e "$dir/out/s.shard" ] || fail "killed while writing in $stage, yet $dir/out/s.shard exists"
      # Unnamed while being written; but the pack runs on between being seen and being killed, and
      # may be caught committing, between linkat's "NAME.tmp-PID-N" and the rename over NAME (the Note
      # in core/mapped_file.h): such a name, and only such, may be left, for the next run to remove.
      if [ "$how" = unnamed ]; then
        [ -z "$(leftovers | grep -vE '\.tmp-[0-9]+-[0-9]+$')" ] || fail "a killed pack left: $(leftovers)"
      fi
      [ -z "$(ls -A "$dir/out")" ] || [ "$how" = named ] || fail "beside --out: $(ls -A "$dir/out")"
    done
    expect_exit 0 "${pack[@]}"
    [ -z "$(leftovers)" ] || fail "the next run did not remove: $(leftovers)"
    [ "$(ls -A "$dir/out")" = s.shard ] || fail "beside the shard: $(ls -A "$dir/out")"
    ;;
  pack_full_disk)
    # A full disk, stood in for by a file size limit (writes past it fail with EFBIG, SIGXFSZ ignored):
    # exit 1, one line naming --out (not a temporary file), and nothing left.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data cifar "$dir"
    for _ in 1 2 3 4 5 6 7 8; do cat "$dir/c10.bin"; done >"$dir/many.bin"
    for _ in 1 2 3 4 5 6 7 8; do cat "$dir/many.bin"; done >"$dir/more.bin"  # 256 records: 800 KB packed
    expect_exit 1 bash -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' limited "$frugal" pack --from cifar10 --out "$dir/s.shard" "$dir/more.bin"
    expect_one_line_error "^frugal pack: error: $dir/s.shard: cannot write it: write failed: File too large$"
    [ "$(ls "$dir" | grep -c shard)" -eq 0 ] || fail "a failed pack left: $(ls "$dir")"
    ;;
  pack_cache_verified)
    # A decompressed copy edited on disk is not trusted: inspect and pack read what the .gz holds.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data idx "$dir"
    expect_exit 0 "$frugal" inspect "$dir/labels.gz" --cache-dir "$dir/cache" --json
    before=$out
    copy=$(ls "$dir"/cache/labels.* | grep -v '\.crc32$')
    printf '\x07' | dd of="$copy" bs=1 seek=12 conv=notrunc status=none  # label 4: 0 -> 7
    expect_exit 0 "$frugal" inspect "$dir/labels.gz" --cache-dir "$dir/cache" --json
    [ "$out" = "$before" ] || fail "an edited cache copy changed what inspect reports: $out"
    [ "$(od -An -tu1 -j12 -N1 "$copy" | tr -d ' ')" = 0 ] || fail "the edited copy was not replaced"
    ;;
  size_bounds)
    # Sizes from flags and files are checked before anything is allocated for them: exit 2, one
    # short line naming the value (each would otherwise grow until memory runs out).
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data folder "$dir"
    make_data idx "$dir"
    expect_exit 2 timeout 20 "$frugal" inspect "$dir/f" --size 100000x100000
    expect_one_line_error "^frugal inspect: --size: 100000x100000 is more than the 67108864 pixels \(8192x8192\) an image may have$"
    expect_exit 2 timeout 20 "$frugal" pack --from folder --size 100000x100000 --out "$dir/x" "$dir/f"
    expect_one_line_error "^frugal pack: --size: 100000x100000 is more than"
    expect_exit 2 "$frugal" pack --from folder --size 9223372036854775807x2 --out "$dir/x" "$dir/f"
    expect_one_line_error "^frugal pack: --size: 9223372036854775807x2 is more than"
    # A shard whose checksum is right and whose one label is 2^27 (of 2^27 + 1 classes).
    python3 - "$dir/label.shard" <<'PY2'
import struct, sys, zlib
header = b"FRUGALSH" + struct.pack("<IBBBB", 1, 7, 6, 1, 0) + struct.pack("<QQQQ", 1, 64, 128, 2**27 + 1)
header += struct.pack("<q", 1) + bytes(56 + 12)
header += struct.pack("<I", zlib.crc32(header))
open(sys.argv[1], "wb").write(header + b"\x05" + bytes(7) + struct.pack("<q", 2**27) + bytes(48))
PY2
    expect_exit 2 timeout 20 "$frugal" inspect "$dir/label.shard"
    expect_one_line_error "^frugal inspect: $dir/label.shard: record 0 has label 134217728; inspect draws histograms of at most 1048576 classes$"
    expect_exit 2 timeout 20 "$frugal" alloc-replay /dev/zero
    expect_one_line_error "^frugal alloc-replay: /dev/zero:0: not a regular file"
    head -c 100000 /dev/zero >"$dir/zeros"
    expect_exit 2 "$frugal" alloc-replay "$dir/zeros"
    expect_one_line_error "^frugal alloc-replay: $dir/zeros:1: line longer than 4096 bytes: not a trace$"
    printf '+ a 1\n- a\n' >"$dir/trace"
    head -c 5000 /dev/zero | tr '\0' x >>"$dir/trace"
    expect_exit 2 "$frugal" alloc-replay "$dir/trace"
    expect_one_line_error "^frugal alloc-replay: $dir/trace:3: line longer than 4096 bytes"
    expect_exit 2 "$frugal" alloc-replay --training-trace --batch 0
    expect_one_line_error "^frugal: --batch: must be between 1 and 128, got 0 \(see 'frugal --help'\)$"
    expect_exit 2 "$frugal" alloc-replay --training-trace --steps 99999999
    expect_one_line_error "^frugal: --steps: must be between 1 and 1000, got 99999999"
    expect_exit 2 "$frugal" alloc-replay --training-trace --batch 100000
    expect_one_line_error "^frugal: --batch: must be between 1 and 128, got 100000"
    expect_exit 2 "$frugal" alloc-replay --training-trace --resolution 16
    expect_one_line_error "^frugal: --resolution: must be between 32 and 320, got 16"
    expect_exit 2 "$frugal" inspect "$dir/labels" --samples -1
    expect_one_line_error "^frugal: --samples: must be between 0 and 10000, got -1 \(see 'frugal --help'\)$"
    ;;
  inspect_messages)
    # Each failure is one line naming the input and what is wrong with it.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    make_data cifar "$dir"
    head -c 10000 "$dir/c10.bin" >"$dir/cut.bin"
    expect_exit 2 "$frugal" inspect "$dir/cut.bin"
    expect_one_line_error "^frugal inspect: $dir/cut.bin: looks like a CIFAR batch, but its 10000 bytes are not a whole number of records \(3 CIFAR-10 records of 3073 bytes and 781 over; 3 CIFAR-100 records of 3074 bytes and 778 over\): truncated or padded\?$"
    ln -s "$dir/loop" "$dir/loop"
    expect_exit 2 "$frugal" inspect "$dir/loop"
    expect_one_line_error "^frugal inspect: $dir/loop: is a symlink loop \(too many levels of symbolic links\)$"
    expect_exit 2 "$frugal" pack --from folder --size 4x4 --out "$dir/x" "$dir/loop"
    expect_one_line_error "^frugal pack: image folder $dir/loop: is a symlink loop"
    expect_exit 2 "$frugal" inspect "$dir/c10.bin/x"
    expect_one_line_error "^frugal inspect: $dir/c10.bin/x: Not a directory$"
    if [ "$(id -u)" -eq 0 ]; then
      echo "running as root, which reads any file: the unreadable-file case is skipped"
    else
      cp "$dir/c10.bin" "$dir/locked.bin"
      chmod 000 "$dir/locked.bin"
      expect_exit 2 "$frugal" inspect "$dir/locked.bin"
      expect_one_line_error "^frugal inspect: $dir/locked.bin: cannot open: Permission denied$"
    fi
    ;;
  inspect_safetensors)
    # A BatchNorm's state dict as safetensors: parameters count weight and bias, not the running
    # statistics nor the step counter; the same file without its extension is found by its header.
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    python3 - "$dir" <<'PY'
import json, struct, sys
d = sys.argv[1]
def safetensors(path, tensors, metadata, text=None):
    header, data = ({"__metadata__": metadata} if metadata else {}), b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = text or json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
f2 = lambda *v: struct.pack("<2f", *v)
safetensors(f"{d}/bn.safetensors", [("conv.weight", "F32", [2, 1, 1, 1], f2(1, 2)), ("bn.weight", "F32", [2], f2(1, 1)),
    ("bn.bias", "F32", [2], f2(0, 0)), ("bn.running_mean", "F32", [2], f2(0, 0)), ("bn.running_var", "F32", [2], f2(1, 1)),
    ("bn.num_batches_tracked", "I64", [], struct.pack("<q", 3))], {"format": "pt"})
open(f"{d}/bn-no-extension", "wb").write(open(f"{d}/bn.safetensors", "rb").read())
gap = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}'
safetensors(f"{d}/gap.safetensors", [], None, gap)
open(f"{d}/gap.safetensors", "ab").write(b"123")
twice = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
safetensors(f"{d}/twice.safetensors", [], None, twice)
open(f"{d}/twice.safetensors", "ab").write(b"1")
whole = open(f"{d}/bn.safetensors", "rb").read()
open(f"{d}/cut.safetensors", "wb").write(whole[:-4])
open(f"{d}/text.safetensors", "wb").write(b"hello, world")
PY
    expect_exit 0 "$frugal" inspect "$dir/bn.safetensors"
    for line in "safetensors file, data from byte" "conv.weight +F32 +\[2, 1, 1, 1\] +8$" \
                "bn.num_batches_tracked +I64 +\[\] +8$" "tensors +6$" "elements +11$" "bytes +48$" \
                "parameters +6 \(elements of floating-point tensors whose names do not end in running_mean, running_var or num_batches_tracked\)" \
                "^  format: pt$"; do
      grep -Eq -- "$line" <<<"$out" || fail "inspect of a safetensors file has no line matching '$line': $out"
    done
    expect_exit 0 "$frugal" inspect "$dir/bn-no-extension" --json
    python3 - "$out" <<'PY' || fail "inspect --json of a safetensors file is not as expected: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["format"] == "safetensors" and r["metadata"] == {"format": "pt"}, r
assert [t["name"] for t in r["tensors"]][:2] == ["conv.weight", "bn.weight"], r
assert r["tensors"][0] == {"name": "conv.weight", "dtype": "F32", "shape": [2, 1, 1, 1], "bytes": 8, "data_offsets": [0, 8]}, r
t = r["totals"]
assert (t["tensors"], t["elements"], t["bytes"], t["parameters"]) == (6, 11, 48, 6), t
assert "running_mean" in t["parameters_counted"], t
PY
    expect_exit 2 "$frugal" inspect "$dir/gap.safetensors"
    expect_one_line_error "^frugal inspect: $dir/gap.safetensors: tensor 'b' starts at byte 2 of the data, but the tensors before it end at byte 1: a gap$"
    expect_exit 2 "$frugal" inspect "$dir/twice.safetensors" --json
    expect_one_line_error "^frugal inspect: $dir/twice.safetensors: the header names 'a' twice$"
    expect_exit 2 "$frugal" inspect "$dir/cut.safetensors"
    expect_one_line_error "^frugal inspect: $dir/cut.safetensors: tensor 'bn.num_batches_tracked' ends at byte 48 of the data, but the file holds only 44 bytes of data \(truncated\?\)$"
    expect_exit 2 "$frugal" inspect "$dir/text.safetensors"
    expect_one_line_error "^frugal inspect: $dir/text.safetensors: the header length is [0-9]+ bytes, over the limit of 100000000 \(not a safetensors file\?\)$"
    : >"$dir/empty.safetensors"
    expect_exit 2 "$frugal" inspect "$dir/empty.safetensors"
    expect_one_line_error "^frugal inspect: $dir/empty.safetensors: is empty$"
    ;;
  checkpoint_blocks_arguments)
    # --checkpoint-blocks is refused before any data is read: one line naming the text, the token or
    # the model's range, exit 2. With --checkpoint-activations only "all" agrees.
    expect_exit 2 "$frugal" train --checkpoint-blocks 0-99
    expect_one_line_error "^frugal train: checkpoint blocks 0-99: block 0 is out of range: mobilenet_v2 has blocks 1-17 \(features.1 .. features.17\)$"
    expect_exit 2 "$frugal" train --model resnet18 --checkpoint-blocks 3-9
    expect_one_line_error "^frugal train: checkpoint blocks 3-9: block 9 is out of range: resnet18 has blocks 1-8 \(layer1.0 .. layer4.1\)$"
    expect_exit 2 "$frugal" train --checkpoint-blocks 2-x
    expect_one_line_error "^frugal train: checkpoint blocks '2-x': '2-x' is not a block number or a range such as 2-7"
    expect_exit 2 "$frugal" train --checkpoint-blocks 7-2
    expect_one_line_error "^frugal train: checkpoint blocks '7-2': '7-2' runs backwards \(write 2-7\)$"
    expect_exit 2 "$frugal" train --checkpoint-activations --checkpoint-blocks 2-7
    expect_one_line_error "^frugal train: --checkpoint-activations checkpoints every block, but --checkpoint-blocks 2-7 names some: give one of the two$"
    expect_exit 2 "$frugal" plan --model cnn --checkpoint-blocks 4
    expect_one_line_error "^frugal plan: checkpoint blocks 4: block 4 is out of range: cnn has blocks 1-3 \(features.0-2 .. features.6-7\)$"
    expect_exit 0 "$frugal" plan --model cnn --batch-size 4 --checkpoint-activations --checkpoint-blocks all
    grep -q "^cnn, batch 1 x 4 of 32x32, adamw, checkpointed blocks: predicted peak" <<<"$out" || fail "all blocks: $out"
    expect_exit 0 "$frugal" plan --model cnn --batch-size 4 --checkpoint-blocks 1,3
    grep -q "^cnn, batch 1 x 4 of 32x32, adamw, checkpointed blocks 1,3: predicted peak" <<<"$out" || fail "blocks 1,3: $out"
    ;;
  run_step_arguments)
    # What run-step refuses before reading any file (the files themselves: tests/cpu/test_models_vs_torchvision.cpp).
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    expect_exit 2 "$frugal" run-step --weights w --input x --out "$dir/o.safetensors"
    grep -q -- "--model is required" <<<"$err" || fail "run-step without --model: $err"
    expect_exit 2 "$frugal" run-step --model vgg16 --weights w --input x --out "$dir/o.safetensors"
    expect_one_line_error "^frugal run-step: unknown model 'vgg16' \(known: mobilenet_v2, resnet18, resnet50, cnn\)$"
    expect_exit 2 "$frugal" run-step --model resnet18 --width 0.5 --weights w --input x --out "$dir/o.safetensors"
    expect_one_line_error "^frugal run-step: resnet18 has no width option \(only mobilenet_v2 has\)$"
    expect_exit 2 "$frugal" run-step --model cnn --weights w --input x --out "$dir/o.safetensors" --mode step
    expect_exit 2 "$frugal" run-step --model cnn --weights w --input x --out "$dir/o.safetensors" --dtype f16
    expect_exit 2 "$frugal" run-step --model cnn --weights "$dir/absent.safetensors" --input x --out "$dir/o.safetensors"
    expect_one_line_error "^frugal run-step: $dir/absent.safetensors: "
    if ! "$frugal" info --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["cuda"]["usable"] else 1)'; then
      expect_exit 1 "$frugal" run-step --model cnn --weights w --input x --out "$dir/o.safetensors" --device cuda:0
      expect_one_line_error "^frugal run-step: error: cuda:0 is not usable: "
    fi
    [ ! -e "$dir/o.safetensors" ] || fail "a refused run-step wrote its output"
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
