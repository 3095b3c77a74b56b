// FRUGAL_HOST_DEVICE marks functions that both the host compiler and nvcc compile: index math and
// per-element work shared by CPU loops and CUDA kernels, so CPU tests exercise what GPU kernels run;
// and multiply_add_unfused, which rounds the same way on both.
#pragma once

#if defined(__CUDACC__)
#define FRUGAL_HOST_DEVICE __host__ __device__
#else
#define FRUGAL_HOST_DEVICE
#endif

// a * b + c with two roundings (product, then sum) on both devices. nvcc would otherwise contract
// it into one fma, which rounds once, and GPU values would differ from the CPU's in the last bit.
// On the host GCC contracts C++ too (-ffp-contract=fast is its default outside ISO C), but only where
// the instruction set has an FMA: code built for baseline x86-64 has none, and the loops compiled per
// instruction set (target_clones) that call this are compiled with -ffp-contract=off
// (kernels/CMakeLists.txt).
FRUGAL_HOST_DEVICE inline double multiply_add_unfused(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(__dmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}

FRUGAL_HOST_DEVICE inline float multiply_add_unfused(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;
#endif
}
