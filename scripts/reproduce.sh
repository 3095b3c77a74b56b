#!/usr/bin/env bash
# Re-makes the measurements that README.md and docs/*.md quote, one file per command, so that a
# figure in the docs can point at the file that holds it.
#
#   scripts/reproduce.sh                 the quick ones (under 10 minutes on a 2-core machine): `frugal
#                                        info`, the `frugal plan` commands the docs quote, short
#                                        `frugal train` runs (planned against measured peaks), the
#                                        samples, the quick benchmarks (`frugal bench train` beside
#                                        today's PyTorch: run scripts/peers.sh once first)
#   scripts/reproduce.sh --long          also the training runs (hours): the default run, the recipe's
#                                        one-epoch runs, the accuracy sweeps over seeds, the 15-epoch runs
#   --out DIR                            where the results go (default build/results/YYYY-MM-DD/)
#   --only REGEX                         only the entries whose name matches (grep -E)
#   --bin DIR                            run the binaries in DIR as they are, without building
#                                        (default: build, through scripts/common.sh, then build/bin)
#   --emulated-bin DIR                   also the emulated CUDA build's entries (docs/cuda-emulator.md,
#                                        sample 15), with the binaries of a FRUGAL_CUDA=emulated build in DIR
#
# In DIR: NAME.txt holds what the command printed (stdout and stderr), NAME.json its JSON where it has
# --json (bench: the JSON is its output); index.tsv one line per entry (name, exit code, expected
# exit code, seconds, start time, load average at the start, command); machine.txt the date, the CPU
# and `frugal info`. Timings (img/s, seconds, speed ratios) are only as good as the machine was quiet:
# index.tsv's load average says how quiet it was. Memory, byte counts, planner figures and accuracies
# are deterministic for one build and thread count (but for the loader's batches in flight:
# docs/memory-guide.md).
#
# Every entry runs even when an earlier one failed; the script then lists the failures and exits 1.
# Exit 2 on bad arguments.
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() { sed -n '2,/^# Exit 2/s/^# \{0,1\}//p' "$0"; }
long=0 out="" only="" bin="" emulated_bin=""
while [ $# -gt 0 ]; do
  case $1 in
    --long) long=1 ;;
    --out) [ $# -ge 2 ] || { echo "reproduce.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift ;;
    --only) [ $# -ge 2 ] || { echo "reproduce.sh: --only needs a pattern" >&2; exit 2; }; only=$2; shift ;;
    --bin) [ $# -ge 2 ] || { echo "reproduce.sh: --bin needs a folder" >&2; exit 2; }; bin=$2; shift ;;
    --emulated-bin) [ $# -ge 2 ] && [ -d "$2" ] || { echo "reproduce.sh: --emulated-bin needs a folder" >&2; exit 2; }
      emulated_bin=$(cd "$2" && pwd); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "reproduce.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$bin" ]; then
  frugal_install_packages
  frugal_build "$FRUGAL_ROOT/build"
  bin=$FRUGAL_ROOT/build/bin
