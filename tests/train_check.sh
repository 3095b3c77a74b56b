#!/usr/bin/env bash
# Checks one behaviour of `frugal train` and `frugal eval`: tests/train_check.sh CHECK PATH/TO/frugal
# Each trains on a small subset of Debian's Fashion-MNIST written into a temporary folder, so a check
# takes seconds; exits 77 (ctest: Skipped) when the package is not installed.
set -euo pipefail
check=$1
frugal=$2
source "$(dirname "$0")/cli_lib.sh"

fashion=/usr/share/datasets/fashion-mnist
fashion_subset=$(cd "$(dirname "$0")/../scripts" && pwd)/fashion-subset.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# make_subset DIR TRAIN TEST: the first TRAIN training and TEST test samples of Fashion-MNIST as IDX
# files in DIR, named as the originals so the test split is found beside the training split.
make_subset() {
  [ -e "$fashion/train-images-idx3-ubyte.gz" ] || { echo "skipped: $fashion not installed (dataset-fashion-mnist)"; exit 77; }
  python3 "$fashion_subset" "$fashion" "$@"
}

# signal_after_progress SIGNAL ARGS...: runs `frugal train ARGS` (stdout in $dir/out, stderr in
# $dir/err), sends it SIGNAL once its first progress line is out, and prints its exit code.
signal_after_progress() {
  local signal=$1 pid code
  shift
  "$frugal" train "$@" >"$dir/out" 2>"$dir/err" &
  pid=$!
  for _ in $(seq 1500); do grep -q "^epoch 1/20 " "$dir/out" 2>/dev/null && break; sleep 0.02; done
  kill -"$signal" "$pid"
  set +e; wait "$pid"; code=$?; set -e
  echo "$code"
}

# json_field FILE KEY: one field of a JSON document.
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# A small MobileNetV2 (width 0.25: BatchNorm, dropout and in-place ReLU6, all that resuming must
# restore) on 320 images: 10 steps of 32 per epoch.
small=(--model mobilenet_v2 --width 0.25 --batch-size 32 --epochs 2 --workers 2)
# Three steps of it on 96 images, for the memory flags (step 2 is the timeline's default).
tiny=(--model mobilenet_v2 --width 0.25 --batch-size 32 --steps 3 --workers 0)

# Data parallelism: mpirun (FRUGAL_MPIRUN, set by tests/CMakeLists.txt) starting 2 ranks on 2 cores.
ranks() { "${FRUGAL_MPIRUN:-mpirun}" -np "$1" --oversubscribe "${@:2}"; }

# max_difference A B [relative [PREFIX]]: the largest absolute difference between two checkpoints' f32
# tensors (every one: the weights and the optimizer's state), and a failure when their tensors differ
# in names. With `relative`, each tensor's difference is divided by B's largest magnitude in it, over
# the tensors whose names start with PREFIX (`model.`: the weights alone).
max_difference() {
  python3 - "$1" "$2" "${3:-absolute}" "${4:-}" <<'PY'
import array, json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        values = array.array("f")
        values.frombytes(data[8 + n + begin:8 + n + end])
        out[name] = values
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    sys.exit("the checkpoints hold different tensors: " + str(sorted(a.keys() ^ b.keys())))
def difference(k):
    d = max(abs(x - y) for x, y in zip(a[k], b[k]))
    scale = max(abs(y) for y in b[k]) if sys.argv[3] == "relative" else 0.0
    return d / scale if scale > 0 else d
print(max(difference(k) for k in a if k.startswith(sys.argv[4])))
PY
}

# only_train_flags TEXT: fails unless every --flag TEXT names is one `frugal train --help` lists
# (a refusal that names a flag the command does not have sends its reader nowhere).
only_train_flags() {
  local help flag
  help=$("$frugal" train --help)
  for flag in $(grep -oE -- '--[a-z0-9-]+' <<<"$1" | sort -u); do
    grep -qE -- "(^|[ ,])$flag([ ,{]|$)" <<<"$help" || fail "'$flag' is not a flag of frugal train: $1"
  done
}

# json_rank_tag FILE RANK TAG: a rank's peak bytes of one memory tag in a --ddp run's JSON.
json_rank_tag() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["per_rank"][int(sys.argv[2])]["peak_bytes_by_tag"][sys.argv[3]])' "$@"
}

case $check in
  train_arguments)
    make_subset "$dir" 64 32
    for bad in "--batch-size 0" "--batch-size 12x" "--lr -1" "--epochs 0" "--optimizer adam" "--schedule linear" \
               "--amp f32" "--memory-limit lots" "--warmup 1.5" "--model vgg16" "--save-every 5" \
               "--data $dir/absent" "--resume $dir/absent.safetensors" "--width 0.5 --model resnet18" "--device meta" \
               "--compress-activations fp8" "--compress-activations"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$frugal" train --data "$dir" $bad
      expect_one_line_error "^frugal( train)?: "  # "frugal:" when the command line parser refuses it
    done
    expect_exit 2 "$frugal" train --data "$dir" --batch-size 0
    expect_one_line_error "^frugal train: --batch-size must be auto or a whole number in \[1, 1048576\], got '0'$"
    expect_exit 2 "$frugal" train --data "$dir/absent"
    expect_one_line_error "$dir/absent"
    if ! "$frugal" info --json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["cuda"]["usable"] else 1)'; then
      expect_exit 1 "$frugal" train --data "$dir" --device cuda:0  # as run-step: the machine's lack, not the flag's
      expect_one_line_error "^frugal train: error: cuda:0 is not usable"
    fi
    # A plain state dict is not a checkpoint to resume from.
    "$frugal" train --data "$dir" --model cnn --steps 1 --save "$dir/c.safetensors" >/dev/null
    "$frugal" train --data "$dir" --model cnn --steps 1 --lr 0.5 --resume "$dir/c.safetensors" >/dev/null 2>"$dir/err" &&
      fail "resuming with another --lr was accepted"
    grep -q "^frugal train: $dir/c.safetensors: not the same run: --lr 0.5 but the checkpoint has 0.01$" "$dir/err" ||
      fail "mismatched resume: $(cat "$dir/err")"
    # Saving activations otherwise changes the numbers: refused, in the flags that set it.
    saving=(--bn-from-output --bit-masks --compress-activations int8)
    expect_exit 2 "$frugal" train --data "$dir" --model cnn --steps 1 "${saving[@]}" --resume "$dir/c.safetensors"
    expect_one_line_error "not the same run: ${saving[*]} but the checkpoint has none$"
    only_train_flags "$err"
    # Which blocks are checkpointed changes no number, so a run resumes with other ones.
    "$frugal" train --data "$dir" --model cnn --steps 2 --checkpoint-blocks 2-3 --resume "$dir/c.safetensors" >/dev/null ||
      fail "resuming with --checkpoint-blocks was refused"
    ;;
  train_cnn_learns)
    # 250 steps of the small CNN: the second epoch's mean loss falls well below chance's log(10) = 2.30
    # (measured 1.13, test accuracy 60%: the small CNN learns slowly, MobileNetV2 is the real recipe).
    make_subset "$dir" 2000 1000
    "$frugal" train --data "$dir" --model cnn --batch-size 16 --epochs 2 --lr 1e-2 --json "$dir/run.json" >"$dir/out"
    python3 - "$dir/run.json" <<'PY' || fail "the CNN did not learn: $(cat "$dir/run.json")"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"steps {r['steps']}, final loss {r['final_loss']:.3f}, test accuracy {r['test_accuracy']:.3f}")
assert r["steps"] == 250 and r["final_loss"] < 0.6 * 2.3026 and r["test_accuracy"] > 0.5, r
assert set(r) >= {"model", "parameters", "device", "batch_size", "steps", "epochs", "images_per_sec", "final_loss",
                  "test_accuracy", "peak_allocated_bytes", "peak_reserved_bytes", "peak_bytes_by_tag", "wall_seconds", "seed"}
