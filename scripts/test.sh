#!/usr/bin/env bash
# Builds and runs the whole test suite: installs what is missing, builds in build/, runs ctest.
# GPU cases are reported as Skipped when no CUDA device is usable (FRUGAL_REQUIRE_GPU=1 makes that
# a failure).
#   scripts/test.sh              the full build (CUDA compiled in when nvcc exists) and every suite
#   scripts/test.sh --sanitize   a CPU-only ASan+UBSan build (warnings are errors) in build-sanitize/,
#                                CPU, CLI and sample suites but the checks labelled slow
#   scripts/test.sh --emulated   the emulated CUDA build (FRUGAL_CUDA=emulated) with ASan+UBSan in
#                                build-emulated/: the GPU suite, the emulated training check, sample 15
set -euo pipefail
source "$(dirname "$0")/common.sh"
frugal_install_packages

# ctest runs tests side by side, one per core, and each may open OpenMP threads; GNU OpenMP's threads
# spin while they wait for work, taking the core the other test needs. Waiting passively keeps the
# suite from slowing down several-fold on a loaded machine (sample 02 under ASan: 40.7 s spinning,
# 10.8 s passive). A caller's own setting wins.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

case ${1:-} in
  "")
    frugal_build "$FRUGAL_ROOT/build"
    cd "$FRUGAL_ROOT/build"
    ctest --output-on-failure --parallel "$(nproc)"
    ;;
  --sanitize)
    frugal_build "$FRUGAL_ROOT/build-sanitize" -DFRUGAL_CUDA=OFF -DFRUGAL_SANITIZE=ON -DFRUGAL_WARNINGS_AS_ERRORS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
    cd "$FRUGAL_ROOT/build-sanitize"
    # FRUGAL_ALLOC=direct: tensors bypass the caching allocator, so ASan sees every buffer's bounds.
    FRUGAL_ALLOC=direct ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure --parallel "$(nproc)" -L 'cpu|cli|sample' -LE slow
    ;;
  --emulated)
    # The whole CUDA path without a GPU: the emulated CUDA build (FRUGAL_CUDA=emulated, docs/cuda-emulator.md)
    # with ASan + UBSan, in build-emulated/. Only what runs there is built: the command, the GPU suite
    # and sample 15. FRUGAL_ALLOC=direct makes every device tensor its own emulated cudaMalloc, so ASan
    # sees each one's bounds; the GPU suite's allocator cases make their own caching allocators.
    # The suite's two whole-model cases (torchvision's three models; MobileNetV2 under four ways of
    # saving on two stems) are the longest, several minutes each under ASan (docs/building.md).
    cmake -S "$FRUGAL_ROOT" -B "$FRUGAL_ROOT/build-emulated" -G Ninja -DFRUGAL_CUDA=emulated -DFRUGAL_SANITIZE=ON \
      -DFRUGAL_WARNINGS_AS_ERRORS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$FRUGAL_ROOT/build-emulated" --parallel "$(nproc)" --target frugal frugal_gpu_tests 15_emulated_gpu_step
    cd "$FRUGAL_ROOT/build-emulated"
    FRUGAL_ALLOC=direct ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure --parallel "$(nproc)" -L 'gpu|sample' -R '^gpu|^sample.15_emulated_gpu_step$'
    ;;
  *)
    echo "usage: scripts/test.sh [--sanitize | --emulated]" >&2
    exit 2
    ;;
esac
