// Hand-written CUDA GEMM (kernels/gemm_backends.h), kept as teaching material beside cuBLAS:
//   naive: one thread per element of C, reading its row of A and column of B from global memory:
//          every element of A is read N times, every element of B M times.
//   tiled: a block computes a kTile x kTile tile of C; in each phase its threads load one tile of
//          A and one of B into shared memory together, wait, and multiply out of shared memory, so
//          each global element is read M/kTile or N/kTile times instead. Same answer, fewer trips.
// Both take any m, n, k (edges are guarded), transposes, alpha and beta; they accumulate in float
// (double for f64). Built by nvcc for the GPU and for the CUDA emulator (core/cuda/kernel_support.h).
#include <type_traits>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/visit_floating.h"
#include "kernels/gemm_backends.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr int kTile = 16;  // 16 x 16 = 256 threads per block; two float tiles take 2 KiB of shared memory

// op(X)[row][col] for a row-major X of `stored_cols` columns, transposed or not.
template <typename T>
__device__ T element(const T* x, bool trans, std::int64_t stored_cols, std::int64_t row, std::int64_t col) {
  return trans ? x[col * stored_cols + row] : x[row * stored_cols + col];
}

template <typename T, typename C>
__device__ void store(T* c, std::int64_t index, C alpha, C sum, C beta) {
  const C old = beta == C(0) ? C(0) : beta * convert<C>(c[index]);  // beta 0 ignores C, even NaN
  c[index] = convert<T>(alpha * sum + old);
}

template <typename T, typename C>
__global__ void naive_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, C alpha,
                           const T* a, const T* b, C beta, T* c) {
  const std::int64_t row = blockIdx.y * static_cast<std::int64_t>(blockDim.y) + threadIdx.y;
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (row >= m || col >= n) return;
  C sum = 0;
  for (std::int64_t p = 0; p < k; ++p)
    sum += convert<C>(element(a, trans_a, trans_a ? m : k, row, p)) * convert<C>(element(b, trans_b, trans_b ? k : n, p, col));
  store(c, row * n + col, alpha, sum, beta);
}

template <typename T, typename C>
__global__ void tiled_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, C alpha,
                           const T* a, const T* b, C beta, T* c) {
  FRUGAL_DYNAMIC_SHARED(unsigned char, raw);  // tile of A, then tile of B, in the compute type
  C* tile_a = reinterpret_cast<C*>(raw);
  C* tile_b = tile_a + kTile * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t row = blockIdx.y * static_cast<std::int64_t>(kTile) + ty;
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(kTile) + tx;
  C sum = 0;
  for (std::int64_t phase = 0; phase < k; phase += kTile) {
    // Every thread loads one element of each tile (zero past the edges), even if its own C element is
    // outside the matrix: its neighbours need what it loads.
    const std::int64_t a_col = phase + tx, b_row = phase + ty;
    tile_a[ty * kTile + tx] = row < m && a_col < k ? convert<C>(element(a, trans_a, trans_a ? m : k, row, a_col)) : C(0);
    tile_b[ty * kTile + tx] = b_row < k && col < n ? convert<C>(element(b, trans_b, trans_b ? k : n, b_row, col)) : C(0);
    __syncthreads();  // both tiles complete
    for (int p = 0; p < kTile; ++p) sum += tile_a[ty * kTile + p] * tile_b[p * kTile + tx];
    __syncthreads();  // everyone done reading before the next phase overwrites the tiles
  }
  if (row < m && col < n) store(c, row * n + col, alpha, sum, beta);
}

template <typename T, typename C>
void launch(GemmImpl impl, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
            const void* a, const void* b, double beta, void* c) {
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  const auto* ta = static_cast<const T*>(a);
  const auto* tb = static_cast<const T*>(b);
  if (impl == GemmImpl::naive)
    FRUGAL_LAUNCH(grid, block, 0, nullptr, naive_gemm<T, C>)(trans_a, trans_b, m, n, k, static_cast<C>(alpha), ta, tb,
                                                             static_cast<C>(beta), static_cast<T*>(c));
  else
    FRUGAL_LAUNCH(grid, block, 2 * kTile * kTile * sizeof(C), nullptr, tiled_gemm<T, C>)(
        trans_a, trans_b, m, n, k, static_cast<C>(alpha), ta, tb, static_cast<C>(beta), static_cast<T*>(c));
}
}  // namespace

void gemm(GemmImpl impl, DType dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          double alpha, const void* a, const void* b, double beta, void* c) {
  FRUGAL_CHECK_VALUE(impl == GemmImpl::naive || impl == GemmImpl::tiled, "cuda gemm: the hand-written kernels are naive "
                     "and tiled, not ", gemm_impl_name(impl));
  visit_floating(dtype, "gemm kernels", [&]<typename T, typename C>() {
    launch<T, C>(impl, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