assert r["peak_bytes_by_tag"]["activation"] > 0 and r["peak_allocated_bytes"] <= r["peak_reserved_bytes"], r
PY
    grep -q "^test accuracy " "$dir/out" || fail "no test accuracy in the summary: $(cat "$dir/out")"
    ;;
  train_resume_exact)
    # Stopped after step 7 and resumed (into the second epoch) = never stopped: the same bytes.
    make_subset "$dir" 320 64
    "$frugal" train --data "$dir" "${small[@]}" --steps 15 --save "$dir/straight.safetensors" --json "$dir/a.json" >/dev/null
    "$frugal" train --data "$dir" "${small[@]}" --steps 7 --save "$dir/part.safetensors" >/dev/null
    "$frugal" train --data "$dir" "${small[@]}" --workers 0 --steps 15 --resume "$dir/part.safetensors" \
      --save "$dir/resumed.safetensors" --json "$dir/b.json" >/dev/null
    cmp "$dir/straight.safetensors" "$dir/resumed.safetensors" || fail "a resumed run differs from an uninterrupted one"
    [ "$(json_field "$dir/a.json" final_loss)" = "$(json_field "$dir/b.json" final_loss)" ] || fail "final losses differ"
    [ "$(json_field "$dir/b.json" steps)" = 15 ] || fail "the resumed run did not stop at step 15"
    # The same with gradient accumulation (2 micro-batches of 16 per step) and a resume mid-epoch.
    acc=(--model mobilenet_v2 --width 0.25 --batch-size 16 --accum 2 --epochs 1)
    "$frugal" train --data "$dir" "${acc[@]}" --save "$dir/acc1.safetensors" >/dev/null
    "$frugal" train --data "$dir" "${acc[@]}" --steps 4 --save "$dir/acc_part.safetensors" >/dev/null
    "$frugal" train --data "$dir" "${acc[@]}" --resume "$dir/acc_part.safetensors" --save "$dir/acc2.safetensors" >/dev/null
    cmp "$dir/acc1.safetensors" "$dir/acc2.safetensors" || fail "a resumed accumulating run differs"
    ;;
  train_blas_threads)
    # FRUGAL_BLAS_THREADS=1 keeps OpenBLAS's GEMMs on one thread, so a run is the same bytes on 1 and
    # 2 OpenMP threads whatever kernels OpenBLAS runs (Note [OpenBLAS threads and bits],
    # kernels/cpu_runtime.h). On a CPU with AVX2 the runs take OpenBLAS's AVX2 ("Haswell") kernels,
    # whose threaded products are not the one-thread bits, so the cap is what is being tested; on
    # 2026-12-04 on the 2-core Xeon the uncapped runs differed there.
    make_subset "$dir" 320 32
    core=() kernels="the kernels OpenBLAS chose"
    grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && core=(OPENBLAS_CORETYPE=Haswell) kernels="AVX2 kernels"
    for cap in 1 0; do
      for threads in 1 2; do
        env "${core[@]}" FRUGAL_BLAS_THREADS=$cap OMP_NUM_THREADS=$threads "$frugal" train --data "$dir" --model cnn \
          --batch-size 32 --steps 3 --workers 0 --save "$dir/cap$cap-threads$threads.safetensors" >/dev/null
      done
    done
    cmp "$dir/cap1-threads1.safetensors" "$dir/cap1-threads2.safetensors" ||
      fail "with FRUGAL_BLAS_THREADS=1 a run on 2 threads differs from one on 1 thread ($kernels)"
    if cmp -s "$dir/cap0-threads1.safetensors" "$dir/cap0-threads2.safetensors"; then how="the same bytes"; else how="different bytes"; fi
    echo "$kernels: 1 and 2 threads give the same bytes with FRUGAL_BLAS_THREADS=1, $how without"
    ;;
  train_killed_saving)
    # SIGKILL while a checkpoint is being written leaves the previous one whole and resumable.
    make_subset "$dir" 320 32
    "$frugal" train --data "$dir" "${small[@]}" --steps 2 --save "$dir/c.safetensors" >/dev/null
    cp "$dir/c.safetensors" "$dir/before.safetensors"
    how=$(kill_while_writing "$dir" "$frugal" train --data "$dir" "${small[@]}" --resume "$dir/c.safetensors" \
          --save "$dir/c.safetensors" --save-every 1) || fail "the run ended before it wrote a checkpoint"
    echo "killed while writing a checkpoint ($how temporary file)"
    cmp "$dir/c.safetensors" "$dir/before.safetensors" || fail "the checkpoint changed although its rewrite was killed"
    "$frugal" train --data "$dir" "${small[@]}" --steps 3 --resume "$dir/c.safetensors" >/dev/null ||
      fail "the checkpoint left by a killed save does not resume"
    [ -z "$(find "$dir" -name '*.tmp-*')" ] || fail "temporary files left behind: $(ls "$dir")"
    ;;
  train_out_of_memory)
    # A simulated 24 MiB device cannot hold MobileNetV2's batch of 256: exit 3, the allocator's
    # explanation, what filled the device (the ledger by tag with the activations by layer, the
    # largest tensors and who made them, the measured fixes), and the checkpoint of an earlier run
    # untouched.
    make_subset "$dir" 512 32
    "$frugal" train --data "$dir" --model mobilenet_v2 --width 0.25 --steps 1 --save "$dir/c.safetensors" >/dev/null
    cp "$dir/c.safetensors" "$dir/before.safetensors"
    size='[0-9.]+ (B|KiB|MiB|GiB)'
    # Its plan says so before the first step; --no-plan-check runs it to the measured out-of-memory.
    expect_exit 3 "$frugal" train --data "$dir" --model mobilenet_v2 --batch-size 256 --memory-limit 24MiB \
      --save "$dir/c.safetensors"
    expect_one_line_error "^frugal train: the plan of this run allocates $size at its peak \(in [a-z ]+\), more than --memory-limit 24.00 MiB: it cannot fit, so it was not started"
    ! grep -q "^epoch" <<<"$out" || fail "a step was taken: $out"
    # A batch of 2^20 under 1 GiB: refused by its plan in well under a second (it loaded its batch
    # for 100 s before); the timeout only catches a return to that.
    expect_exit 3 timeout 60 "$frugal" train --data "$dir" --batch-size 1048576 --memory-limit 1GiB --steps 1
    expect_one_line_error "^frugal train: the plan of this run allocates .* more than --memory-limit 1.00 GiB"
    expect_exit 3 "$frugal" train --data "$dir" --model mobilenet_v2 --batch-size 256 --memory-limit 24MiB \
      --save "$dir/c.safetensors" --no-plan-check
    grep -q "^frugal train: out of memory at step 1 (batch size 256 on cpu):" <<<"$err" || fail "no OOM headline: $err"
    grep -qi "memory limit\|out of memory" <<<"$err" || fail "no explanation: $err"
    layer='features\.[0-9.]+ \([A-Za-z0-9]+\)'
    grep -qE "^the failing request: $size of activation, made by $layer$" <<<"$err" || fail "no failing request: $err"
    grep -qE "^memory at the failure, $size reserved" <<<"$err" || fail "no ledger: $err"
    for row in param grad optimizer activation workspace data other "cache \(reserved but free\)" \
               "fragmentation \(inactive split\)"; do
      grep -qE "^  $row +$size$" <<<"$err" || fail "no ledger line for $row: $err"
    done
    grep -qE "^    $layer +$size$" <<<"$err" || fail "no activations by layer: $err"
    grep -q "^largest live tensors:$" <<<"$err" || fail "no largest tensors: $err"
    [ "$(grep -cE "^ +$size  [a-z]+ +made by " <<<"$err")" -ge 3 ] || fail "fewer than 3 largest tensors: $err"
    grep -qE "^ +$size  activation +made by $layer$" <<<"$err" || fail "no activation named by its layer: $err"
    grep -qE "^  saves $size \(measured\): --batch-size 128 --accum 2 " <<<"$err" || fail "no measured fix: $err"
    grep -qE "^  saves $size \(predicted\): --checkpoint-activations: needs a device of $size instead of $size$" <<<"$err" ||
      fail "no fix predicted by the planner: $err"
    cmp "$dir/c.safetensors" "$dir/before.safetensors" || fail "the OOM run changed the checkpoint"
    ;;
  train_oom_fragmentation)
    # Without expandable segments the default run's blocks split among live ones: at a device between
    # what it needs with them (104 MiB without a loader worker) and without (112 MiB), it runs out of
    # memory with fragmentation a large share of what is reserved. The report says so, and the
    # planner's fixes name the allocator setting, its device predicted by replaying the run's requests.
    make_subset "$dir" 512 32
    # The caching allocator's own settings (the sanitizer pass runs the suites with FRUGAL_ALLOC=direct).
    expect_exit 3 env -u FRUGAL_ALLOC FRUGAL_ALLOC_CONF=expandable:off "$frugal" train --data "$dir" --workers 0 --no-eval \
      --steps 4 --memory-limit 106MiB
    size='[0-9.]+ (B|KiB|MiB|GiB)'
    grep -qE "^  fragmentation is [0-9]+% of what is reserved, more than the request: free, but in pieces between live blocks" <<<"$err" ||
      fail "fragmentation not named: $err"
    grep -qE "^  saves $size \(predicted\): FRUGAL_ALLOC_CONF=expandable:on \(less fragmentation, the same numbers\): needs a device of 104.00 MiB instead of 112.00 MiB$" <<<"$err" ||
      fail "no allocator fix: $err"
    # With expandable segments (the default) no setting needs less, and none is offered.
    env -u FRUGAL_ALLOC -u FRUGAL_ALLOC_CONF "$frugal" plan --workers 0 --json "$dir/plan.json" >/dev/null
    python3 - "$dir/plan.json" <<'PY' || fail "the plan's device: $(cat "$dir/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["device_needed_bytes"] == 104 * 2**20 and p["peak_bytes"] <= p["device_needed_bytes"], p
PY
    ;;
  train_batch_auto)
    # --batch-size auto under a simulated 48 MiB device: the planner's largest batch (the next one up
    # planned over the usable budget), confirmed by trial steps, trained without running out of memory;
    # --global-batch keeps the samples per step with accumulation; a resumed run keeps the batch it chose.
    make_subset "$dir" 512 32
    limit=$((48 * 1024 * 1024))
    "$frugal" train --data "$dir" --model cnn --batch-size auto --memory-limit 48MiB --steps 2 --no-eval \
      --save "$dir/auto.safetensors" --json "$dir/auto.json" >"$dir/out" 2>"$dir/err" || fail "auto failed: $(cat "$dir/err")"
    python3 - "$dir/auto.json" "$limit" <<'PY' || fail "auto's choice: $(cat "$dir/out")"
import json, sys
d, limit = json.load(open(sys.argv[1])), int(sys.argv[2])
s, b = d["batch_search"], d["batch_size"]
assert b == s["batch_size"] == s["planned_batch"] and b > 2, (b, s)
assert d["peak_reserved_bytes"] <= s["usable_bytes"] < limit, d
planned = {t["batch_size"]: t for t in s["tried"] if t["how"] == "planned"}
assert planned[b]["fits"] and not planned[b + 1]["fits"], planned
assert planned[b + 1]["needed_bytes"] > s["usable_bytes"], planned
assert s["tried"][-1] == {"batch_size": b, "accum": 1, "how": "trial", "fits": True,
                          "needed_bytes": s["tried"][-1]["needed_bytes"]}, s["tried"][-1]
