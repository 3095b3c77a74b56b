// The 1x1 convolution's weight gradient on the CPU (kernels/cpu/pointwise_weight_grad.h): register
// tiles of dot products along the pixels, compiled with multiply-add contraction
// (kernels/CMakeLists.txt) for AVX-512, AVX2 and plain x86-64, the best one picked at load time.
// Not here: planes that are not whole vectors, other dtypes, alpha and beta (dw is written).
#include "kernels/cpu/pointwise_weight_grad.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/cpu/parallel.h"

namespace frugal::cpu {

// Note [The 1x1 weight gradient as dot products]
// dW[o, i] = sum over samples n and pixels p of dY[n, o, p] X[n, i, p]: a product over the pixels,
// which lie contiguous in both operands. A GEMM library (OpenBLAS: one call per sample on 16x16 maps
// and larger, per chunk of samples gathered into one matrix on smaller ones, kernels/conv.cpp) first
// packs both operands into buffers laid out for its micro-kernel: a profile of the CIFAR stem's
// training step on one thread gave those copies 5% of the step beside the GEMM's 11%. Here a tile of
// R output channels by S input channels keeps R x S vectors of 16 sums in registers and walks the
// pixels 16 at a time, reading R vectors of dY's rows and S of X's where they lie: R + S loads for
// R x S fused multiply-adds (4 x 6 with AVX-512's 32 registers: 10 loads, 24 multiply-adds). A tile
// sums a group of samples (kGroupPixels pixels: one sample on 32x32 maps, 16 on 8x8) and then adds its
// sums into its totals (16 lanes per element, in the caller's scratch), as a GEMM per chunk adds its
// product into dW: lane l of element (o, i) sums the group's pixels p = l (mod 16) sample after
// sample, each group's lane sums are added to the totals in group order, and the 16 totals are added
// at the end, halves pairwise. Summing the whole batch in registers instead (4096 terms per lane on
// 32x32 maps) was as fast and had 4-8x OpenBLAS's largest error against a double sum; in groups the
// largest error is below OpenBLAS's. Each element's sum depends only on its own rows and the groups
// (the shapes), never on the tile, the piece or the thread that computes it: the same bits for any
// thread count and on any machine with fused multiply-adds (the plain x86-64 build has none, and
// rounds each product). Where it runs, and how fast, is measured in kernels/conv.cpp (kDotPlane).
// Walking a sample's plane in blocks of 256 or 512 pixels (every tile over one block before the next)
// was slower on 32x32 maps.
namespace {

typedef float Sixteen __attribute__((vector_size(kDotLanes * sizeof(float))));

// The operands: dY [batch, rows, plane] and X [batch, columns, plane], rows = C_out, columns = C_in.
struct Operands {
  std::int64_t rows, columns, plane;
  const float* grad_y;
  const float* x;
};

// A group of samples' planes added into dW's rows [row, row + R) x columns [column, column + S):
// their R x S lane totals, `stride` vectors apart from one row to the next, each get the group's 16
// lane sums over dy's R rows and x's S rows (rows `plane` floats apart, samples `dy_sample` and
// `x_sample` floats apart).
template <int R, int S>
[[gnu::always_inline]] inline void tile(const float* dy, std::int64_t dy_sample, const float* x, std::int64_t x_sample,
                                        std::int64_t plane, std::int64_t samples, Sixteen* totals, std::int64_t stride) {
  Sixteen sums[R][S] = {};
  for (std::int64_t n = 0; n < samples; ++n, dy += dy_sample, x += x_sample)
    for (std::int64_t p = 0; p < plane; p += kDotLanes) {
      Sixteen a[R];
      for (int r = 0; r < R; ++r) std::memcpy(&a[r], dy + r * plane + p, sizeof(Sixteen));
      for (int s = 0; s < S; ++s) {
        Sixteen b;
        std::memcpy(&b, x + s * plane + p, sizeof(Sixteen));
        for (int r = 0; r < R; ++r) sums[r][s] += a[r] * b;
      }
    }
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) {
      Sixteen total;
      std::memcpy(&total, totals + r * stride + s, sizeof(Sixteen));
      total += sums[r][s];
      std::memcpy(totals + r * stride + s, &total, sizeof(Sixteen));
    }
}

// A piece of dW: rows [row_begin, row_end) x columns [column_begin, column_end), its totals
// [rows, columns] vectors.
struct Piece {
  std::int64_t row_begin, row_end, column_begin, column_end;
  std::int64_t rows() const { return row_end - row_begin; }
  std::int64_t columns() const { return column_end - column_begin; }
};

// Samples [first, first + count) added into a piece's totals (its first element's at `totals`, rows
// o.columns vectors apart, as in the whole of dW's): full R x S tiles, then the last rows and columns
// by tiles of one row or one column.
template <int R, int S>
[[gnu::always_inline]] inline void piece_group(const Operands& o, const Piece& piece, std::int64_t first,
                                               std::int64_t count, Sixteen* totals) {
  const std::int64_t plane = o.plane, stride = o.columns;
  const std::int64_t dy_sample = o.rows * plane, x_sample = o.columns * plane;
  const float* dy = o.grad_y + first * dy_sample;
  const float* x = o.x + first * x_sample;
  // (Plain calls, not a lambda: a lambda's body is a function of its own, compiled without the
  // caller's target attribute.)
#define FRUGAL_TILE(kRows, kColumns)                                                                           \
  tile<kRows, kColumns>(dy + row * plane, dy_sample, x + column * plane, x_sample, plane, count,                \
                        totals + (row - piece.row_begin) * stride + (column - piece.column_begin), stride)
  std::int64_t row = piece.row_begin;
  for (; row + R <= piece.row_end; row += R) {
    std::int64_t column = piece.column_begin;
    for (; column + S <= piece.column_end; column += S) FRUGAL_TILE(R, S);
    for (; column < piece.column_end; ++column) FRUGAL_TILE(R, 1);
  }
  for (; row < piece.row_end; ++row) {
    std::int64_t column = piece.column_begin;
    for (; column + S <= piece.column_end; column += S) FRUGAL_TILE(1, S);
    for (; column < piece.column_end; ++column) FRUGAL_TILE(1, 1);
  }
#undef FRUGAL_TILE
}

// One instantiation per instruction set, each with the tile its registers hold: R x S vectors of
// sums, R of dY and one of X. A Sixteen is one AVX-512 register, two AVX2 ones, four SSE ones.
__attribute__((target("avx512f"))) void piece_group_avx512(const Operands& o, const Piece& p, std::int64_t first,
                                                           std::int64_t count, Sixteen* totals) {
  piece_group<4, 6>(o, p, first, count, totals);
}
__attribute__((target("avx2,fma"))) void piece_group_avx2(const Operands& o, const Piece& p, std::int64_t first,
                                                          std::int64_t count, Sixteen* totals) {
  piece_group<2, 2>(o, p, first, count, totals);
}
void piece_group_baseline(const Operands& o, const Piece& p, std::int64_t first, std::int64_t count,
                          Sixteen* totals) {
  piece_group<1, 2>(o, p, first, count, totals);
}

struct Variant {
  void (*piece_group)(const Operands&, const Piece&, std::int64_t, std::int64_t, Sixteen*);
  std::int64_t tile_rows, tile_columns;
};

Variant variant_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {piece_group_avx512, 4, 6};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {piece_group_avx2, 2, 2};
  return {piece_group_baseline, 1, 2};
}

