#!/usr/bin/env bash
# Fuzzes frugal's file parsers: builds every fuzz/fuzz_*.cpp target (fuzz/CMakeLists.txt lists them)
# with clang (libFuzzer, ASan + UBSan, coverage-instrumented frugal_core, frugal_data, frugal_nn and
# frugal_memory, nothing else) in build-fuzz/, then runs each for SECONDS (default 10) from its
# committed seeds in fuzz/corpus/<target>/. Inputs that reach new code go to build-fuzz/corpus/<target>/,
# never into the committed corpus; an input that crashes is saved in build-fuzz/crashes/<target>/ and
# fails the script.
#   scripts/fuzz.sh [SECONDS]          FRUGAL_FUZZ_BUILD=DIR builds in DIR instead
set -euo pipefail
source "$(dirname "$0")/common.sh"
FRUGAL_PACKAGES+=(clang libclang-rt-dev libomp-dev)  # libFuzzer and the sanitizers' runtimes; clang's OpenMP
frugal_install_packages

seconds=${1:-10}
build=${FRUGAL_FUZZ_BUILD:-$FRUGAL_ROOT/build-fuzz}
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$FRUGAL_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFRUGAL_CUDA=OFF -DFRUGAL_FUZZ=ON -DFRUGAL_BUILD_TESTS=OFF -DFRUGAL_EMULATOR=OFF -DFRUGAL_OPENBLAS=OFF
fi

targets=()
for source in "$FRUGAL_ROOT"/fuzz/fuzz_*.cpp; do
  targets+=("$(basename "$source" .cpp)")
done
cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"

for target in "${targets[@]}"; do
  mkdir -p "$build/corpus/$target" "$build/crashes/$target"
  log=$build/$target.log
  # -timeout: an input that takes 10 s is a hang, and a bug.
  if ! "$build/bin/$target" -max_total_time="$seconds" -timeout=10 -artifact_prefix="$build/crashes/$target/" \
      "$build/corpus/$target" "$FRUGAL_ROOT/fuzz/corpus/$target" >"$log" 2>&1; then
    cat "$log"
    echo "fuzz: $target FAILED; the input is in $build/crashes/$target/" >&2
    exit 1
  fi
  echo "fuzz: $target: $(grep -E '^#[0-9]+' "$log" | tail -n 1)"
done
