// core/cuda/kernels.cu built by the host compiler for the CUDA emulator: the same source, with
// CUDA's names supplied by emu/cuda_emu.h, defining frugal::cuda_emulated::copy_strided and
// the rest (declared in core/copy.h). The CPU suite runs these against the CPU kernels.
#include "core/cuda/kernels.cu"
