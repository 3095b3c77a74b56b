// The CPU's GEMM for 1x1 convolutions: C = A x B in f32, with B and C row-major matrices of long rows
// (a sample's [channels, pixels] planes, or a chunk's gathered ones) and A read element by element
// through any strides (the weight, its transpose, or on 1x1 maps a batch of samples). It reads B and A
// where they lie, without the packed copies a general GEMM makes (Note [A GEMM that does not pack],
// kernels/cpu/direct_gemm.cpp). kernels/conv.cpp sends the pointwise forward and input gradient here,
// and on 1x1 maps the weight gradient too (Note [Maps of one pixel: the batch is the matrix]).
// Not here: the weight gradient on larger maps (a product over the pixels, which OpenBLAS runs), other
// dtypes, the GPU, and alpha or beta: C is written, never added to.
#pragma once

#include <cstdint>

namespace frugal::cpu {

// c[i * ldc + j] = sum over p of a(i, p) * b[p * ldb + j], for i < m, j < n, p in order 0..k-1, with
// a(i, p) = a[i * a_row + p * a_column] (a row-major A: a_row = k, a_column = 1; its transpose:
// a_row = 1, a_column = m). On the calling thread: a caller shares a large product among threads by
// calling it on pieces of rows and columns (kernels/conv.cpp), and since each element's sum is the
// same chain whatever the piece, the result is the same for any thread count.
void direct_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t a_row,
                 std::int64_t a_column, const float* b, std::int64_t ldb, float* c, std::int64_t ldc);

}  // namespace frugal::cpu
