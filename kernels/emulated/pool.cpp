// kernels/cuda/pool.cu built by the host compiler for the CUDA emulator, in frugal::cuda_emulated
// (see core/cuda/kernel_support.h). The CPU suite runs these against the CPU kernels
// (tests/cpu/test_pool_emulated.cpp).
#include "kernels/cuda/pool.cu"
