#!/usr/bin/env bash
# Checks one behaviour of `frugal train` and `frugal eval`: tests/train_check.sh CHECK PATH/TO/frugal
# Each trains on a small subset of Debian's Fashion-MNIST written into a temporary folder, so a check
# takes seconds; exits 77 (ctest: Skipped) when the package is not installed.
set -euo pipefail
check=$1
frugal=$2
source "$(dirname "$0")/cli_lib.sh"

fashion=/usr/share/datasets/fashion-mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# make_subset DIR TRAIN TEST: the first TRAIN training and TEST test samples of Fashion-MNIST as IDX
# files in DIR, named as the originals so the test split is found beside the training split.
make_subset() {
  [ -e "$fashion/train-images-idx3-ubyte.gz" ] || { echo "skipped: $fashion not installed (dataset-fashion-mnist)"; exit 77; }
  python3 - "$fashion" "$@" <<'PY'
import gzip, struct, sys
source, d, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", n_train), ("t10k", n_test)):
    images = gzip.open(f"{source}/{split}-images-idx3-ubyte.gz").read()
    labels = gzip.open(f"{source}/{split}-labels-idx1-ubyte.gz").read()
    open(f"{d}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + images[16:16 + n * 784])
    open(f"{d}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + labels[8:8 + n])
PY
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

case $check in
  train_arguments)
    make_subset "$dir" 64 32
    for bad in "--batch-size 0" "--batch-size 12x" "--lr -1" "--epochs 0" "--optimizer adam" "--schedule linear" \
               "--amp f32" "--memory-limit lots" "--warmup 1.5" "--model vgg16" "--save-every 5" \
               "--data $dir/absent" "--resume $dir/absent.safetensors" "--width 0.5 --model resnet18"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$frugal" train --data "$dir" $bad
      expect_one_line_error "^frugal( train)?: "  # "frugal:" when the command line parser refuses it
    done
    expect_exit 2 "$frugal" train --data "$dir" --batch-size 0
    expect_one_line_error "^frugal train: --batch-size must be a whole number in \[1, 1048576\], got '0'$"
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
    expect_exit 3 "$frugal" train --data "$dir" --model mobilenet_v2 --batch-size 256 --memory-limit 24MiB \
      --save "$dir/c.safetensors"
    grep -q "^frugal train: out of memory at step 1 (batch size 256 on cpu):" <<<"$err" || fail "no OOM headline: $err"
    grep -qi "memory limit\|out of memory" <<<"$err" || fail "no explanation: $err"
    size='[0-9.]+ (B|KiB|MiB|GiB)'
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
    cmp "$dir/c.safetensors" "$dir/before.safetensors" || fail "the OOM run changed the checkpoint"
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
    "$frugal" train "${long[@]}" --resume "$dir/c.safetensors" --steps 401 >/dev/null ||
      fail "the interrupted run's checkpoint does not resume"
    code=$(signal_after_progress TERM "${long[@]}" --no-eval)
    [ "$code" -eq 143 ] || fail "terminated run exited $code: $(cat "$dir/err")"
    grep -q "^frugal train: stopped by Terminated after step [0-9]* (no --save, nothing kept)$" "$dir/err" ||
      fail "SIGTERM message: $(cat "$dir/err")"
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
  *) fail "unknown check $check" ;;
esac
echo "ok: $check"