PY
    grep -q "^chose batch [0-9]*: the planner's largest, confirmed by two training steps$" "$dir/out" || fail "no choice line: $(cat "$dir/out")"
    grep -qE "^planned peak +[0-9.]+ (KiB|MiB) allocated \(1\.00[0-9]*x measured/planned\)$" "$dir/out" ||
      fail "no planned peak against the measured one: $(cat "$dir/out")"
    chosen=$(json_field "$dir/auto.json" batch_size)
    "$frugal" train --data "$dir" --model cnn --batch-size auto --memory-limit 48MiB --steps 3 --no-eval \
      --resume "$dir/auto.safetensors" --json "$dir/resumed.json" >"$dir/out" || fail "resuming auto failed"
    [ "$(json_field "$dir/resumed.json" batch_size)" = "$chosen" ] || fail "the resumed run changed its batch"
    "$frugal" train --data "$dir" --model cnn --batch-size auto --global-batch 256 --memory-limit 48MiB --steps 1 --no-eval \
      --json "$dir/global.json" >/dev/null
    python3 - "$dir/global.json" <<'PY' || fail "--global-batch 256 with auto: $(cat "$dir/global.json")"
import json, sys
d = json.load(open(sys.argv[1]))
b, k = d["batch_size"], d["accum"]
assert k >= 2 and 256 <= b * k < 256 + k and b <= d["batch_search"]["planned_batch"], (b, k)
PY
    "$frugal" train --data "$dir" --model cnn --batch-size 32 --global-batch 96 --steps 1 --no-eval --json "$dir/g.json" >/dev/null
    [ "$(json_field "$dir/g.json" accum)" = 3 ] || fail "--global-batch 96 --batch-size 32 is not 3 micro-batches"
    for bad in "--batch-size autox" "--batch-size 32 --global-batch 100" "--batch-size auto --global-batch 64 --accum 2" \
               "--global-batch 1"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$frugal" train --data "$dir" --model cnn --steps 1 $bad
      expect_one_line_error "^frugal( train)?: "
    done
    expect_exit 3 "$frugal" train --data "$dir" --model cnn --batch-size auto --memory-limit 1MiB --steps 1
    grep -q "^frugal train: batch size auto: even a batch of 2 needs .* usable of 1.00 MiB (--memory-limit)$" <<<"$err" ||
      fail "no explanation of a device too small for any batch: $err"
    ;;
  train_leak_check)
    # Training without a leak reports none, across an epoch's end and its evaluation, with the
    # loader's threads preparing batches ahead; --no-leak-check is accepted.
    make_subset "$dir" 320 32
    "$frugal" train --data "$dir" "${small[@]}" --json "$dir/run.json" >"$dir/out" 2>"$dir/err"
    [ "$(json_field "$dir/run.json" leak)" = None ] || fail "a leak reported: $(cat "$dir/err")"
    ! grep -q "memory grew" "$dir/err" || fail "a leak reported: $(cat "$dir/err")"
    "$frugal" train --data "$dir" --model cnn --steps 3 --no-leak-check --json "$dir/off.json" >/dev/null
    [ "$(json_field "$dir/off.json" leak)" = None ] || fail "--no-leak-check still checked"
    ;;
  train_progress)
    make_subset "$dir" 640 32
    # To a pipe: plain lines, no carriage return or escape sequence.
    "$frugal" train --data "$dir" --model cnn --batch-size 16 >"$dir/pipe"
    ! grep -q $'[\r\033]' "$dir/pipe" || fail "control characters on a pipe"
    grep -q "epoch 1/1" "$dir/pipe" || fail "no epoch line on a pipe: $(cat "$dir/pipe")"
    # On a terminal (script(1) gives it a pseudo-terminal): the line is redrawn in place.
    command -v script >/dev/null || { echo "skipped: script(1) (util-linux) is not installed"; exit 77; }
    script -qec "'$frugal' train --data '$dir' --model cnn --batch-size 16" /dev/null >"$dir/tty"
    grep -q $'\r' "$dir/tty" || fail "no redraw on a terminal: $(head -c 300 "$dir/tty")"
    grep -q "test accuracy" "$dir/tty" || fail "no summary on a terminal"
    ;;
  train_interrupted)
    # SIGINT: a checkpoint at the next step boundary, exit 130, and the run resumes from it; SIGTERM: 143.
    make_subset "$dir" 3200 32
    # 20 epochs of 400 steps: far more than a fast build finishes before the first progress line.
    long=(--data "$dir" --model cnn --batch-size 8 --epochs 20)
    code=$(signal_after_progress INT "${long[@]}" --save "$dir/c.safetensors")
    [ "$code" -eq 130 ] || fail "interrupted run exited $code: $(cat "$dir/err")"
    grep -q "^frugal train: stopped by Interrupt after step [0-9]*; resume with --resume $dir/c.safetensors$" "$dir/err" ||
      fail "no resume hint: $(cat "$dir/err")"
    stopped=$(sed -n 's/^frugal train: stopped by Interrupt after step \([0-9]*\);.*/\1/p' "$dir/err")
    "$frugal" train "${long[@]}" --resume "$dir/c.safetensors" --steps $((stopped + 1)) --json "$dir/resumed.json" >/dev/null ||
      fail "the interrupted run's checkpoint does not resume"
    [ "$(json_field "$dir/resumed.json" steps)" = $((stopped + 1)) ] || fail "the resumed run did not go on from step $stopped"
    code=$(signal_after_progress TERM "${long[@]}" --no-eval)
    [ "$code" -eq 143 ] || fail "terminated run exited $code: $(cat "$dir/err")"
    grep -q "^frugal train: stopped by Terminated after step [0-9]* (no --save, nothing kept)$" "$dir/err" ||
      fail "SIGTERM message: $(cat "$dir/err")"
    ;;
  plan_arguments)
    for bad in "--batch-size 0" "--model vgg16" "--amp f8" "--optimizer adam" "--depth -1" "--image-size 4" "--batch-size 1" \
               "--budget lots" "--budget 0" "--compress-activations int4" "--bn-from-output=maybe" "--offload gpu" \
               "--offload activations --compress-activations bf16"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$frugal" plan $bad
      expect_one_line_error "^frugal( plan)?: "
    done
    expect_exit 2 "$frugal" plan --batch-size 1  # BatchNorm over one value per channel, said as training would
    expect_one_line_error "^frugal plan: batch_norm_train: expected more than 1 value per channel"
    expect_exit 2 "$frugal" plan --model cnn --json "$dir/absent/plan.json"  # a bad flag, as for train
    expect_one_line_error "^frugal plan: .*$dir/absent/plan.json"
    "$frugal" plan --model cnn --batch-size 8 --json "$dir/plan.json" >"$dir/out"
    grep -q "^cnn, batch 1 x 8 of 32x32, adamw: predicted peak .* allocated (in backward)" "$dir/out" || fail "no headline: $(head -1 "$dir/out")"
    python3 - "$dir/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert [x["name"] for x in p["phases"]] == ["init", "forward", "backward", "optimizer step"], p["phases"]
assert p["peak_bytes"] == max(x["peak_bytes"] for x in p["phases"]), p
assert p["peak_bytes_by_tag"]["optimizer"] == sum(l["optimizer_bytes"] for l in p["layers"]), p
PY
    # A budget below the device the plan as given needs (16 MiB): it does not fit, the cheapest
    # fitting way comes first, and every option keeps the step's 16 samples.
    "$frugal" plan --model cnn --batch-size 16 --budget 12MiB --json "$dir/budget.json" >"$dir/out"
    grep -q "^under a budget of 12.00 MiB (fits: the device needed is within it):" "$dir/out" || fail "no budget table: $(cat "$dir/out")"
    python3 - "$dir/budget.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
options = p["budget"]["options"]
assert all(o["batch_size"] * o["accum"] == 16 for o in options), options
given = [o for o in options if o["cost"] == "as given"]
assert len(given) == 1 and given[0]["peak_bytes"] == p["peak_bytes"] and not given[0]["fits"], given
fits = [o for o in options if o["fits"]]
assert fits and options[:len(fits)] == fits and all(o["device_needed_bytes"] <= 12 * 2**20 for o in fits), options
assert all(o["device_needed_bytes"] >= o["peak_bytes"] for o in options), options
# Saving less is offered beside recomputing: BatchNorm from its output, and that with bf16; and for
# this AdamW run, 8-bit moments and Adafactor; each that changes the numbers after the ways that keep
# them, as bf16 autocast is.
savings = {o["activation_saving"] for o in options}
assert savings == {"standard", "bn-from-output", "bn-from-output+bit-masks+bf16"}, savings
assert {o["optimizer"] for o in options} == {"adamw", "adamw8bit", "adafactor"}, options
changes = lambda o: o["bf16"] or "bf16" in o["activation_saving"] or o["optimizer"] != "adamw"
exact = [i for i, o in enumerate(fits) if not changes(o)]
lossy = [i for i, o in enumerate(fits) if changes(o)]
assert not exact or not lossy or max(exact) < min(lossy), fits
# The optimizer's state on the host is offered too, never with the optimizer in backward.
offloaded = [o for o in options if o["offload_optimizer"]]
assert offloaded and not any(o["optimizer_in_backward"] for o in offloaded), offloaded
# And the saved activations on the host, never compressed ones (they move whole).
moved = [o for o in options if o["offload_activations"]]
assert moved and all(o["activation_saving"] == "standard" for o in moved), moved
PY
    # Offloaded, the plan has no optimizer bytes on the device, and says what the host holds.
    "$frugal" plan --model cnn --batch-size 16 --offload optimizer --json "$dir/offload.json" >"$dir/out"
    grep -q "^cnn, batch 1 x 16 of 32x32, adamw on the host: predicted peak" "$dir/out" || fail "no offload in the headline: $(head -1 "$dir/out")"
    grep -q "^on the host: .* pinned" "$dir/out" || fail "no host line: $(cat "$dir/out")"
    python3 - "$dir/offload.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
