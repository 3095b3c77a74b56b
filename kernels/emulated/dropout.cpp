// kernels/cuda/dropout.cu built by the host compiler for the CUDA emulator, in
// frugal::cuda_emulated (see core/cuda/kernel_support.h). The CPU suite runs it against the CPU
// kernel (tests/cpu/test_kernels_emulated.cpp).
#include "kernels/cuda/dropout.cu"
