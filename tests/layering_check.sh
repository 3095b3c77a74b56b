#!/usr/bin/env bash
# Checks the layering that docs/architecture.md draws, on the sources: tests/layering_check.sh SOURCE_DIR
#   - each layer includes only its own headers and those of the layers below it;
#   - core/ neither includes nor links a CUDA library other than the runtime (cuBLAS and cuDNN belong
#     to kernels/, NCCL to dist/), and no layer but dist/ includes NCCL or MPI;
#   - the tools stay out of the runtime: no emulator and no allocation traces under core/;
#   - memory/ and core/ know no model: a model's trace is recorded under models/, never described there.
set -uo pipefail
cd "$1" || exit 1
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

# layer: the top-level folders whose headers it may include, itself first.
declare -A allowed=(
  [core]="core"
  [kernels]="kernels core"
  [nn]="nn kernels core"
  [models]="models nn kernels core"
  [train]="train models data dist nn kernels memory core"  # --ddp trains through dist/; the planner replays traces (memory/)
  [data]="data core"
  [dist]="dist nn kernels core"  # data parallelism wraps modules and optimizers
  [memory]="memory core"
  [emu]="emu core"
)
# The two seams where a kernel source meets the emulator: kernels/emulated/ builds kernels/'s CUDA
# sources for it (the test-only library frugal_kernels_emulated), and core/cuda/kernel_support.h
# includes it only when a kernel source is compiled by the host compiler for the emulator.
emulator_seams='^(kernels/emulated/[^:]+|core/cuda/kernel_support\.h):[0-9]+:#include "emu/'
for layer in "${!allowed[@]}"; do
  [ -d "$layer" ] || continue
  pattern=$(tr ' ' '|' <<<"${allowed[$layer]}")
  # frugal/ is the generated build_info.h; every other quoted include names a top-level folder.
  bad=$(grep -rnE '^#include "[a-z_]+/' "$layer" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' |
        grep -vE "#include \"($pattern|frugal)/" | grep -vE "$emulator_seams")
  [ -z "$bad" ] || fail "$layer/ reaches outside ${allowed[$layer]// /, }:"$'\n'"$bad"
done
bad=$(grep -rnE '^#include <(cublas|cudnn|nccl|curand|cufft|cusparse)' core)
[ -z "$bad" ] || fail "core/ includes a CUDA library other than the runtime:"$'\n'"$bad"
bad=$(grep -nE 'target_link_libraries.*(cublas|cudnn|nccl|curand)' core/CMakeLists.txt)
[ -z "$bad" ] || fail "core/ links a CUDA library other than the runtime:"$'\n'"$bad"
bad=$(grep -rlE '^#include <nccl' --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --exclude-dir='build*' --exclude-dir=.git . | grep -v '^\./dist/')
[ -z "$bad" ] || fail "NCCL is included outside dist/:"$'\n'"$bad"
bad=$(grep -rlE '^#include <mpi\.h>' --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --exclude-dir='build*' --exclude-dir=.git . | grep -vE '^\./dist/[a-z_]+\.cpp$')
[ -z "$bad" ] || fail "MPI is included outside dist/'s sources (no header names an MPI type):"$'\n'"$bad"

[ ! -e core/emu ] || fail "the CUDA emulator is a tool, not the runtime: it belongs in emu/, not core/emu/"
bad=$(find core -name 'alloc_trace*')
[ -z "$bad" ] || fail "allocation traces are a tool, not the runtime: they belong in memory/, not $bad"

bad=$(grep -rniE 'mobilenet|resnet' core memory --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh')
[ -z "$bad" ] || fail "core/ and memory/ serve any model, so they name none (models/ records what a model allocates):"$'\n'"$bad"

[ "$status" -eq 0 ] && echo "layering: every layer includes only itself and what lies below; core links only the CUDA runtime; core and memory name no model"
exit "$status"
