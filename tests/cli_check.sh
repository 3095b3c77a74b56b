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

# make_data KIND DIR: small data files whose contents are predictable by eye (python3, standard library).
#   idx:    DIR/images (5 images of 4x6, image i has 255 on pixel (row r, column r+i)), DIR/labels (0 1 2 1 0), and .gz copies
#   cifar:  DIR/c10.bin (CIFAR-10 labels 3 1 3 9), DIR/c100.bin (CIFAR-100, coarse 4 7, fine 40 71)
#   folder: DIR/f/{cat/a.png (grey), cat/b.BMP (RGB), dog/c.Png (RGBA)}, 2x2 each
#   big:    DIR/big/a/0.png (1024x1024 noise) and 999 links to it
make_data() {
  python3 - "$@" <<'PY'
import gzip, os, struct, sys, zlib
kind, d = sys.argv[1], sys.argv[2]
def png(path, w, h, channels, pixels):
    color = {1: 0, 3: 2, 4: 6}[channels]
    raw = b"".join(b"\0" + pixels[y * w * channels:(y + 1) * w * channels] for y in range(h))
    chunk = lambda t, data: struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
def bmp(path, w, h, rgb):  # rgb: rows top to bottom; BMP stores them bottom-up, BGR, padded to 4 bytes
    stride = (3 * w + 3) & ~3
    rows = [b"".join(bytes(rgb[(y * w + x) * 3:(y * w + x) * 3 + 3][::-1]) for x in range(w)).ljust(stride, b"\0")
            for y in reversed(range(h))]
    body = b"".join(rows)
    with open(path, "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", 54 + len(body), 0, 0, 54)
                + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(body), 2835, 2835, 0, 0) + body)
if kind == "idx":
    images = bytes(255 if c == r + i else 0 for i in range(5) for r in range(4) for c in range(6))
    files = {"images": struct.pack(">IIII", 0x803, 5, 4, 6) + images, "labels": struct.pack(">II", 0x801, 5) + bytes([0, 1, 2, 1, 0])}
    for name, data in files.items():
        open(f"{d}/{name}", "wb").write(data)
        open(f"{d}/{name}.gz", "wb").write(gzip.compress(data))
elif kind == "cifar":
    open(f"{d}/c10.bin", "wb").write(b"".join(bytes([label]) + bytes([label * 20]) * 3072 for label in (3, 1, 3, 9)))
    open(f"{d}/c100.bin", "wb").write(b"".join(bytes([coarse, fine]) + bytes(3072) for coarse, fine in ((4, 40), (7, 71))))
elif kind == "folder":
    for sub in ("cat", "dog"):
        os.makedirs(f"{d}/f/{sub}", exist_ok=True)
    png(f"{d}/f/cat/a.png", 2, 2, 1, bytes([0, 100, 200, 40]))
    bmp(f"{d}/f/cat/b.BMP", 2, 2, bytes(range(10, 22)))
    png(f"{d}/f/dog/c.Png", 2, 2, 4, bytes(range(16)))
elif kind == "big":
    os.makedirs(f"{d}/big/a")
    png(f"{d}/big/a/0.png", 1024, 1024, 3, os.urandom(1024 * 1024 * 3))
    for i in range(1, 1000):
        os.symlink(f"{d}/big/a/0.png", f"{d}/big/a/{i}.png")
PY
}

# expect_one_line_error PATTERN: the last command's stderr is one line matching PATTERN (grep -E).
# Checks `frugal bench NAME --json` output in $out: the schema of every result, then the Python
# assertions read from stdin, which see `report` and `cases` ({case: {impl: result}}).
check_bench_report() {
  local name=$1 checks
  checks=$(cat)
  python3 - "$out" "$name" <<PY || fail "bench $name --json is not as expected: $out"
import json, os, sys
report = json.loads(sys.argv[1])
assert report["bench"] == sys.argv[2] and report["device"] == "cpu", report
cases = {}
for r in report["results"]:
    assert set(r) == {"case", "impl", "value", "unit", "higher_is_better"}, r
    assert r["value"] > 0, r
    cases.setdefault(r["case"], {})[r["impl"]] = r
$checks
PY
}

expect_one_line_error() {
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "expected a one-line error, got: $err"
  grep -Eq -- "$1" <<<"$err" || fail "error does not match '$1': $err"
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
    for signal in INT:130 TERM:143; do
      "$frugal" pack --from folder --size 256x256 --out "$dir/big.shard" "$dir/big" >/dev/null 2>"$dir/err" &
      pid=$!
      for _ in $(seq 600); do compgen -G "$dir/big.shard.tmp-*" >/dev/null && break; sleep 0.05; done
      compgen -G "$dir/big.shard.tmp-*" >/dev/null || fail "the pack never started writing"
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
    expect_one_line_error "^frugal inspect: $dir/text: not a frugal shard, IDX file, CIFAR batch or image folder \(12 bytes, starting 68 65 6c 6c 6f 2c 20 77\)$"
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
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
