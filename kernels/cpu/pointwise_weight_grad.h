// The CPU's weight gradient of a 1x1 convolution in f32 on planes of whole 16-float vectors:
// dW = sum over samples of dY[n] X[n]^T as dot products along the pixels, read where they lie, without
// the packed copies a general GEMM makes (Note [The 1x1 weight gradient as dot products],
// kernels/cpu/pointwise_weight_grad.cpp). kernels/conv.cpp sends it the planes where it was measured
// to beat OpenBLAS's GEMMs: 8x8 and larger.
// Not here: planes that are not whole vectors, 1x1 maps (kernels/conv.cpp's one-pixel path), grouped
// convolutions, other dtypes, the GPU.
#pragma once

#include <cstdint>

namespace frugal::cpu {

inline constexpr std::int64_t kDotLanes = 16;  // floats summed side by side: an AVX-512 register

// Whether pointwise_weight_gradient takes planes of `plane` pixels: whole vectors of kDotLanes.
inline bool pointwise_weight_gradient_applies(std::int64_t plane) { return plane > 0 && plane % kDotLanes == 0; }

// dw[o * in_channels + i] = sum over n < batch and p < plane of
// grad_y[(n * out_channels + o) * plane + p] * x[(n * in_channels + i) * plane + p], written (not added).
// scratch: out_channels * in_channels * kDotLanes floats, 64-byte aligned (the running totals; the
// caller allocates it, so that the allocator counts it). Each element: per group of samples (1024
// pixels' worth, at least one sample), kDotLanes chains of fused multiply-adds, lane l over the
// pixels p = l (mod kDotLanes) sample after sample; each lane's group sums added up in group order;
// then the lanes added in a fixed order. So the same bits for any thread count and whichever tile
// computes it. Shared among the threads by cpu::parallel_for.
void pointwise_weight_gradient(std::int64_t batch, std::int64_t out_channels, std::int64_t in_channels,
                               std::int64_t plane, const float* grad_y, const float* x, float* dw, float* scratch);

}  // namespace frugal::cpu
