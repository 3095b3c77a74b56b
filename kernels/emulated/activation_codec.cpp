// kernels/cuda/activation_codec.cu built by the host compiler for the CUDA emulator, in
// frugal::cuda_emulated (see core/cuda/kernel_support.h). The CPU suite runs it against the CPU
// kernels (tests/cpu/test_activation_codec_emulated.cpp).
#include "kernels/cuda/activation_codec.cu"
