// CPU GEMM (kernels/gemm_backends.h): OpenBLAS for production, and a cache-blocked loop kept as the
// teaching version. f16/bf16 are widened to float, multiplied, and rounded back once.
//
// Note [Blocked GEMM]: C[i][j] += A[i][p] * B[p][j] reads B row by row in the innermost loop, so
// the compiler vectorises over j. Blocking keeps a kBlockK x kBlockN panel of B (256 KiB) in L2
// while strips of A stream past it, and a register-blocked micro-kernel (Note [Register blocking])
// does the arithmetic; `frugal bench ops` measures the result against OpenBLAS.
#include <algorithm>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "kernels/gemm_backends.h"
#include "kernels/visit_floating.h"

#if FRUGAL_WITH_OPENBLAS
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu_runtime.h"
#endif

namespace frugal::cpu {

namespace {

constexpr std::int64_t kBlockK = 256;  // depth of a panel: with kBlockN, 256 x 256 floats = 256 KiB of B,
constexpr std::int64_t kBlockN = 256;  // which stays in L2 while every strip of A streams past it

// The element (row, col) of op(X) where X is row-major [rows, cols] before the optional transpose.
template <typename T>
T at(const T* x, bool trans, std::int64_t cols_of_op, std::int64_t rows_of_op, std::int64_t row, std::int64_t col) {
  return trans ? x[col * rows_of_op + row] : x[row * cols_of_op + col];
}

// op(X) copied into a plain row-major [rows, cols] float/double buffer, so the blocked loop reads
// contiguous rows whatever the transposes (packing, as every fast GEMM does).
template <typename C, typename T>
std::vector<C> pack(const T* x, bool trans, std::int64_t rows, std::int64_t cols) {
  std::vector<C> packed(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) packed[r * cols + c] = convert<C>(at(x, trans, cols, rows, r, c));
  return packed;
}

// Note [Register blocking]: the micro-kernel computes a kMicroRows x kMicroCols tile of C in local
// accumulators that the compiler keeps in vector registers (6 x 32 floats: twelve AVX-512 registers),
// reading one element of A and one row of B per step, so each loaded value feeds many
// multiply-adds. It is compiled three times (AVX-512, AVX2, plain x86-64) and the best one for the
// running CPU is picked at load time (GCC's target_clones), so the binary still runs anywhere.
constexpr std::int64_t kMicroRows = 6;
constexpr std::int64_t kMicroCols = 32;

__attribute__((target_clones("avx512f", "avx2", "default")))
void micro_kernel(std::int64_t depth, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                  std::int64_t ldc) {
  float acc[kMicroRows][kMicroCols] = {};
  for (std::int64_t p = 0; p < depth; ++p) {
    const float* brow = b + p * ldb;
    for (std::int64_t i = 0; i < kMicroRows; ++i) {
      const float av = a[i * lda + p];
      for (std::int64_t j = 0; j < kMicroCols; ++j) acc[i][j] += av * brow[j];
    }
  }
  for (std::int64_t i = 0; i < kMicroRows; ++i)
    for (std::int64_t j = 0; j < kMicroCols; ++j) c[i * ldc + j] += acc[i][j];
}

// The same tile arithmetic for any size and type: edges, and f64.
template <typename C>
void edge_kernel(std::int64_t rows, std::int64_t cols, std::int64_t depth, const C* a, std::int64_t lda, const C* b,
                 std::int64_t ldb, C* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t p = 0; p < depth; ++p) {
      const C av = a[i * lda + p];
      for (std::int64_t j = 0; j < cols; ++j) c[i * ldc + j] += av * b[p * ldb + j];
    }
}

template <typename T, typename C>
void blocked(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, C alpha, const T* a,
             const T* b, C beta, T* c) {
  const std::vector<C> pa = pack<C>(a, trans_a, m, k), pb = pack<C>(b, trans_b, k, n);
  std::vector<C> sum(static_cast<std::size_t>(m * n), C(0));
  for (std::int64_t j0 = 0; j0 < n; j0 += kBlockN)
    for (std::int64_t p0 = 0; p0 < k; p0 += kBlockK) {
      const std::int64_t cols = std::min(kBlockN, n - j0), depth = std::min(kBlockK, k - p0);
      // Threads take strips of rows of C: no two write the same element.
      const std::int64_t strips = (m + kMicroRows - 1) / kMicroRows;
      parallel_for(strips, m * cols * depth, [&](std::int64_t strip) {
        const std::int64_t i0 = strip * kMicroRows, rows = std::min(kMicroRows, m - i0);
        const C* a_strip = &pa[i0 * k + p0];
        for (std::int64_t jr = 0; jr < cols; jr += kMicroCols) {
          const std::int64_t width = std::min(kMicroCols, cols - jr);
          const C* b_panel = &pb[p0 * n + j0 + jr];
          C* c_tile = &sum[i0 * n + j0 + jr];
          if constexpr (std::is_same_v<C, float>) {
            if (rows == kMicroRows && width == kMicroCols) {
              micro_kernel(depth, a_strip, k, b_panel, n, c_tile, n);
              continue;
            }
          }
          edge_kernel(rows, width, depth, a_strip, k, b_panel, n, c_tile, n);
        }
      });
    }
  parallel_for(m * n, m * n, [&](std::int64_t i) {
    const C old = beta == C(0) ? C(0) : beta * convert<C>(c[i]);  // beta 0 ignores C, even NaN
    c[i] = convert<T>(alpha * sum[i] + old);
  });
}

#if FRUGAL_WITH_OPENBLAS
// OpenBLAS takes as many threads as OpenMP's count says at the call (Debian's OpenMP build), so a
// cap from set_blas_threads (Note [OpenBLAS threads and bits], kernels/cpu_runtime.h) lowers that
// count around the call, on this thread only.
class BlasThreadCap {
 public:
  // No cap (0, the default) asks OpenMP nothing: most GEMMs run uncapped.
  BlasThreadCap() : cap_(blas_threads()), saved_(cap_ > 0 ? omp_get_max_threads() : 0) {
    if (lowers()) omp_set_num_threads(cap_);
  }
  ~BlasThreadCap() {
    if (lowers()) omp_set_num_threads(saved_);
  }
  BlasThreadCap(const BlasThreadCap&) = delete;
  BlasThreadCap& operator=(const BlasThreadCap&) = delete;

