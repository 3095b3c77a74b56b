// Library-backed peers for the GPU cases of `frugal bench`, declared without CUDA types so the
// benchmark sources stay plain C++. Defined in cuda_peers.cpp, which is built only with CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace frugal::bench::cuda_peers {

// dst = transpose of src, both n x n row-major f32 on the current device (cublasSgeam).
void cublas_transpose(float* dst, const float* src, int n);
// n uniform floats from cuRAND's Philox4_32_10 generator, the same algorithm frugal uses.
void curand_uniform(float* dst, std::size_t n, std::uint64_t seed);

}  // namespace frugal::bench::cuda_peers
