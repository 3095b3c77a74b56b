// C = A x B for 1x1 convolutions (kernels/cpu/direct_gemm.h): register tiles that read B's rows and
// A's elements in place. Compiled with multiply-add contraction (kernels/CMakeLists.txt): each
// element's sum is a chain of fused multiply-adds in the order of p, in every tile (the last columns
// too, through a zero-padded copy), so every element has the same bits whichever tile computed it.
// Not here: the weight gradient's GEMM on maps larger than 1x1, other dtypes, alpha and beta
// (kernels/cpu/gemm.cpp has the general GEMM).
#include "kernels/cpu/direct_gemm.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/octets.h"

namespace frugal::cpu {

// Note [A GEMM that does not pack]
// A general GEMM (OpenBLAS) first copies blocks of A and B into packed buffers laid out for its
// micro-kernel, and with beta = 0 it zeroes C before adding every block's product into it. That pays
// when each packed value feeds many multiply-adds. A 1x1 convolution's GEMM is C[C_out, pixels] =
// W[C_out, C_in] x X[C_in, pixels] with C_in and C_out from 16 to 1280: each value of X feeds only
// C_out multiply-adds. Here a tile of R rows x W vectors of C is summed in registers over all of p,
// reading the W vectors of B's row p in place and broadcasting R elements of A, then stored once: A
// (a weight, at most 1.6 MiB in MobileNetV2: 1280 x 320) stays in L2 and a panel of B's columns, k rows of W vectors,
// in L1 or L2 while every row tile passes over it. R x W accumulators and W vectors of B must fit the
// vector registers: 8 x 2 of 16 floats with AVX-512 (32 registers; MobileNetV2's channel counts are
// multiples of 8), 6 x 2 of 8 with AVX2 (16 registers). Rows past the last full tile take tiles of
// one row; columns past the last full panel take tiles of one vector (last_columns).
// Measured on one thread of the AMD EPYC development machine (AVX-512), operands in cache, GFLOP/s
// against OpenBLAS 0.3.21's sgemm: 95-107 against 56-75 on the CIFAR stem's 32x32 maps with C_in or
// C_out of 16-24 ([96, 16] x [16, 1024], [24, 144] x [144, 1024], ...), 99-116 against 87-105 on the
// 256-column chunks of the smaller maps, 105-115 against 100-105 on the largest (1280 x 320); with the
// transposed weight of the input gradient 1.0-1.8x. Where X and C stream from memory (a batch of 32x32
// samples, each product 384-576 KiB) both are bound by memory and run alike.
namespace {

typedef float Sixteen __attribute__((vector_size(16 * sizeof(float))));  // an AVX-512 register (Octet: an AVX2 one)

// The matrices and their strides (direct_gemm's arguments).
struct Operands {
  std::int64_t m, n, k;
  const float* a;
  std::int64_t a_row, a_column;
  const float* b;
  std::int64_t ldb;
  float* c;
  std::int64_t ldc;
};

template <typename V>
constexpr std::int64_t lanes_of = sizeof(V) / sizeof(float);

// Rows [i, i + R) x columns [j, j + W * lanes) of C.
template <typename V, int R, int W>
[[gnu::always_inline]] inline void tile(const Operands& o, std::int64_t i, std::int64_t j) {
  constexpr std::int64_t lanes = lanes_of<V>;
  V sums[R][W] = {};
  const float* a = o.a + i * o.a_row;
  for (std::int64_t p = 0; p < o.k; ++p) {
    V row[W];
    for (int w = 0; w < W; ++w) std::memcpy(&row[w], o.b + p * o.ldb + j + w * lanes, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const float scale = a[r * o.a_row + p * o.a_column];
      for (int w = 0; w < W; ++w) sums[r][w] += scale * row[w];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) std::memcpy(o.c + (i + r) * o.ldc + j + w * lanes, &sums[r][w], sizeof(V));
}

// Every row of columns [j, j + W * lanes): full tiles of R rows, then tiles of one.
template <typename V, int R, int W>
[[gnu::always_inline]] inline void column_panel(const Operands& o, std::int64_t j) {
  std::int64_t i = 0;
  for (; i + R <= o.m; i += R) tile<V, R, W>(o, i, j);
  for (; i < o.m; ++i) tile<V, 1, W>(o, i, j);
}

// Columns [j, end), fewer than a panel: tiles of one vector, then the last columns (fewer than a
// vector) through a zero-padded copy of them, by the same tiles, so with the same bits. (As scalar
// sums GCC vectorised some of the multiplies and then added them apart: no longer fused.)
template <typename V, int R>
[[gnu::always_inline]] inline void last_columns(const Operands& o, std::int64_t j, std::int64_t end) {
  constexpr std::int64_t lanes = lanes_of<V>;
  for (; j + lanes <= end; j += lanes) column_panel<V, R, 1>(o, j);
  if (j == end) return;
  const std::int64_t width = end - j;
  std::vector<float> b(static_cast<std::size_t>(o.k * lanes), 0.0f), c(static_cast<std::size_t>(o.m * lanes));
  for (std::int64_t p = 0; p < o.k; ++p) std::memcpy(&b[p * lanes], o.b + p * o.ldb + j, width * sizeof(float));
  column_panel<V, R, 1>({o.m, lanes, o.k, o.a, o.a_row, o.a_column, b.data(), lanes, c.data(), lanes}, 0);
  for (std::int64_t i = 0; i < o.m; ++i) std::memcpy(o.c + i * o.ldc + j, &c[i * lanes], width * sizeof(float));
}

// Panel `panel` (W * lanes columns of C, the last one what is left).
template <typename V, int R, int W>
[[gnu::always_inline]] inline void panel_of(const Operands& o, std::int64_t panel) {
  constexpr std::int64_t width = W * lanes_of<V>;
  const std::int64_t j = panel * width;
  if (j + width <= o.n) return column_panel<V, R, W>(o, j);
  last_columns<V, R>(o, j, o.n);
}

// One instantiation per instruction set, each with the tile its registers hold (the Note).
constexpr std::int64_t kWideColumns = 2 * 16, kNarrowColumns = 2 * 8;  // a panel: W vectors

__attribute__((target("avx512f"))) void panel_avx512(const Operands& o, std::int64_t panel) {
  panel_of<Sixteen, 8, 2>(o, panel);
}
__attribute__((target("avx2,fma"))) void panel_avx2(const Operands& o, std::int64_t panel) {
  panel_of<Octet, 6, 2>(o, panel);
}
void panel_baseline(const Operands& o, std::int64_t panel) { panel_of<Octet, 4, 2>(o, panel); }

struct Variant {
  void (*panel)(const Operands&, std::int64_t);
  std::int64_t columns;  // per panel
};

// The best variant this CPU runs, chosen once.
Variant variant_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {panel_avx512, kWideColumns};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {panel_avx2, kNarrowColumns};
  return {panel_baseline, kNarrowColumns};
}

}  // namespace

void direct_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t a_row,
                 std::int64_t a_column, const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  static const Variant variant = variant_for_this_cpu();
  const Operands o{m, n, k, a, a_row, a_column, b, ldb, c, ldc};
  const std::int64_t panels = (n + variant.columns - 1) / variant.columns;
  for (std::int64_t panel = 0; panel < panels; ++panel) variant.panel(o, panel);
}

}  // namespace frugal::cpu
