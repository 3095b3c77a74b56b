// kernels/cuda/elementwise.cu built by the host compiler for the CUDA emulator, in frugal::cuda_emulated
// (see core/cuda/kernel_support.h); one file per .cu, since each has file-local helpers. The CPU
// suite runs these against the CPU kernels.
#include "kernels/cuda/elementwise.cu"
