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
// The host side needs no such care: frugal compiles in ISO mode, where GCC does not contract.
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