params = sum(l["param_bytes"] for l in p["layers"])
assert p["offload_optimizer"] and p["peak_bytes_by_tag"].get("optimizer", 0) == 0, p["peak_bytes_by_tag"]
assert all(l["optimizer_bytes"] == 0 for l in p["layers"]), p["layers"]
# AdamW's two moments and a copy of each weight and gradient: four times the weights.
assert p["host_bytes"] == sum(l["host_bytes"] for l in p["layers"]) == 4 * params, (p["host_bytes"], params)
PY
    # The saved activations offloaded: fewer activation bytes on the device, the host's figure their own.
    "$frugal" plan --model cnn --batch-size 8 --offload activations --json "$dir/moved.json" >"$dir/out"
    grep -q "^cnn, batch 1 x 8 of 32x32, adamw, saved activations on the host: predicted peak" "$dir/out" ||
      fail "no offloaded activations in the headline: $(head -1 "$dir/out")"
    grep -q "^on the host: .* pinned at most for the saved activations" "$dir/out" || fail "no host line: $(cat "$dir/out")"
    python3 - "$dir/plan.json" "$dir/moved.json" <<'PY'
import json, sys
kept, moved = (json.load(open(f)) for f in sys.argv[1:])
assert moved["offload_activations"] and moved["host_bytes"] == moved["activation_host_bytes"] > 0, moved
saved = lambda p: sum(l["saved_bytes"] for l in p["layers"])  # on the device at the end of the forward
assert saved(moved) < saved(kept), (saved(moved), saved(kept))
PY
    # The saving flags reach the plan: its headline and JSON say which, and it keeps fewer bytes.
    "$frugal" plan --model mobilenet_v2 --width 0.5 --batch-size 8 --bn-from-output --bit-masks --compress-activations int8 \
      --json "$dir/saving.json" >"$dir/out"
    grep -q "^mobilenet_v2, batch 1 x 8 of 32x32, adamw, saving bn-from-output+bit-masks+int8: predicted peak" "$dir/out" ||
      fail "no saving in the headline: $(head -1 "$dir/out")"
    "$frugal" plan --model mobilenet_v2 --width 0.5 --batch-size 8 --json "$dir/standard.json" >/dev/null
    python3 - "$dir/saving.json" "$dir/standard.json" <<'PY'
import json, sys
saving, standard = (json.load(open(f)) for f in sys.argv[1:])
assert saving["activation_saving"] == "bn-from-output+bit-masks+int8" and standard["activation_saving"] == "standard"
kept = lambda p: sum(l["saved_bytes"] for l in p["layers"])
assert kept(saving) < 0.2 * kept(standard), (kept(saving), kept(standard))
PY
    ;;
  plan_bounded)
    # Planning costs what the model's layers do, not what its tensors would hold: a classifier of a
    # million classes (5 GB of parameters) and a batch of a million 4096x4096 images are planned on
    # the meta device in little memory and time (before 2026-12-04: 5 GB of RSS, and 2 minutes; now
    # 12 MB and a tenth of a second each, so the 60 s timeout is a hang's, not a speed test).
    for args in "--num-classes 1000000" "--batch-size 1048576 --image-size 4096"; do
      # shellcheck disable=SC2086
      /usr/bin/time -f %M -o "$dir/rss" timeout 60 "$frugal" plan $args >"$dir/out" 2>&1 || fail "frugal plan $args: $(cat "$dir/out")"
      grep -q "predicted peak" "$dir/out" || fail "frugal plan $args: no headline: $(head -1 "$dir/out")"
      kib=$(tail -1 "$dir/rss")
      [ "$kib" -lt $((300 * 1024)) ] || fail "frugal plan $args reached $kib KiB of RSS, more than 300 MiB"
    done
    ;;
  plan_matches_train)
    # The planner's predicted peak against the peak a short run measures, for each model and the
    # mitigations that change what the forward saves (docs/memory-guide.md has the larger table).
    # Within 0.01% when the loader's worker has its two batches ahead at the peak; a worker that is
    # behind (a busy machine) leaves one or two batches fewer than the plan counts (a plan 0.78% over
    # the CNN's measured peak at batch 16, once in six runs). Two batches are at most 1.74% of a peak
    # here (the CNN at batch 64), so the check allows 2%.
    make_subset "$dir" 320 32
    # One configuration per line in plan_check_configs.txt (scripts/reproduce.sh runs the same list).
    mapfile -t configs <"$(dirname "$0")/plan_check_configs.txt"
    python3 "$(dirname "$0")/../scripts/plan-vs-train.py" "$frugal" "$dir" --tolerance 0.02 "${configs[@]}"
    ;;
  eval_checkpoint)
    make_subset "$dir" 640 200
    "$frugal" train --data "$dir" --model cnn --batch-size 16 --save "$dir/c.safetensors" --json "$dir/run.json" >/dev/null
    "$frugal" eval --data "$dir" --weights "$dir/c.safetensors" --json "$dir/eval.json" >"$dir/out"
    python3 - "$dir/run.json" "$dir/eval.json" <<'PY' || fail "eval disagrees with train: $(cat "$dir/eval.json")"
import json, sys
run, ev = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert abs(run["test_accuracy"] - ev["accuracy"]) < 1e-12 and ev["samples"] == 200, (run, ev)
assert len(ev["per_class"]) == 10 and sum(c["total"] for c in ev["per_class"]) == 200
assert sum(c["correct"] for c in ev["per_class"]) == round(ev["accuracy"] * 200)
PY
    grep -q "^cnn on cpu: test accuracy " "$dir/out" || fail "eval output: $(cat "$dir/out")"
    expect_exit 2 "$frugal" eval --data "$dir" --model mobilenet_v2 --weights "$dir/c.safetensors"
    expect_one_line_error "^frugal eval: $dir/c.safetensors: does not fit mobilenet_v2: "
    echo "not safetensors" >"$dir/text"
    expect_exit 2 "$frugal" eval --data "$dir" --weights "$dir/text"
    expect_one_line_error "^frugal eval: $dir/text: "
    ;;
  train_memory_timeline)
    # One step's memory as an HTML page and a Chrome trace: the same step, the same peak, valid files.
    make_subset "$dir" 96 32
    "$frugal" train --data "$dir" "${tiny[@]}" --memory-timeline "$dir/step.html" --chrome-trace "$dir/step.json" >/dev/null
    python3 - "$dir/step.html" "$dir/step.json" <<'PY' || fail "the timeline files disagree"
import json, re, sys
page, trace = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
data = json.loads(re.search(r"const timeline = (\{.*?\});</script>", page, re.S).group(1).replace("<\\/", "</"))
assert data["step"] == 2 and not re.search(r"(src|href)=|https?://(?!www\.w3\.org/2000/svg)", page), "not self-contained"
tags = [e["args"] for e in trace["traceEvents"] if e["name"] == "allocated by tag"]
peak = max(sum(t.values()) for t in tags)
assert peak == data["peak"]["bytes"] == max(sum(b) for b in data["bytes"]), (peak, data["peak"])
phases = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "phase"]
assert phases == ["forward", "backward", "optimizer step"], phases
modules = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "module"}
assert {"model", "features.0", "classifier"} <= modules, sorted(modules)[:10]
assert data["peak"]["phase"] in ("forward", "backward", "optimizer step"), data["peak"]
assert any(e["name"] == "memory" for e in trace["traceEvents"]), "the allocator's own counter is missing"
print(f"peak {peak} bytes in {data['peak']['phase']}, module {data['peak']['layer'] or '-'}; {len(tags)} points")
PY
    # --timeline-step picks another step; a run that ends before it is refused, leaving no file.
    "$frugal" train --data "$dir" "${tiny[@]}" --timeline-step 3 --chrome-trace "$dir/three.json" >/dev/null
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert "step 3 " in [e for e in t["traceEvents"] if e["name"]=="process_name"][0]["args"]["name"]' "$dir/three.json" ||
      fail "--timeline-step 3 did not record step 3"
    expect_exit 2 "$frugal" train --data "$dir" "${tiny[@]}" --timeline-step 4 --memory-timeline "$dir/four.html"
    expect_one_line_error "^frugal train: --timeline-step 4 is past --steps 3$"
    expect_exit 2 "$frugal" train --data "$dir" "${tiny[@]}" --steps 99 --timeline-step 4 --memory-timeline "$dir/four.html"
    expect_one_line_error "^frugal train: --timeline-step 4: the run ended before training that many steps$"
    [ ! -e "$dir/four.html" ] || fail "a timeline was written for a step that never ran"
    ;;
  train_memory_report)
    # The per-phase table on stdout and under "memory_report" in --json; the other keys unchanged.
    make_subset "$dir" 96 32
    "$frugal" train --data "$dir" "${tiny[@]}" --json "$dir/plain.json" >/dev/null
    "$frugal" train --data "$dir" "${tiny[@]}" --memory-report --json "$dir/run.json" >"$dir/out"
    grep -q "^memory by phase .*allocated.*reserved.*peak.*inactive split.*host RSS.*pinned host" "$dir/out" ||
      fail "no table: $(cat "$dir/out")"
    grep -q "^empty_cache()    reserved .* before, .* after$" "$dir/out" || fail "no empty_cache line: $(cat "$dir/out")"
    python3 - "$dir/plain.json" "$dir/run.json" <<'PY' || fail "memory_report in --json: $(cat "$dir/run.json")"
import json, os, sys
plain, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert list(run) == list(plain) + ["memory_report"], (list(plain), list(run))
report = run["memory_report"]
rows = {r["phase"]: r for r in report["phases"]}
assert list(rows) == ["setup", "forward", "backward", "optimizer step", "evaluation"], list(rows)
assert rows["forward"]["runs"] == 3 and rows["evaluation"]["runs"] == 1, rows
assert max(r["peak_bytes"] for r in rows.values()) == run["peak_allocated_bytes"], (rows, run["peak_allocated_bytes"])
for r in rows.values():
    assert r["allocated_bytes"] <= r["peak_bytes"] and r["allocated_bytes"] <= r["reserved_bytes"] and r["host_rss_bytes"] > 0, r
