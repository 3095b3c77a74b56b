// CPU GEMM (kernels/gemm_backends.h): OpenBLAS for production, and a cache-blocked loop kept as the
// teaching version. f16/bf16 are widened to float, multiplied, and rounded back once.
//
// Note [Blocked GEMM]: C[i][j] += A[i][p] * B[p][j] reads B row by row in the innermost loop, so
// the compiler vectorises over j. Blocking keeps a kBlockK x kBlockN panel of B (about 256 KiB) in
// L2 while a kBlockM-row strip of A streams past it; threads take strips of rows of C, so no two
// write the same element. This reaches a fraction of OpenBLAS, whose micro-kernels keep C in
// registers; `frugal bench ops` measures how large a fraction.
#include <algorithm>
#include <vector>

#include "core/convert.h"
#include "kernels/gemm_backends.h"

#if FRUGAL_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace frugal::cpu {

namespace {

constexpr std::int64_t kBlockM = 64;   // rows of A and C per strip: one thread's unit of work
constexpr std::int64_t kBlockK = 256;  // depth of a panel: with kBlockN, 256 x 256 floats = 256 KiB of B
constexpr std::int64_t kBlockN = 256;

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

template <typename T, typename C>
void blocked(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, C alpha, const T* a,
             const T* b, C beta, T* c) {
  const std::vector<C> pa = pack<C>(a, trans_a, m, k), pb = pack<C>(b, trans_b, k, n);
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i0 = 0; i0 < m; i0 += kBlockM) {
    const std::int64_t i1 = std::min(m, i0 + kBlockM);
    std::vector<C> acc(static_cast<std::size_t>((i1 - i0) * n), C(0));
    for (std::int64_t p0 = 0; p0 < k; p0 += kBlockK)
      for (std::int64_t j0 = 0; j0 < n; j0 += kBlockN) {
        const std::int64_t p1 = std::min(k, p0 + kBlockK), j1 = std::min(n, j0 + kBlockN);
        for (std::int64_t i = i0; i < i1; ++i)
          for (std::int64_t p = p0; p < p1; ++p) {
            const C aip = pa[i * k + p];
            C* row = &acc[(i - i0) * n];
            const C* brow = &pb[p * n];
            for (std::int64_t j = j0; j < j1; ++j) row[j] += aip * brow[j];
          }
      }
    for (std::int64_t i = i0; i < i1; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        const C old = beta == C(0) ? C(0) : beta * convert<C>(c[i * n + j]);  // beta 0 ignores C, even NaN
        c[i * n + j] = convert<T>(alpha * acc[(i - i0) * n + j] + old);
      }
  }
}

#if FRUGAL_WITH_OPENBLAS
template <typename T>
void openblas(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const T* a,
              const T* b, double beta, T* c) {
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
  visit_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
#if FRUGAL_WITH_OPENBLAS
      if constexpr (std::is_same_v<T, C>) {
        if (impl == GemmImpl::library)
          return openblas<T>(trans_a, trans_b, m, n, k, alpha, static_cast<const T*>(a), static_cast<const T*>(b), beta,
                             static_cast<T*>(c));
      }
#endif
      blocked<T, C>(trans_a, trans_b, m, n, k, static_cast<C>(alpha), static_cast<const T*>(a), static_cast<const T*>(b),
                    static_cast<C>(beta), static_cast<T*>(c));
    } else {
      FRUGAL_THROW(DTypeError, "gemm takes floating dtypes, got ", dtype);
    }
  });
}

}  // namespace frugal::cpu
