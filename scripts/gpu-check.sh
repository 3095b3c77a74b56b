#!/usr/bin/env bash
# The one prepared script for a lent GPU machine: builds with CUDA, runs the GPU suite with
# FRUGAL_REQUIRE_GPU=1 (a missing device fails), the CPU suite, `frugal info`, the benchmarks and
# samples on the GPU, one epoch of `frugal train` (and with FRUGAL_LONG_RUN=1 the 15-epoch run), and last the GPU suite's kernels under compute-sanitizer's memcheck (cut off
# by a timeout so the whole run stays inside 8 minutes), writing every log to the folder given as
# its argument. Run scripts/gpu-prepare.sh here first and carry .gpu-deps; cuDNN and NCCL come from
# the Python wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) installed there.
#   scripts/gpu-check.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="/usr/local/cuda/bin:$PATH"
cd "$root"
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }
record() { local name=$1; shift; "$@" >"$out/$name.log" 2>&1; local rc=$?; echo "   $name: exit $rc" | tee -a "$out/summary.txt"; [ $rc -eq 0 ] || status=1; return $rc; }

step "machine"
{ nvidia-smi || true; nvcc --version || true; cmake --version | head -1; } >"$out/machine.log" 2>&1

# cuDNN and NCCL live inside Python wheels here; point CMake at the folders holding their libraries.
find_wheel_root() {  # find_wheel_root LIBRARY_FILE -> the folder above the lib/ that holds it
  local lib
  lib=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null |
        xargs -I{} find {} -name "$1" -path '*nvidia*' 2>/dev/null | head -1)
  [ -n "$lib" ] && dirname "$(dirname "$lib")"
}
cudnn_root=$(find_wheel_root 'libcudnn.so.9')
nccl_root=$(find_wheel_root 'libnccl.so.2')
echo "cuDNN root: ${cudnn_root:-not found}  NCCL root: ${nccl_root:-not found}" | tee -a "$out/summary.txt"
prefix=()
[ -d "$root/.gpu-deps/usr" ] && prefix=(-DCMAKE_PREFIX_PATH="$root/.gpu-deps/usr")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "configure and build (CUDA on)"
# The emulator needs Boost.Context and the CPU's library GEMM OpenBLAS; that machine has neither and
# needs neither: the GPU runs the real thing, and the blocked loop serves as the CPU reference.
record configure cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFRUGAL_CUDA=ON -DFRUGAL_EMULATOR=OFF -DFRUGAL_OPENBLAS=OFF \
  ${cudnn_root:+-DCUDNN_ROOT="$cudnn_root"} ${nccl_root:+-DNCCL_ROOT="$nccl_root"} "${prefix[@]}" || { echo "configure failed"; exit 1; }
record build cmake --build build-gpu --parallel "$(nproc)" || { tail -50 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH="${cudnn_root:+$cudnn_root/lib:}${nccl_root:+$nccl_root/lib:}${LD_LIBRARY_PATH:-}"

step "frugal info"
record info build-gpu/bin/frugal info
record info_json build-gpu/bin/frugal info --json

step "GPU suite (FRUGAL_REQUIRE_GPU=1) and CPU suite"
export FRUGAL_REQUIRE_GPU=1
record gpu_suite bash -c "cd build-gpu && ctest --output-on-failure -L gpu"
record cpu_suite bash -c "cd build-gpu && ctest --output-on-failure --parallel $(nproc) -L 'cpu|cli'"
record gpu_doctest build-gpu/bin/frugal_gpu_tests

step "benchmarks"
record bench_tensor_gpu build-gpu/bin/frugal bench tensor --json --device cuda:0
record bench_tensor_cpu build-gpu/bin/frugal bench tensor --json --device cpu
record bench_alloc_gpu build-gpu/bin/frugal bench alloc --json --device cuda:0
record bench_ops_gpu build-gpu/bin/frugal bench ops --json --device cuda:0
record bench_allreduce_gpu build-gpu/bin/frugal bench allreduce --json --device cuda:0  # NCCL, one rank
record tensor_tour build-gpu/bin/01_tensor_tour
record caching_allocator_sample build-gpu/bin/02_caching_allocator "$out/allocator_trace.json"
record convolution_sample build-gpu/bin/03_convolution

step "training on the GPU"
# Fashion-MNIST as gpu-prepare.sh staged it; the long run (15 epochs, CIFAR stem, augmentation) only
# when FRUGAL_LONG_RUN=1, since it takes minutes of the session's device time.
fashion="$root/.gpu-deps/usr/share/datasets/fashion-mnist"
[ -d "$fashion" ] || fashion=/usr/share/datasets/fashion-mnist
record train_gpu build-gpu/bin/frugal train --device cuda:0 --data "$fashion" --json "$out/train_gpu.json"
record bench_train_gpu build-gpu/bin/frugal bench train --json --device cuda:0
record bench_saving_gpu build-gpu/bin/frugal bench saving --json --device cuda:0  # x-hat's and the codecs' CUDA kernels
record training_sample build-gpu/bin/07_training
if [ "${FRUGAL_LONG_RUN:-0}" = 1 ]; then
  record train_long build-gpu/bin/frugal train --device cuda:0 --data "$fashion" --epochs 15 --cifar-stem --augment \
    --json "$out/train_long.json"
fi

step "compute-sanitizer memcheck over the GPU suite (timeout ${FRUGAL_MEMCHECK_SECONDS:=150} s)"
# Out-of-bounds and misaligned device accesses, in frugal's kernels and in what it passes to
# cuBLAS/cuDNN. A timeout (exit 124) means the suite was only partly checked: the log says how far.
record memcheck timeout "$FRUGAL_MEMCHECK_SECONDS" compute-sanitizer --tool memcheck --error-exitcode 1 \
  --print-limit 20 build-gpu/bin/frugal_gpu_tests --duration=true

step "done: overall status $status"
cat "$out/summary.txt"
exit $status