cache = report["empty_cache"]
# The run's tensors are gone, so the cache gives back what it held (FRUGAL_ALLOC=direct holds nothing).
direct = os.environ.get("FRUGAL_ALLOC") == "direct"
assert cache["reserved_after_bytes"] <= cache["reserved_before_bytes"] and (direct or cache["reserved_after_bytes"] < cache["reserved_before_bytes"]), cache
print("peaks:", {p: r["peak_bytes"] for p, r in rows.items()}, "empty_cache:", cache)
PY
    ;;
  train_run_report)
    # --report: a Markdown report with the options, mermaid charts of the real phases, the memory tables.
    make_subset "$dir" 96 32
    # (--bit-masks: the activation saving's row names the flags that set it.)
    "$frugal" train --data "$dir" "${tiny[@]}" --epochs 2 --steps 5 --bit-masks --report "$dir/run.md" --json "$dir/run.json" >/dev/null
    "$frugal" train --help >"$dir/help.txt"
    python3 - "$dir/run.md" "$dir/run.json" "$dir/help.txt" <<'PY' || fail "the report: $(cat "$dir/run.md")"
import json, re, sys
md, run, help_text = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), open(sys.argv[3]).read()
assert md.startswith("# frugal train: mobilenet_v2 on cpu\n"), md[:80]
assert "| --batch-size | 32 |" in md and "| --steps | 5 |" in md and f"{run['parameters']} parameters" in md
# Every option row names flags frugal train has.
rows = re.findall(r"^\| (--[^|]*) \|", md, re.M)
flags = {f.split(" (")[0] for row in rows for f in row.split(", ")}
assert "--bit-masks" in flags and all(re.search(rf"[ ,]{re.escape(f)}[ ,=\[]", help_text) for f in flags), \
    [f for f in flags if not re.search(rf"[ ,]{re.escape(f)}[ ,=\[]", help_text)]
assert "```mermaid\nflowchart LR\n" in md and "```mermaid\ngantt\n  dateFormat x\n" in md
tasks = re.findall(r"^  (setup \(data, model\)|epoch \d|evaluation after epoch \d) :(\d+), (\d+)$", md, re.M)
# Epoch 2 stops at step 5, and the run evaluates the model it stopped with.
assert [t[0] for t in tasks] == ["setup (data, model)", "epoch 1", "evaluation after epoch 1", "epoch 2",
                                 "evaluation after epoch 2"], tasks
starts = [int(t[1]) for t in tasks]
assert starts == sorted(starts) and all(int(e) > int(b) for _, b, e in tasks), tasks
assert int(tasks[-1][2]) <= run["wall_seconds"] * 1000 + 500, (tasks, run["wall_seconds"])  # the clock starts a little earlier
for phase in ("setup", "forward", "backward", "optimizer step", "evaluation"):
    assert re.search(rf"^\| {phase} \| ", md, re.M), phase
assert "`empty_cache()` at the end: reserved " in md
print(f"{len(tasks)} gantt tasks, {len(md)} bytes")
PY
    ;;
  train_memory_paths)
    # An output whose folder is missing: one line naming it, exit 2, before any training; nothing written.
    make_subset "$dir" 96 32
    for flag in --memory-timeline --chrome-trace --report; do
      expect_exit 2 "$frugal" train --data "$dir" "${tiny[@]}" "$flag" "$dir/absent/out"
      expect_one_line_error "^frugal train: .*$dir/absent/out"
      [ -z "$out" ] || fail "$flag with a bad path trained first: $out"
    done
    expect_exit 2 "$frugal" train --data "$dir" "${tiny[@]}" --memory-timeline ""
    expect_one_line_error "^frugal: "
    expect_exit 2 "$frugal" train --data "$dir" "${tiny[@]}" --timeline-step 0 --memory-timeline "$dir/x.html"
    expect_one_line_error "^frugal: "
    [ -z "$(ls -A "$dir" | grep -v -- '-ubyte$')" ] || fail "files left behind: $(ls "$dir")"
    ;;
  train_memory_browser)
    # The timeline page rendered by headless Chromium: its script ran and drew the chart, the figures
    # it computed equal those of the Chrome trace of the same run, and the screenshot shows a chart.
    browser=$(command -v chromium || command -v chromium-browser || true)
    [ -n "$browser" ] || { echo "skipped: chromium is not installed (Debian package chromium)"; exit 77; }
    make_subset "$dir" 96 32
    "$frugal" train --data "$dir" "${tiny[@]}" --memory-timeline "$dir/step.html" --chrome-trace "$dir/step.json" >/dev/null
    sandbox=()
    [ "$(id -u)" -ne 0 ] || sandbox=(--no-sandbox)  # Chromium refuses to run as root inside its sandbox
    # Every compositor stage before the screenshot: without it the bottom of the chart was sometimes
    # not yet painted (1 run in 6 here).
    chrome=("$browser" --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars --run-all-compositor-stages-before-draw
            --user-data-dir="$dir/profile" --window-size=1150,660 --virtual-time-budget=5000)
    timeout 120 "${chrome[@]}" --dump-dom "file://$dir/step.html" >"$dir/dom.html" 2>"$dir/chrome.err" ||
      fail "chromium --dump-dom failed: $(tail -5 "$dir/chrome.err")"
    timeout 120 "${chrome[@]}" --screenshot="$dir/shot.png" "file://$dir/step.html" >/dev/null 2>>"$dir/chrome.err" ||
      fail "chromium --screenshot failed: $(tail -5 "$dir/chrome.err")"
    python3 - "$dir/dom.html" "$dir/step.json" "$dir/shot.png" <<'PY' || fail "the rendered page"
import json, re, struct, sys, zlib
dom, trace = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert re.search(r'<body[^>]*data-drawn="yes"', dom), "the page's script did not finish"
areas = re.findall(r'<path class="area" data-tag="(\w+)"', dom)
assert len(re.findall(r'<rect class="phase"', dom)) == 3 and 'id="reserved-line"' in dom and 'id="peak-line"' in dom
tags = [e["args"] for e in trace["traceEvents"] if e["name"] == "allocated by tag"]
peak = int(re.search(r'id="peak-bytes" data-bytes="(\d+)"', dom).group(1))
assert peak == max(sum(t.values()) for t in tags), (peak, "trace", max(sum(t.values()) for t in tags))
drawn = {tag for tag in tags[0] if max(t[tag] for t in tags) > 0}
assert sorted(areas) == sorted(drawn), (areas, drawn)
for tag in tags[0]:
    shown = int(re.search(rf'id="max-{tag}" data-bytes="(\d+)"', dom).group(1))
    assert shown == max(t[tag] for t in tags), (tag, shown)