fi
[ -d "$bin" ] || { echo "reproduce.sh: --bin $bin: no such folder" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
frugal=$bin/frugal
out=${out:-$FRUGAL_ROOT/build/results/$(date +%F)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
data=$out/data   # the Fashion-MNIST subsets the short runs train on, kept beside their results
fashion=/usr/share/datasets/fashion-mnist
# OpenMPI refuses to run as root without these (tests/CMakeLists.txt sets them for the tests too).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

printf 'name\texit\texpected\tseconds\tstarted\tload average\tcommand\n' >"$out/index.tsv"
{
  echo "date:    $(date -Iseconds)"
  echo "host:    $(uname -srm)"
  echo "CPU:     $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores usable; $(grep -m1 -ow 'avx512f' /proc/cpuinfo || grep -m1 -ow 'avx2' /proc/cpuinfo || echo 'no AVX2')"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) at the start"
  echo "commit:  $(git -C "$FRUGAL_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$FRUGAL_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "binary:  $frugal"
  echo
  "$frugal" info 2>&1 || true
} >"$out/machine.txt"

failed=()
ran=0
# run_expect CODE NAME COMMAND...: runs COMMAND when NAME is selected, what it prints in $out/NAME.txt,
# and records it in index.tsv; an exit code other than CODE is a failure.
run_expect() {
  local want=$1 name=$2
  shift 2
  [ -z "$only" ] || grep -qE -- "$only" <<<"$name" || return 0
  local start=$SECONDS started load cmdline code=0
  started=$(date +%T)
  load=$(cut -d' ' -f1 /proc/loadavg)
  cmdline=$(printf '%q ' "$@")
  echo "reproduce: $name: ${cmdline% }"
  "$@" >"$out/$name.txt" 2>&1 </dev/null || code=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$code" "$want" "$((SECONDS - start))" "$started" "$load" "${cmdline% }" >>"$out/index.tsv"
  ran=$((ran + 1))
  if [ "$code" != "$want" ]; then
    failed+=("$name: exit $code, expected $want ($out/$name.txt)")
    echo "reproduce: $name FAILED: exit $code, expected $want; its output: $out/$name.txt" >&2
  fi
}
run() { run_expect 0 "$@"; }
# with_json NAME COMMAND...: the same, with --json $out/NAME.json added (plan, train, eval).
with_json() { local name=$1; shift; run "$name" "$@" --json "$out/$name.json"; }
# stdout_json NAME COMMAND...: a command whose --json prints the JSON (info, bench): NAME.json.
stdout_json() { local name=$1; shift; run "$name" bash -c '"$@" --json >"$0"' "$out/$name.json" "$@"; }
# timed NAME COMMAND...: the command's output, then its wall time and maximum resident set size.
timed() { local name=$1; shift; run "$name" /usr/bin/time -f "wall %e s, maximum RSS %M KB" "$@"; }
# subset DIR TRAIN TEST: the first TRAIN training and TEST test samples of Fashion-MNIST as IDX files
# (scripts/fashion-subset.py, as tests/train_check.sh's make_subset writes them), once per folder.
subset() {
  mkdir -p "$1"
  [ -e "$1/t10k-labels-idx1-ubyte" ] && return 0
  python3 "$FRUGAL_ROOT/scripts/fashion-subset.py" "$fashion" "$@"
}
# mpi NAME COMMAND...: COMMAND on 2 ranks under mpirun (as tests/train_check.sh's cli.ddp_* run it).
mpi() { local name=$1; shift; run "$name" mpirun -np 2 --oversubscribe "$@"; }

[ -e "$fashion/train-images-idx3-ubyte.gz" ] || { echo "reproduce.sh: $fashion is missing (package dataset-fashion-mnist)" >&2; exit 1; }
subset "$data/fmnist-320" 320 32   # tests/train_check.sh plan_matches_train's subset
subset "$data/fmnist-512" 512 32   # tests/train_check.sh train_out_of_memory's subset
cd "$out"   # the samples write their files (traces, timelines, snapshots) where they run

# ---- the quick entries ------------------------------------------------------------------------

# README.md: what the machine and the build are.
run info "$frugal" info
stdout_json info-json "$frugal" info

# docs/memory-guide.md, "Predicting the peak": the plan of the default run, and what planning costs
# (seconds and RSS, measured with /usr/bin/time; docs/training.md quotes batches 64 and 1024).
with_json plan-depth1 "$frugal" plan --depth 1
timed plan-cost-default "$frugal" plan
timed plan-cost-batch1024 "$frugal" plan --batch-size 1024
timed plan-cost-classes1000000 "$frugal" plan --num-classes 1000000
timed plan-cost-batch1048576-image4096 "$frugal" plan --batch-size 1048576 --image-size 4096
# docs/memory-guide.md: the options under a budget; docs/training.md: the out-of-memory example's budget.
with_json plan-budget64MiB "$frugal" plan --budget 64MiB
with_json plan-batch32-budget64MiB "$frugal" plan --batch-size 32 --budget 64MiB
with_json plan-batch256-budget24MiB "$frugal" plan --batch-size 256 --budget 24MiB
# docs/memory-guide.md, "Keeping less optimizer state": each smaller optimizer's plan, ordinary and fused.
for optimizer in adamw8bit adafactor; do
  with_json "plan-$optimizer" "$frugal" plan --optimizer "$optimizer"
  with_json "plan-$optimizer-in-backward" "$frugal" plan --optimizer "$optimizer" --optimizer-in-backward
done
# docs/memory-guide.md, "What a training step holds": the `other` bytes a checkpoint write stages.
with_json train-steps2-save "$frugal" train --steps 2 --no-eval --save "$out/train-steps2-save.safetensors"
# docs/memory-guide.md and docs/distributed.md: one of 4 data-parallel ranks.
with_json plan-ddp4-batch16 "$frugal" plan --ddp 4 --batch-size 16
with_json plan-ddp4-batch16-zero1-views "$frugal" plan --ddp 4 --batch-size 16 --zero 1 --bucket-views
with_json plan-ddp4-batch16-zero2 "$frugal" plan --ddp 4 --batch-size 16 --zero 2
with_json plan-ddp4-batch16-zero3 "$frugal" plan --ddp 4 --batch-size 16 --zero 3

# README.md: the planned peak beside the measured one, `frugal train --steps 3 --no-eval`.
with_json train-steps3 "$frugal" train --steps 3 --no-eval
# docs/memory-guide.md, "Held to account": planned against measured for every model at three batch
# sizes, plain, checkpointed and under bf16 autocast, on the whole of Fashion-MNIST.
configs=()
for model in "mobilenet_v2" "mobilenet_v2 --cifar-stem" "resnet18" "cnn"; do
  for batch in 16 32 64; do
    for way in "" " --checkpoint-activations" " --amp bf16"; do configs+=("--model $model --batch-size $batch$way"); done
  done
done
run plan-vs-train-models python3 "$FRUGAL_ROOT/scripts/plan-vs-train.py" "$frugal" "$fashion" "${configs[@]}"
# The same, for tests/train_check.sh plan_matches_train's configurations on its 320-sample subset
# (docs/memory-guide.md quotes the partial checkpointing rows).
mapfile -t check_configs <"$FRUGAL_ROOT/tests/plan_check_configs.txt"
run plan-vs-train-check python3 "$FRUGAL_ROOT/scripts/plan-vs-train.py" "$frugal" "$data/fmnist-320" "${check_configs[@]}"

# docs/training.md: --memory-report on the 320-sample subset; the out-of-memory explanation (exit 3);
# --batch-size auto under 512 MiB.
with_json train-width0.25-memory-report "$frugal" train --data "$data/fmnist-320" --model mobilenet_v2 --width 0.25 \
  --batch-size 32 --steps 4 --memory-report
run_expect 3 train-oom-batch256-24MiB "$frugal" train --data "$data/fmnist-512" --model mobilenet_v2 --batch-size 256 \
  --memory-limit 24MiB --no-plan-check
with_json train-batch-auto-512MiB "$frugal" train --batch-size auto --memory-limit 512MiB --steps 3 --no-eval

# docs/memory-guide.md and docs/distributed.md, "What it saves": 64 samples per step on 2 ranks, 3 steps
# (one process: train-steps3 above; each rank's peaks are in the JSON's per_rank).
mpi train-ddp2-batch32 "$frugal" train --ddp --batch-size 32 --steps 3 --no-eval --json "$out/train-ddp2-batch32.json"
mpi train-ddp2-batch32-zero1 "$frugal" train --ddp --zero 1 --batch-size 32 --steps 3 --no-eval \
  --json "$out/train-ddp2-batch32-zero1.json"
mpi train-ddp2-batch32-zero2 "$frugal" train --ddp --zero 2 --batch-size 32 --steps 3 --no-eval \
  --json "$out/train-ddp2-batch32-zero2.json"
mpi train-ddp2-batch32-zero3 "$frugal" train --ddp --zero 3 --batch-size 32 --steps 3 --no-eval \
  --json "$out/train-ddp2-batch32-zero3.json"

# The samples whose figures docs/memory-guide.md and docs/tensor.md quote (each prints what it measured).
for sample in 01_tensor_tour 02_caching_allocator 04_training_memory 05_streaming_data 06_small_model \
  08_batch_size 09_checkpointing 11_memory_monitoring 12_data_parallel 14_device_needed 16_optimizer_in_backward \
  17_optimizer_state 18_offload_optimizer 19_offload_activations 20_zero_stages; do
  run "sample-$sample" "$bin/$sample"
done

# Benchmarks (docs/allocator.md, docs/benchmarks.md): `frugal bench NAME --json`.
stdout_json bench-alloc "$frugal" bench alloc
stdout_json bench-tensor "$frugal" bench tensor
stdout_json bench-ops "$frugal" bench ops --device cpu --threads 2
# On one thread too: the 1-thread dropout and 1x1 weight-gradient figures.
stdout_json bench-ops-threads1 "$frugal" bench ops --device cpu --threads 1
# `frugal bench train --json`: MobileNetV2's training beside PyTorch (docs/benchmarks.md, README.md),
# on 2 threads and on 1. The peers: scripts/peers.sh's today's PyTorch (installed once beforehand;
# this script downloads nothing) and Debian's python3-torch, those present; the JSON's notes say which.
stdout_json bench-train "$frugal" bench train --device cpu --threads 2
stdout_json bench-train-threads1 "$frugal" bench train --device cpu --threads 1

# docs/cuda-emulator.md and sample 15's README: the emulated CUDA build (--emulated-bin), without the
# emulator's race checks, as tests/train_check.sh's emulated_cuda_train runs it.
if [ -n "$emulated_bin" ]; then
  run emulated-info "$emulated_bin/frugal" info
  timed emulated-train-cnn-cuda env FRUGAL_EMULATOR_HAZARDS=0 "$emulated_bin/frugal" train --device cuda:0 --model cnn \
    --steps 3 --no-eval --json "$out/emulated-train-cnn-cuda.json"
  timed emulated-train-cnn-cpu "$emulated_bin/frugal" train --device cpu --model cnn --steps 3 --no-eval \
    --json "$out/emulated-train-cnn-cpu.json"
  timed sample-15_emulated_gpu_step env FRUGAL_EMULATOR_HAZARDS=0 "$emulated_bin/15_emulated_gpu_step"
  # docs/cuda-emulator.md, "What a meeting point costs": a small MobileNetV2's two steps on cuda:0.
  subset "$data/fmnist-192" 192 64
  timed emulated-train-mobilenet-cuda env FRUGAL_EMULATOR_HAZARDS=0 "$emulated_bin/frugal" train --device cuda:0 \
    --data "$data/fmnist-192" --model mobilenet_v2 --width 0.25 --batch-size 8 --steps 2 --workers 0
  # The GPU suite's two whole-model cases, the longest of the suite (their race checks are off).
  timed emulated-gpu-models "$emulated_bin/frugal_gpu_tests" -tc='models: *'
  timed emulated-gpu-below-minimum "$emulated_bin/frugal_gpu_tests" -tc='below the minimum on cuda:0*'
  # docs/cuda-emulator.md's share of a step spent in the race checks: one step with them, one without.
  for hazards in 1 0; do
    timed "emulated-step-cnn-cuda-hazards$hazards" env FRUGAL_EMULATOR_HAZARDS=$hazards "$emulated_bin/frugal" train \
      --device cuda:0 --model cnn --steps 1 --workers 0 --no-eval
  done
fi

# ---- the long entries (--long) ------------------------------------------------------------------
if [ "$long" = 1 ]; then
  # README.md: what scripts/run.sh trains, `frugal train` with its defaults (one epoch).
  with_json train-default "$frugal" train
  # docs/memory-guide.md, "The device a run needs": each run trained whole under exactly the device its
  # plan says it needs (the defaults and ways `frugal plan --budget 64MiB` offers; 2 to 4 minutes each).
  run device-check python3 "$FRUGAL_ROOT/scripts/device-check.py" "$frugal" "" "--batch-size 16 --accum 4" \
    "--batch-size 8 --accum 8" "--batch-size 32 --accum 2 --bn-from-output" "--batch-size 32 --accum 2 --checkpoint-blocks 1-13" \
    "--checkpoint-activations --amp bf16" "--batch-size 16 --accum 4 --bn-from-output --bit-masks --compress-activations bf16"
  # docs/training.md, "The default recipe": one epoch at each learning rate tried (seed 0 unless said).
  with_json recipe-lr2e-3 "$frugal" train --lr 2e-3
  with_json recipe-lr2e-3-smoothing0.1 "$frugal" train --lr 2e-3 --label-smoothing 0.1
  with_json recipe-lr4e-3 "$frugal" train --lr 4e-3
  with_json recipe-lr4e-3-dropout0 "$frugal" train --lr 4e-3 --dropout 0
  with_json recipe-lr8e-3 "$frugal" train --lr 8e-3
  with_json recipe-lr8e-3-seed1 "$frugal" train --lr 8e-3 --seed 1
  with_json recipe-lr1.2e-2 "$frugal" train --lr 1.2e-2
  # docs/memory-guide.md, "Saving less than the minimum": the samples that train (minutes each), and
  # `frugal bench saving` (saved bytes per sample, and each way's speed).
  run sample-10_mixed_precision "$bin/10_mixed_precision"
  run sample-13_below_the_minimum "$bin/13_below_the_minimum"
  stdout_json bench-saving "$frugal" bench saving --threads 2
  # docs/benchmarks.md: the longer benchmarks (bench loader writes a multi-GB shard in a temporary folder).
  stdout_json bench-roofline "$frugal" bench roofline
  stdout_json bench-loader "$frugal" bench loader
  mpi bench-allreduce "$frugal" bench allreduce --json   # rank 0 prints the JSON: bench-allreduce.txt
  # docs/memory-guide.md, "Accuracy": two epochs per way and seed at lr 0.001 (about 15 minutes a run on
  # one core, two at a time: hours), then the default lr 0.01, standard against bf16 with bit masks.
  # The runs' JSON and logs stay in the sweep's folder; a sweep stopped half-way resumes there.
  run accuracy-by-way-lr1e-3 python3 "$FRUGAL_ROOT/scripts/accuracy-by-way.py" "$frugal" "$out/accuracy-by-way-lr1e-3" \
    --seeds 1-6 --seeds-of bn-bits=1-3 --seeds-of int8=1-3 \
    standard= "bn-bits=--bn-from-output --bit-masks" "bf16=--bn-from-output --bit-masks --compress-activations bf16" \
    "int8=--bn-from-output --bit-masks --compress-activations int8"
  run accuracy-by-way-lr1e-2 python3 "$FRUGAL_ROOT/scripts/accuracy-by-way.py" "$frugal" "$out/accuracy-by-way-lr1e-2" \
    --seeds 1-5 --train "--epochs 2 --lr 0.01 --workers 1" \
    standard= "bf16=--bn-from-output --bit-masks --compress-activations bf16"
  # docs/memory-guide.md, "Keeping less optimizer state": one epoch per optimizer and seed at lr 0.001
  # (Adafactor at its own default, a relative step of 0.01; about 9 minutes a run on one core, two at a time).
  run accuracy-by-optimizer python3 "$FRUGAL_ROOT/scripts/accuracy-by-way.py" "$frugal" "$out/accuracy-by-optimizer" \
    --seeds 1-4 --seeds-of adamw8bit=1-3 --seeds-of adafactor-lr1e-2=1-3 --jobs 2 --train "--epochs 1 --lr 0.001 --workers 1" \
    adamw= "adamw8bit=--optimizer adamw8bit" "adafactor-lr1e-2=--optimizer adafactor --lr 0.01"
  with_json train-adafactor-lr1e-3-seed1 "$frugal" train --optimizer adafactor --lr 0.001 --workers 1 --seed 1
  # docs/training.md, "Fifteen epochs on the CPU" (about half an hour each on 2 cores): the defaults,
  # the best recipe reached (recipe-15-epochs), more weight decay, crop and flip with label smoothing.
  with_json recipe-15-epochs-defaults "$frugal" train --epochs 15
  with_json recipe-15-epochs "$frugal" train --epochs 15 --label-smoothing 0.1
  with_json recipe-15-epochs-wd0.1 "$frugal" train --epochs 15 --label-smoothing 0.1 --wd 0.1
  with_json recipe-15-epochs-augment "$frugal" train --epochs 15 --augment --label-smoothing 0.1
fi

echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) at the end" >>"$out/machine.txt"
echo "reproduce: $ran entries in $SECONDS s; results in $out (index.tsv lists them)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "reproduce: ${#failed[@]} failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
