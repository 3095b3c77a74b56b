// Hand-written CUDA GEMM (kernels/gemm_backends.h), kept as teaching material beside cuBLAS:
//   naive: one thread per element of C, reading its row of A and column of B from global memory:
//          every element of A is read N times, every element of B M times.
//   tiled: a block computes a kTile x kTile tile of C; in each phase its threads load one tile of
//          A and one of B into shared memory together, wait, and multiply out of shared memory, so
//          each global element is read M/kTile or N/kTile times instead. Same answer, fewer trips.
//   register_blocked: a block computes a 128 x 128 tile of C with 256 threads, each thread an 8 x 8
//          patch held in registers. Per phase the block stages an 8-deep slice of A and of B in shared
//          memory; each thread then reads 8 values of A and 8 of B from shared memory and does 64
//          multiply-adds with them: 4 flops per shared-memory read instead of the tiled kernel's 1.
//          A thread's patch is strided (rows ty + 16 i, columns tx + 16 j), so a warp's shared reads
//          hit distinct banks or broadcast, and its stores to C are coalesced.
// Both take any n, k and m up to 65535 row tiles (the grid's y limit, checked in kernels/gemm.cpp;
// edges are guarded), transposes, alpha and beta; they accumulate in float
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
  FRUGAL_DYNAMIC_SHARED(C, tile_a);  // tile of A, then tile of B, in the compute type
  const auto tile_b = tile_a + kTile * kTile;
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

namespace blocked {
constexpr int kThreads = 16;                     // a 16 x 16 block of threads ...
constexpr int kPatch = 8;                        // ... each owning an 8 x 8 patch of C in registers
constexpr int kBlockTile = kThreads * kPatch;    // = a 128 x 128 tile of C per block
constexpr int kDepth = 8;                        // k-slice staged per phase: 128 x 8 of A, 8 x 128 of B
constexpr int kLoads = kBlockTile * kDepth / (kThreads * kThreads);  // elements of a slice per thread (4)
}  // namespace blocked

template <typename T, typename C>
__global__ void register_blocked_gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, C alpha,
                                      const T* a, const T* b, C beta, T* c) {
  using namespace blocked;
  FRUGAL_DYNAMIC_SHARED(C, slice_a);  // [kDepth][kBlockTile]: A's slice transposed, so a column is contiguous
  const auto slice_b = slice_a + kDepth * kBlockTile;  // [kDepth][kBlockTile]
  const int tx = threadIdx.x, ty = threadIdx.y, thread = ty * kThreads + tx;
  const std::int64_t row0 = blockIdx.y * static_cast<std::int64_t>(kBlockTile), col0 = blockIdx.x * static_cast<std::int64_t>(kBlockTile);
  C acc[kPatch][kPatch] = {};
  for (std::int64_t phase = 0; phase < k; phase += kDepth) {
    for (int e = 0; e < kLoads; ++e) {  // this thread's share of both slices (zero past the edges)
      const int i = thread + e * kThreads * kThreads;
      const int a_row = i / kDepth, a_col = i % kDepth;  // slice of A: kBlockTile rows x kDepth columns
      const std::int64_t ar = row0 + a_row, ac = phase + a_col;
      slice_a[a_col * kBlockTile + a_row] = ar < m && ac < k ? convert<C>(element(a, trans_a, trans_a ? m : k, ar, ac)) : C(0);
      const int b_row = i / kBlockTile, b_col = i % kBlockTile;  // slice of B: kDepth rows x kBlockTile columns
      const std::int64_t br = phase + b_row, bc = col0 + b_col;
      slice_b[b_row * kBlockTile + b_col] = br < k && bc < n ? convert<C>(element(b, trans_b, trans_b ? k : n, br, bc)) : C(0);
    }
    __syncthreads();  // both slices complete
    for (int p = 0; p < kDepth; ++p) {
      C a_frag[kPatch], b_frag[kPatch];
      for (int i = 0; i < kPatch; ++i) a_frag[i] = slice_a[p * kBlockTile + ty + i * kThreads];
      for (int j = 0; j < kPatch; ++j) b_frag[j] = slice_b[p * kBlockTile + tx + j * kThreads];
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < kPatch; ++j) acc[i][j] += a_frag[i] * b_frag[j];
    }
    __syncthreads();  // everyone done reading before the next phase overwrites the slices
  }
  for (int i = 0; i < kPatch; ++i)
    for (int j = 0; j < kPatch; ++j) {
      const std::int64_t row = row0 + ty + i * kThreads, col = col0 + tx + j * kThreads;
      if (row < m && col < n) store(c, row * n + col, alpha, acc[i][j], beta);
    }
}

template <typename T, typename C>
void launch_register_blocked(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                             const void* a, const void* b, double beta, void* c) {
  using namespace blocked;
  const dim3 block(kThreads, kThreads);
  const dim3 grid(static_cast<unsigned>((n + kBlockTile - 1) / kBlockTile), static_cast<unsigned>((m + kBlockTile - 1) / kBlockTile));
  FRUGAL_LAUNCH(grid, block, 2 * kDepth * kBlockTile * sizeof(C), nullptr, register_blocked_gemm<T, C>)(
      trans_a, trans_b, m, n, k, static_cast<C>(alpha), static_cast<const T*>(a), static_cast<const T*>(b),
      static_cast<C>(beta), static_cast<T*>(c));
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
  FRUGAL_CHECK_VALUE(impl == GemmImpl::naive || impl == GemmImpl::tiled || impl == GemmImpl::register_blocked,
                     "cuda gemm: the hand-written kernels are naive, tiled and register_blocked, not ", gemm_impl_name(impl));
  visit_floating(dtype, "gemm kernels", [&]<typename T, typename C>() {
    if (impl == GemmImpl::register_blocked)
      launch_register_blocked<T, C>(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    else
      launch<T, C>(impl, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