phase = re.search(r'id="peak-phase">([^<]*)<', dom).group(1)
# The screenshot: a PNG, decoded here (filters undone), with many colours, among them the param
# area's, which lies along the chart's bottom: the whole chart was painted.
png = open(sys.argv[3], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, len(png)
width, height, depth, kind = struct.unpack(">IIBB", png[16:26])
assert depth == 8 and kind in (2, 6), (depth, kind)
channels = 3 if kind == 2 else 4
idat, at = b"", 8
while at < len(png):
    length, name = struct.unpack(">I4s", png[at:at + 8])
    if name == b"IDAT": idat += png[at + 8:at + 8 + length]
    at += 12 + length
raw, stride, rows, prior = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
for y in range(height):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a, b = line[i - channels] if i >= channels else 0, prior[i]
        c = prior[i - channels] if i >= channels else 0
        p = a + b - c
        pred = [0, a, b, (a + b) // 2, a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c][f]
        line[i] = (line[i] + pred) & 255
    rows.append(bytes(line)); prior = line
pixels = [row[x * channels:x * channels + 3] for row in rows for x in range(width)]
colours = set(pixels)
param = sum(1 for p in pixels if p == bytes([0x4e, 0x79, 0xa7]))
assert len(colours) > 8 and param > 2000, (len(colours), param)  # the area, not just its 12x12 swatch
print(f"rendered: {len(areas)} areas, peak {peak} bytes in {phase}; screenshot {width}x{height}, {len(colours)} colours")
PY
    ;;
  ddp_matches_single)
    # Two ranks of 32 see, at every step, exactly the samples one process of 64 sees (the
    # DistributedSampler's interleaved share of the same shuffled order), and average their gradients:
    # after 20 steps (4 epochs of 320 samples) the weights agree within float rounding (the two
    # ranks' sums are added in another order), and each rank's activations are half the single
    # process's. SGD, not the default AdamW: AdamW divides each step by the root of the gradient's
    # second moment, so a last-bit difference in a gradient near zero becomes a step of the learning
    # rate's size: on the whole of Fashion-MNIST the weights end 6e-2 apart (docs/distributed.md), more
    # than gradients summed instead of averaged move them here (3e-2), so no AdamW bound tells the two
    # apart. SGD's step is proportional to the gradient: each weight tensor agrees within 2.1e-5 of
    # its largest value (measured; 1e-3 allowed), where summing instead of averaging ends them 0.4 apart.
    make_subset "$dir" 320 64
    cnn=(--model cnn --epochs 4 --steps 20 --seed 7 --workers 0 --optimizer sgd --lr 0.1)
    ranks 2 "$frugal" train --ddp "${cnn[@]}" --batch-size 32 --save "$dir/ddp.safetensors" --json "$dir/ddp.json" \
      --data "$dir" >"$dir/out" 2>&1 || fail "the 2-rank run failed: $(cat "$dir/out")"
    "$frugal" train "${cnn[@]}" --batch-size 64 --save "$dir/one.safetensors" --json "$dir/one.json" --data "$dir" >/dev/null
    difference=$(max_difference "$dir/ddp.safetensors" "$dir/one.safetensors" relative model.)
    echo "largest difference of the weights after 20 steps, relative to each tensor's largest value: $difference"
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$difference" ||
      fail "2 ranks of 32 end $difference away from 1 process of 64 (tolerance 1e-3 of each weight tensor's largest value)"
    [ "$(json_field "$dir/ddp.json" ranks)" = 2 ] || fail "the JSON does not say 2 ranks"
    [ "$(grep -c "^epoch 1/4" "$dir/out")" -ge 1 ] && [ "$(grep -c "checkpoint saved" "$dir/out")" -le 5 ] ||
      fail "rank 0 alone should print progress and checkpoints: $(cat "$dir/out")"
    # mpirun hands a rank a pseudo-terminal and copies it into the log: plain lines, no redraws.
    ! grep -q $'\r\|\x1b' "$dir/out" || fail "terminal control codes in mpirun's log: $(cat -A "$dir/out" | head)"
    one=$(json_field "$dir/one.json" peak_bytes_by_tag | python3 -c 'import ast,sys; print(ast.literal_eval(sys.stdin.read())["activation"])')
    for rank in 0 1; do
      mine=$(json_rank_tag "$dir/ddp.json" "$rank" activation)
      python3 -c "import sys; r = float(sys.argv[1]) / float(sys.argv[2]); sys.exit(0 if 0.45 <= r <= 0.55 else 1)" "$mine" "$one" ||
        fail "rank $rank's activation peak is $mine bytes, not about half of one process's $one"
    done
    ;;
  ddp_zero)
    # ZeRO-1, -2 and -3 end where plain DDP ends, each rank holding half of AdamW's state (ZeRO-2: and
    # fewer gradient bytes); so do bucket views. (What ZeRO-3 saves of the parameters shows on a model
    # of many layers, samples/20_zero_stages: this CNN's memory is mostly one weight, which a gathered
    # layer holds twice for a moment.)
    make_subset "$dir" 256 32
    cnn=(--model cnn --epochs 1 --batch-size 32 --seed 3 --workers 0 --no-eval --data "$dir")
    ranks 2 "$frugal" train --ddp "${cnn[@]}" --save "$dir/plain.safetensors" --json "$dir/plain.json" >/dev/null
    for stage in 1 2 3; do
      ranks 2 "$frugal" train --ddp --zero "$stage" "${cnn[@]}" --save "$dir/zero$stage.safetensors" --json "$dir/zero$stage.json" >/dev/null
      difference=$(max_difference "$dir/zero$stage.safetensors" "$dir/plain.safetensors")
      python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$difference" ||
        fail "ZeRO-$stage ends $difference away from plain DDP"
    done
    ranks 2 "$frugal" train --ddp --bucket-views --bucket-cap 64KiB "${cnn[@]}" --save "$dir/views.safetensors" >/dev/null
    difference=$(max_difference "$dir/views.safetensors" "$dir/plain.safetensors")
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$difference" ||
      fail "bucket views with 64 KiB buckets end $difference away from plain DDP"
    # The planner (frugal plan --ddp 2, which frugal train --ddp prints first) predicted rank 0's peak.
    for run in plain zero1 zero2 zero3; do
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r=d["peak_allocated_bytes"]/d["predicted_peak_bytes"]; sys.exit(0 if 0.99 <= r <= 1.01 else 1)' \
        "$dir/$run.json" || fail "the $run run's peak is not the planned one: $(cat "$dir/$run.json")"
    done
    plain=$(json_rank_tag "$dir/plain.json" 1 optimizer)
    for stage in 1 2 3; do
      zero=$(json_rank_tag "$dir/zero$stage.json" 1 optimizer)
      python3 -c "import sys; r = float(sys.argv[1]) / float(sys.argv[2]); sys.exit(0 if 0.45 <= r <= 0.55 else 1)" "$zero" "$plain" ||
        fail "rank 1's optimizer state is $zero bytes with ZeRO-$stage, not about half of $plain"
    done
    # ZeRO-3 where backward gathers layers out of forward's order: under bf16 autocast convolutions
    # save their 16-bit weight copy (so backward never gathers them) and checkpointed blocks gather
    # while recomputing. It must still end where plain DDP ends, and as planned.
    mixed=(--model mobilenet_v2 --width 0.25 --batch-size 16 --steps 4 --seed 5 --workers 0 --no-eval --data "$dir"
           --amp bf16 --checkpoint-blocks 1-4)
    ranks 2 "$frugal" train --ddp "${mixed[@]}" --save "$dir/mixed.safetensors" >/dev/null
    ranks 2 "$frugal" train --ddp --zero 3 "${mixed[@]}" --save "$dir/mixed3.safetensors" >/dev/null
    difference=$(max_difference "$dir/mixed3.safetensors" "$dir/mixed.safetensors")
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$difference" ||
      fail "ZeRO-3 under bf16 autocast and checkpointed blocks ends $difference away from plain DDP"
    zero1=$(json_rank_tag "$dir/zero1.json" 1 grad)
    zero2=$(json_rank_tag "$dir/zero2.json" 1 grad)
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$zero2" "$zero1" ||
      fail "rank 1's gradient bytes under ZeRO-2 ($zero2) are not below ZeRO-1's ($zero1)"

    ;;
  ddp_resume)
    # A 2-rank run stopped at step 3 and resumed on 2 ranks is the uninterrupted one, byte for byte;
    # resuming it in one process is refused, since its batches would be another run's.
    make_subset "$dir" 256 32
    cnn=(--model cnn --epochs 2 --batch-size 32 --seed 4 --workers 0 --no-eval --data "$dir")
    ranks 2 "$frugal" train --ddp "${cnn[@]}" --save "$dir/straight.safetensors" >/dev/null
    ranks 2 "$frugal" train --ddp "${cnn[@]}" --steps 3 --save "$dir/part.safetensors" >/dev/null
    ranks 2 "$frugal" train --ddp --zero 3 "${cnn[@]}" --resume "$dir/part.safetensors" --save "$dir/resumed.safetensors" >/dev/null
    difference=$(max_difference "$dir/straight.safetensors" "$dir/resumed.safetensors")
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-5 else 1)" "$difference" ||
      fail "a resumed 2-rank run (resumed under ZeRO-3) ends $difference away from an uninterrupted one"
    ranks 2 "$frugal" train --ddp "${cnn[@]}" --resume "$dir/part.safetensors" --save "$dir/again.safetensors" >/dev/null
    cmp "$dir/straight.safetensors" "$dir/again.safetensors" || fail "a resumed 2-rank run differs from an uninterrupted one"
    expect_exit 2 "$frugal" train "${cnn[@]}" --resume "$dir/part.safetensors"
    grep -q "the checkpoint has --ddp on 2 ranks, this run has none" <<<"$err" || fail "no reason given: $err"
    only_train_flags "$err"
    ;;
  ddp_killed_rank)
    # A rank killed mid-run ends the other: mpirun notices and names it, the survivor says which
    # collective it was in, and it all ends long before the watchdog's timeout would.
    make_subset "$dir" 8192 32
    start=$SECONDS
    ranks 2 "$frugal" train --ddp --model cnn --batch-size 16 --workers 0 --no-eval --ddp-timeout 30 --data "$dir" \
      >"$dir/out" 2>&1 &
    launcher=$!
    for _ in $(seq 1500); do grep -q "steps per epoch" "$dir/out" 2>/dev/null && break; sleep 0.02; done
    sleep 1  # into the steps: the collectives of training, not setup's
    victim=$(pgrep -f "frugal train --ddp --model cnn --batch-size 16" | grep -v "^$launcher\$" | tail -1)
    [ -n "$victim" ] || fail "no rank to kill: $(cat "$dir/out")"
    kill -9 "$victim"
    set +e; wait "$launcher"; code=$?; set -e
    seconds=$((SECONDS - start))
    [ "$code" -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
    [ "$seconds" -lt 30 ] || fail "the job took $seconds s to end, not less than the 30 s timeout"
    grep -q "exited on signal 9" "$dir/out" || fail "mpirun did not name the killed rank: $(cat "$dir/out")"
    grep -Eq "frugal rank [01]: ended by mpirun \(SIGTERM\) while .* was in flight|DistributedError" "$dir/out" ||
      fail "the surviving rank did not say which collective it was in: $(cat "$dir/out")"
    echo "ended in $seconds s with exit code $code"
    ;;
  ddp_ranks_disagree)
    # Ranks started with different flags: one error naming the flag and the ranks, exit 2, before the first step.
    make_subset "$dir" 64 16
    mini=(--data "$dir" --model cnn --no-eval --workers 0 --steps 2)
    for flag in "--batch-size 16" "--lr 0.5" "--seed 3" "--optimizer sgd" "--amp bf16" "--steps 1"; do
      set +e
      "${FRUGAL_MPIRUN:-mpirun}" -np 1 --oversubscribe "$frugal" train --ddp "${mini[@]}" --batch-size 32 : \
        -np 1 "$frugal" train --ddp "${mini[@]}" --batch-size 32 $flag >"$dir/out" 2>&1
      code=$?
      set -e
      [ "$code" -eq 2 ] || fail "ranks with $flag apart exited $code: $(cat "$dir/out")"
      for rank in 0 1; do
        grep -Eq "^frugal train \(rank $rank of 2\): the ranks were started with different flags: rank 1 has ${flag%% *}" "$dir/out" ||
          fail "rank $rank did not name ${flag%% *}: $(cat "$dir/out")"
      done
      ! grep -q "^epoch" "$dir/out" || fail "a step was taken"
    done
    # The same data on every rank: another --data (another size) is caught before the first step too.
    mkdir -p "$dir/other" && make_subset "$dir/other" 80 16
    set +e
    "${FRUGAL_MPIRUN:-mpirun}" -np 1 --oversubscribe "$frugal" train --ddp "${mini[@]}" --batch-size 32 : \
      -np 1 "$frugal" train --ddp "${mini[@]}" --batch-size 32 --data "$dir/other" >"$dir/out" 2>&1
    code=$?
    set -e
    [ "$code" -eq 2 ] || fail "ranks on other data exited $code: $(cat "$dir/out")"
    grep -Eq "^frugal train \(rank 0 of 2\): the ranks were started with different flags: rank 1 has --data \"80 samples" "$dir/out" ||
      fail "other data on rank 1 not named: $(cat "$dir/out")"
    ;;
  ddp_without_mpi)
    # A build without MPI (FRUGAL_MPI=OFF) trains as one process, and --ddp says what is missing.
    expect_exit 1 "$frugal" train --ddp --model cnn --steps 1
    grep -q "built without MPI (FRUGAL_MPI=OFF)" <<<"$err" || fail "no reason given: $err"
    ;;
  ddp_arguments)
    # Bad --ddp usage is refused in one line, exit 2, before any training.
    expect_exit 2 "$frugal" train --zero 1 --steps 1
    grep -q "need --ddp" <<<"$err" || fail "no reason for --zero without --ddp: $err"
    expect_exit 2 "$frugal" train --ddp --zero 4 --steps 1
    grep -q "zero: 4 not in {1,2,3}" <<<"$err" || fail "no reason for --zero 4: $err"
    expect_exit 2 "$frugal" train --ddp --zero 2 --bucket-views --steps 1
    grep -q "zero 2 frees the buckets" <<<"$err" || fail "no reason for --zero 2 --bucket-views: $err"
    expect_exit 2 "$frugal" train --ddp --batch-size auto --steps 1
    grep -q "batch-size auto with --ddp is not supported" <<<"$err" || fail "$err"
    expect_exit 2 "$frugal" train --ddp --bucket-cap 12 --steps 1
    grep -q "bucket-cap must be at least 1 KiB" <<<"$err" || fail "$err"
    expect_exit 2 "$frugal" train --ddp --ddp-timeout 0 --steps 1
    expect_exit 2 "$frugal" plan --bucket-views
    grep -q "need --ddp N" <<<"$err" || fail "$err"
    expect_exit 2 "$frugal" plan --ddp 0
    ;;
  train_outputs_refused)
    # Every output is checked before any work: one line naming the flag, exit 2, nothing replaced.
    # (Never the real /dev/null: a FIFO here stands for any special file; as root a device is refused alike.)
    make_subset "$dir" 64 16
    mini=(--data "$dir" --model cnn --batch-size 16 --steps 1 --no-eval --workers 0)
    mkfifo "$dir/fifo"
    mkdir "$dir/folder"
    refused() {  # refused PATTERN ARGS...: exit 2 with PATTERN as the one line, before the first step
      local pattern=$1; shift
      expect_exit 2 "$frugal" train "${mini[@]}" "$@"
      expect_one_line_error "^frugal train: $pattern"
      ! grep -q "^epoch\|^cnn," <<<"$out" || fail "work started before the refusal: $out"
    }
    refused "--save $dir/fifo: is a FIFO; frugal writes a new file or replaces a regular one" --save "$dir/fifo"
    refused "--json $dir/fifo: is a FIFO" --json "$dir/fifo"
    refused "--memory-timeline $dir/fifo: is a FIFO" --memory-timeline "$dir/fifo"
    [ -p "$dir/fifo" ] || fail "the FIFO was replaced"
    refused "--save $dir/folder: is a folder" --save "$dir/folder"
    refused "--save $dir/nope/c.st: its folder $dir/nope does not exist" --save "$dir/nope/c.st"
    refused "--json $dir/nope/x.json: its folder $dir/nope does not exist" --json "$dir/nope/x.json"
    refused "--json $dir/b: is also --save $dir/b; each output needs a file of its own" --save "$dir/b" --json "$dir/b"
    refused "--report $dir/./b: is also --save $dir/b" --save "$dir/b" --report "$dir/./b"
    cp "$dir/train-labels-idx1-ubyte" "$dir/labels.orig"
    refused "--save $dir/train-labels-idx1-ubyte: is the input --data $dir/train-labels-idx1-ubyte \(the same file\)" \
      --save "$dir/train-labels-idx1-ubyte"
    cmp -s "$dir/train-labels-idx1-ubyte" "$dir/labels.orig" || fail "the training labels were changed"
    "$frugal" train "${mini[@]}" --save "$dir/r.st" >/dev/null
    refused "--json $dir/r.st: is the input --resume $dir/r.st" --steps 2 --resume "$dir/r.st" --json "$dir/r.st"
    if [ "$(id -u)" -ne 0 ]; then
      mkdir "$dir/locked" && chmod a-w "$dir/locked"
      refused "--save $dir/locked/c.st: its folder $dir/locked is not writable" --save "$dir/locked/c.st"
    fi
    # A symbolic link is followed: the target gets the checkpoint, the link stays a link.
    ln -s "$dir/target.st" "$dir/link.st"
    expect_exit 0 "$frugal" train "${mini[@]}" --save "$dir/link.st"
    [ -L "$dir/link.st" ] || fail "the link was replaced by a file"
    "$frugal" eval --weights "$dir/target.st" --data "$dir" >/dev/null || fail "the link's target is no checkpoint"
    # Another user's link in a shared folder (sticky, writable by all, as /tmp) is not followed.
    if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
      mkdir -m 1777 "$dir/shared"
      ln -s "$dir/victim.txt" "$dir/shared/planted" && chown -h nobody "$dir/shared/planted"
      echo precious >"$dir/victim.txt"
      refused "--json $dir/shared/planted: a symbolic link of another user in a shared folder" \
        --json "$dir/shared/planted"
      [ "$(cat "$dir/victim.txt")" = precious ] || fail "the planted link's target was written"
    fi
    # --save may be the --resume file: a run continued in place.
    expect_exit 0 "$frugal" train "${mini[@]}" --steps 2 --resume "$dir/r.st" --save "$dir/r.st"
    # Other commands: the same check.
    expect_exit 2 "$frugal" eval --weights "$dir/r.st" --data "$dir" --json "$dir/fifo"
    expect_one_line_error "^frugal eval: --json $dir/fifo: is a FIFO"
    expect_exit 2 "$frugal" eval --weights "$dir/r.st" --data "$dir" --json "$dir/r.st"
    expect_one_line_error "^frugal eval: --json $dir/r.st: is the input --weights $dir/r.st"
    cp "$dir/t10k-labels-idx1-ubyte" "$dir/t10k.orig"
    expect_exit 2 "$frugal" eval --weights "$dir/r.st" --data "$dir" --json "$dir/t10k-labels-idx1-ubyte"
    expect_one_line_error "^frugal eval: --json $dir/t10k-labels-idx1-ubyte: is the input --data $dir/t10k-labels-idx1-ubyte"
    cmp -s "$dir/t10k-labels-idx1-ubyte" "$dir/t10k.orig" || fail "eval replaced the test labels"
    ln -s "$dir/loop2" "$dir/loop1" && ln -s "$dir/loop1" "$dir/loop2"
    refused "--save $dir/loop1: more than 40 symbolic links in a row" --save "$dir/loop1"
    expect_exit 2 "$frugal" plan --model cnn --json "$dir/folder"
    expect_one_line_error "^frugal plan: --json $dir/folder: is a folder"
    [ -z "$(find "$dir" -name '*.tmp-*')" ] || fail "temporary files left behind: $(ls "$dir")"
    ;;
  train_checkpoint_verified)
    # A checkpoint is checked whole before use: a flipped bit names its tensor, other data and an
    # edited position are refused, and --steps before the checkpoint says so.
    make_subset "$dir" 64 16
    mini=(--data "$dir" --model cnn --batch-size 16 --no-eval --workers 0)
    "$frugal" train "${mini[@]}" --steps 3 --save "$dir/c.st" >/dev/null
    python3 - "$dir/c.st" "$dir/flipped.st" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[-7] ^= 0x04  # a bit of the last tensor's bytes