// The 16 lanes added, halves pairwise: (l + 8), then (l + 4), (l + 2), (l + 1).
float lane_total(const Sixteen& v) {
  float half[kDotLanes];
  std::memcpy(half, &v, sizeof half);
  for (std::int64_t width = kDotLanes / 2; width >= 1; width /= 2)
    for (std::int64_t l = 0; l < width; ++l) half[l] += half[l + width];
  return half[0];
}

// [begin, end) of `count` items cut into `parts` nearly equal consecutive ranges: range `part`.
std::int64_t cut(std::int64_t count, std::int64_t parts, std::int64_t part) { return count * part / parts; }

// Pixels a tile sums in registers before adding into its totals: a group of samples' planes, at
// least one (64 terms per lane). Each group costs the tile a load and a store of its totals; on 8x8
// maps (16 samples per group) groups of 256 or 512 pixels were 0.94-1.16x OpenBLAS's time per layer,
// 1024 and 2048 1.03-1.24x, and 2048 doubles the terms per lane before a total (the Note).
constexpr std::int64_t kGroupPixels = 1024;

// Pieces per thread: two, so that a thread the host slows takes fewer (Note [Threads claim pieces of a
// loop], core/cpu/parallel.h); more would read each sample's planes more often.
constexpr std::int64_t kDotPiecesPerThread = 2;

