// kernels/cuda/batch_norm.cu built by the host compiler for the CUDA emulator, in
// frugal::cuda_emulated (see core/cuda/kernel_support.h). The CPU suite runs these against the CPU
// kernels.
#include "kernels/cuda/batch_norm.cu"