open(sys.argv[2], "wb").write(data)
PY
    expect_exit 2 "$frugal" train "${mini[@]}" --steps 4 --resume "$dir/flipped.st"
    expect_one_line_error "^frugal train: $dir/flipped.st: tensor '[a-z0-9_.]+' is damaged: its bytes' CRC-32 is [0-9a-f]{8}, the checkpoint recorded [0-9a-f]{8}$"
    expect_exit 2 "$frugal" eval --weights "$dir/flipped.st" --data "$dir"
    grep -q "is damaged" <<<"$err" || fail "eval accepted a damaged checkpoint: $err"
    expect_exit 2 "$frugal" train "${mini[@]}" --steps 2 --resume "$dir/c.st"
    expect_one_line_error "the checkpoint is at step 3, so --steps 2 leaves nothing to train"
    other=$(mktemp -d)
    make_subset "$other" 80 16
    expect_exit 2 "$frugal" train --data "$other" --model cnn --batch-size 16 --no-eval --workers 0 --steps 5 --resume "$dir/c.st"
    expect_one_line_error "not the same data: the checkpoint's run trained on 64 samples \(fingerprint [0-9a-f]{8}\), this run's data has 80"
    rm -rf "$other"
    # A checkpoint whose CRC-32s match but whose weights hold NaN (a diverged run's, kept with
    # --allow-nonfinite) is refused by --resume and eval unless --allow-nonfinite.
    "$frugal" train "${mini[@]}" --steps 2 --lr 1e30 --allow-nonfinite --save "$dir/nan.st" >/dev/null
    expect_exit 2 "$frugal" train "${mini[@]}" --steps 4 --lr 1e30 --resume "$dir/nan.st"
    expect_one_line_error "^frugal train: $dir/nan.st: tensor '[a-z0-9_.]+' holds a NaN or an infinity: a diverged run's checkpoint \(--allow-nonfinite resumes it anyway\)$"
    expect_exit 2 "$frugal" eval --weights "$dir/nan.st" --data "$dir"
    expect_one_line_error "holds a NaN or an infinity: a diverged run's weights, nothing to evaluate$"
    expect_exit 0 "$frugal" train "${mini[@]}" --steps 3 --lr 1e30 --allow-nonfinite --resume "$dir/nan.st"
    # A bit of the metadata (the position's sample count) is checked as surely as a tensor's.
    python3 - "$dir/c.st" "$dir/meta.st" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