 private:
  bool lowers() const { return cap_ > 0 && cap_ < saved_; }

  int cap_, saved_;
};

template <typename T>
void openblas(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const T* a,
              const T* b, double beta, T* c) {
  const BlasThreadCap cap;
  const auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto lda = static_cast<blasint>(trans_a ? m : k), ldb = static_cast<blasint>(trans_b ? k : n);
  const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n), K = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, static_cast<float>(alpha), a, lda, b, ldb, static_cast<float>(beta), c, N);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, N);
}
#endif

}  // namespace

void gemm(GemmImpl impl, DType dtype, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          double alpha, const void* a, const void* b, double beta, void* c) {
  FRUGAL_CHECK_VALUE(impl == GemmImpl::library || impl == GemmImpl::blocked, "cpu gemm: no ", gemm_impl_name(impl),
                     " implementation on the CPU (library or blocked)");
  visit_floating(dtype, "gemm", [&]<typename T, typename C>() {
#if FRUGAL_WITH_OPENBLAS
    if constexpr (std::is_same_v<T, C>) {
      if (impl == GemmImpl::library)
        return openblas<T>(trans_a, trans_b, m, n, k, alpha, static_cast<const T*>(a), static_cast<const T*>(b), beta,
                           static_cast<T*>(c));
    }
#endif
    blocked<T, C>(trans_a, trans_b, m, n, k, static_cast<C>(alpha), static_cast<const T*>(a), static_cast<const T*>(b),
                  static_cast<C>(beta), static_cast<T*>(c));
  });
}

}  // namespace frugal::cpu
