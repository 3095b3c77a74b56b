// kernels/cuda/gemm.cu built by the host compiler for the CUDA emulator, in frugal::cuda_emulated
// (see core/cuda/kernel_support.h). The CPU suite runs it against the CPU GEMM.
#include "kernels/cuda/gemm.cu"