at = data.index(b'samples\\":') + len(b'samples\\":')
data[at] ^= 0x01  # a digit of the count: still valid JSON, still a number
open(sys.argv[2], "wb").write(data)
PY
    expect_exit 2 "$frugal" train "${mini[@]}" --steps 4 --resume "$dir/meta.st"
    expect_one_line_error "^frugal train: $dir/meta.st: the checkpoint's metadata is damaged: its CRC-32 is [0-9a-f]{8}, the checkpoint recorded [0-9a-f]{8}$"
    ;;
  train_diverged)
    # A NaN loss stops the run (exit 1) naming the step and the checkpoint kept; the checkpoint is
    # never replaced by one that will not load; --allow-nonfinite trains on; f16's skipped steps show.
    make_subset "$dir" 64 16
    mini=(--data "$dir" --model cnn --batch-size 16 --no-eval --workers 0)
    "$frugal" train "${mini[@]}" --steps 2 --save "$dir/good.st" >/dev/null
    cp "$dir/good.st" "$dir/c.st"
    expect_exit 1 "$frugal" train "${mini[@]}" --steps 8 --lr 1e30 --save "$dir/c.st" --save-every 1
    expect_one_line_error "^frugal train: error: the loss became (nan|inf|-inf) at step [0-9]+ \(epoch 1\); (the last good checkpoint is $dir/c.st \(step [0-9]+\)|no checkpoint was written yet)\. .*--allow-nonfinite"
    "$frugal" eval --weights "$dir/c.st" --data "$dir" >/dev/null || fail "the checkpoint kept does not load"
    expect_exit 1 "$frugal" train "${mini[@]}" --steps 8 --amp f16 --lr 1e30 --json "$dir/f16.json"
    grep -q "no checkpoint was kept (no --save)" <<<"$err" || fail "$err"
    [ ! -e "$dir/f16.json" ] || fail "a diverged run wrote its summary"
    expect_exit 0 "$frugal" train "${mini[@]}" --steps 3 --lr 1e30 --allow-nonfinite --save "$dir/nan.st" --json "$dir/nan.json"
    [ "$(json_field "$dir/nan.json" final_loss)" = None ] || fail "a NaN final loss is not null"
    expect_exit 0 "$frugal" train "${mini[@]}" --steps 4 --lr 1e30 --allow-nonfinite --resume "$dir/nan.st"
    # f16's loss scaling: the scale and the skipped steps in the summary and the JSON (the progress
    # line's: tests/cpu/test_progress.cpp).
    expect_exit 0 "$frugal" train "${mini[@]}" --steps 3 --amp f16 --json "$dir/scaled.json"
    grep -Eq "^loss scaling    scale [0-9.e+]+, [0-9]+ of 3 steps skipped" <<<"$out" || fail "no scale in the summary: $out"
    python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))["grad_scaler"]; assert g["scale"] > 0 and 0 <= g["skipped_steps"] <= 3, g' \
      "$dir/scaled.json" || fail "no grad_scaler in the JSON"
    # final_loss is this run's: a resumed run that takes no step has none.
    "$frugal" train "${mini[@]}" --epochs 1 --save "$dir/end.st" >/dev/null
    expect_exit 0 "$frugal" train "${mini[@]}" --epochs 1 --resume "$dir/end.st" --json "$dir/none.json"
    [ "$(json_field "$dir/none.json" final_loss)" = None ] || fail "a run that took no step has a final loss"
    grep -q "^final loss      none (this run took no step)" <<<"$out" || fail "$out"
    ;;
  train_second_interrupt)
    # SIGINT during the evaluation ends it (exit 130); a second SIGINT ends the run at once.
    # Steps of MobileNetV2 at batch 64 take a good part of a second here: the second signal (0.1 s
    # after the first; two at once would merge into one pending signal) lands while the first waits
    # for the step to end.
    make_subset "$dir" 3200 32
    long=(--data "$dir" --model mobilenet_v2 --batch-size 64 --epochs 20 --workers 0 --device cpu)
    "$frugal" train "${long[@]}" --save "$dir/c.st" >"$dir/out" 2>"$dir/err" &
    pid=$!
    for _ in $(seq 3000); do grep -q "^epoch 1/20 " "$dir/out" 2>/dev/null && break; sleep 0.02; done
    kill -INT "$pid"; sleep 0.1; kill -INT "$pid" 2>/dev/null || true
    set +e; wait "$pid"; code=$?; set -e
    [ "$code" -eq 130 ] || fail "twice interrupted run exited $code: $(cat "$dir/err")"
    grep -q "a second stop signal: ending at once" "$dir/err" || fail "no word of the second signal: $(cat "$dir/err")"
    [ -z "$(find "$dir" -name '*.tmp-*')" ] || fail "temporary files left behind"
    if [ -e "$dir/c.st" ]; then "$frugal" eval --weights "$dir/c.st" --data "$dir" >/dev/null || fail "half a checkpoint"; fi
    # The evaluation itself polls the signal: one training step, then 10000 test images (seconds),
    # interrupted a second after the start; no accuracy of part of the split is reported.
    make_subset "$dir" 64 10000
    "$frugal" train --data "$dir" --model mobilenet_v2 --batch-size 64 --epochs 1 --workers 0 --device cpu \
      >"$dir/out" 2>"$dir/err" &
    pid=$!
    for _ in $(seq 3000); do grep -q "^mobilenet_v2, " "$dir/out" 2>/dev/null && break; sleep 0.02; done
    sleep 1
    kill -INT "$pid"
    set +e; wait "$pid"; code=$?; set -e
    [ "$code" -eq 130 ] || fail "a run interrupted in its evaluation exited $code: $(cat "$dir/out" "$dir/err")"
    ! grep -q "test accuracy" "$dir/out" || fail "an interrupted evaluation reported an accuracy"
    ;;
  emulated_cuda_train)
    # The emulated CUDA build (FRUGAL_CUDA=emulated): `frugal train --device cuda:0` runs every kernel
    # in the emulator and every allocation, copy and stream through the emulated runtime, and must be
    # the CPU's run up to f32 rounding. The CNN (3 steps at the default batch of 64): losses within
    # 1e-5 relative (the same f32 sums in another order); weights within 1e-3 of each tensor's largest
    # (AdamW's first steps move a weight by about lr whatever its gradient's size, so a gradient near
    # zero whose last bits differ moves its weight by up to 2 lr: measured 4e-4); the caching
    # allocator's peaks the same bytes. A small MobileNetV2 (width 0.25, batch 8, 2 steps): BatchNorm
    # over 8 samples amplifies the rounding differences (measured 1.4e-4), so losses within 1e-3.
    "$frugal" info | grep -q "emulated runtime" || { echo "skipped: not the emulated CUDA build"; exit 77; }
    # A mistyped device count is an error naming the variable, not quietly one device.
    if FRUGAL_EMULATED_DEVICES=2x "$frugal" info >"$dir/out" 2>"$dir/err"; then fail "FRUGAL_EMULATED_DEVICES=2x was accepted"; fi
    grep -q "FRUGAL_EMULATED_DEVICES=2x: .*whole number from 1 to 8" "$dir/err" || fail "FRUGAL_EMULATED_DEVICES=2x: $(cat "$dir/err")"
    make_subset "$dir" 192 64
    export FRUGAL_EMULATOR_HAZARDS=0  # the kernels' race checks run in the GPU suite, kernel by kernel
    for model in cnn mobilenet_v2; do
      if [ "$model" = cnn ]; then args=(--model cnn --steps 3); else args=(--model mobilenet_v2 --width 0.25 --batch-size 8 --steps 2); fi
      for device in cpu cuda:0; do
        "$frugal" train --data "$dir" "${args[@]}" --workers 0 --device "$device" --save "$dir/$model-$device.st" \
          --json "$dir/$model-$device.json" >"$dir/out" 2>"$dir/err" || fail "$model on $device: $(cat "$dir/err")"
      done
      python3 - "$dir/$model-cuda:0.json" "$dir/$model-cpu.json" "$model" <<'PY' || fail "$model: cuda:0 is not the CPU's run"
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:3])
tolerance = 1e-5 if sys.argv[3] == "cnn" else 1e-3
for key in ("final_loss", "test_loss"):
    if abs(gpu[key] - cpu[key]) > tolerance * abs(cpu[key]):
        sys.exit(f"{key}: cuda:0 {gpu[key]}, cpu {cpu[key]}")
if gpu["device"] != "cuda:0" or cpu["device"] != "cpu":
    sys.exit(f"devices {gpu['device']} and {cpu['device']}")
if gpu["peak_allocated_bytes"] != cpu["peak_allocated_bytes"]:
    sys.exit(f"peak allocated: cuda:0 {gpu['peak_allocated_bytes']}, cpu {cpu['peak_allocated_bytes']}")
PY
      if [ "$model" = cnn ]; then
        difference=$(max_difference "$dir/cnn-cuda:0.st" "$dir/cnn-cpu.st" relative model.)
        python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$difference" ||
          fail "the CNN's weights on cuda:0 differ from the CPU's by $difference of a tensor's largest"
      fi
    done
    ;;
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