// The samples a group holds on planes of `plane` pixels (the rounding depends on it: the Note).
std::int64_t samples_per_group(std::int64_t plane) {
  return std::max<std::int64_t>(1, kGroupPixels / std::max<std::int64_t>(plane, 1));
}

// Note [Pieces along the side with more channels]
// A piece of dW's rows reads every sample's planes of all of X's channels and of its own rows of dY;
// a piece of columns, all of dY's and its own of X's. So the operand cut into pieces is read once
// and the other once per piece. dW is cut along its longer side: the operand with more channels is
// the one read once. A projection's ([24, 144] on the CIFAR stem's 32x32 maps: X 37.7 MiB a batch,
// dY 6.3 MiB) was cut by rows before, and with 2 threads (4 pieces) read X four times from memory.
// Which piece sums an element does not change its sum (the Note above): the same bits either way.
}  // namespace

void pointwise_weight_gradient(std::int64_t batch, std::int64_t out_channels, std::int64_t in_channels,
                               std::int64_t plane, const float* grad_y, const float* x, float* dw, float* scratch) {
  static const Variant variant = variant_for_this_cpu();
  const Operands o{out_channels, in_channels, plane, grad_y, x};
  const std::int64_t group = samples_per_group(plane);
  // Pieces of whole tiles (Note [Pieces along the side with more channels]).
  const std::int64_t row_tiles = (out_channels + variant.tile_rows - 1) / variant.tile_rows;
  const std::int64_t column_tiles = (in_channels + variant.tile_columns - 1) / variant.tile_columns;
  const bool by_rows = out_channels >= in_channels;
  const std::int64_t long_tiles = by_rows ? row_tiles : column_tiles, short_tiles = by_rows ? column_tiles : row_tiles;
  const std::int64_t wanted = kDotPiecesPerThread * omp_get_max_threads();
  const std::int64_t long_pieces = std::clamp<std::int64_t>(wanted, 1, std::max<std::int64_t>(long_tiles, 1));
  const std::int64_t short_pieces =
      std::clamp<std::int64_t>((wanted + long_pieces - 1) / long_pieces, 1, std::max<std::int64_t>(short_tiles, 1));
  const std::int64_t row_pieces = by_rows ? long_pieces : short_pieces;
  const std::int64_t column_pieces = by_rows ? short_pieces : long_pieces;
  parallel_for(row_pieces * column_pieces, batch * out_channels * in_channels * plane, [&](std::int64_t index) {
    const std::int64_t rp = index / column_pieces, cp = index % column_pieces;
    const Piece piece{
        std::min(out_channels, cut(row_tiles, row_pieces, rp) * variant.tile_rows),
        std::min(out_channels, cut(row_tiles, row_pieces, rp + 1) * variant.tile_rows),
        std::min(in_channels, cut(column_tiles, column_pieces, cp) * variant.tile_columns),
        std::min(in_channels, cut(column_tiles, column_pieces, cp + 1) * variant.tile_columns)};
    // The piece's totals: its own part of the caller's [rows, columns] vectors.
    Sixteen* totals = reinterpret_cast<Sixteen*>(scratch) + piece.row_begin * in_channels + piece.column_begin;
    for (std::int64_t row = 0; row < piece.rows(); ++row)
      std::fill(totals + row * in_channels, totals + row * in_channels + piece.columns(), Sixteen{});
    for (std::int64_t first = 0; first < batch; first += group)
      variant.piece_group(o, piece, first, std::min(group, batch - first), totals);
    for (std::int64_t row = 0; row < piece.rows(); ++row)
      for (std::int64_t column = 0; column < piece.columns(); ++column)
        dw[(piece.row_begin + row) * in_channels + piece.column_begin + column] =
            lane_total(totals[row * in_channels + column]);
  });
}

}  // namespace frugal::cpu
