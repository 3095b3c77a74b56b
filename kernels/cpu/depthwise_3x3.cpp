// The CPU's fast depthwise 3x3 convolution (kernels/cpu/depthwise_3x3.h): forward, input gradient and
// weight gradient for f32, padding 1, stride 1 or 2, as MobileNetV2 uses it (the forward and weight
// gradient also with a channel multiplier: a stem convolution of a one-channel image is depthwise).
// Planes are copied into a zero-padded scratch layout (Note [Depthwise 3x3 on flat padded planes]) so
// that every tap becomes one contiguous, bounds-free loop over the whole plane that GCC vectorises,
// whatever the plane's width (MobileNetV2's are 1 to 32 pixels wide; rows of whole vectors are
// written straight out, Note [Rows of whole vectors straight to the output]); on planes of 4x4
// outputs or fewer all three put channels across the vector lanes instead (Note [Small planes,
// channels across the lanes]). The inner loops are compiled for AVX-512, AVX2 and plain x86-64 and
// picked at load time (GCC's target_clones, as kernels/cpu/gemm.cpp does).
// What they guarantee: the same bits for any thread count (work is split by planes and channels, each
// computed whole by one thread in an order fixed by the shapes); against the reference loops in
// kernels/cpu/conv.cpp, f32 rounding differences only (multiply-adds may be fused, and the weight
// gradient sums 16 float lanes of fewer than 128 terms each into double, where the reference sums
// every term in double).
// Not here: other shapes and dtypes, which take the reference.
#include "kernels/cpu/depthwise_3x3.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/parallel.h"
#include "kernels/cpu/octets.h"
#include "kernels/cpu/row_copies.h"

namespace frugal::cpu {

// Note [Depthwise 3x3 on flat padded planes]
// A plane [H, W] is copied into scratch with a one-pixel zero border, rows `row` floats apart. With
// stride 1, output (oh, ow) reads the padded pixels (oh + kh, ow + kw), which lie at
// tap(kh, kw) + oh * row + ow: every tap reads scratch at one fixed offset from j = oh * row + ow. So
// the whole plane is one flat loop over j, nine multiply-adds per j, with no bounds test and no
// per-row restart, even when W is 2 or 4; the row - OW extra j per row are computed and thrown away.
// With stride 2, output (oh, ow) reads padded pixel (2 oh + kh, 2 ow + kw); splitting the padded plane
// into four sub-planes by the parity of row and column makes that pixel (oh + kh / 2, ow + kw / 2) of
// sub-plane (kh % 2, kw % 2), again one offset per tap from j = oh * row + ow, and the loads stay
// contiguous. The input gradient of stride 1 is the same loop over the padded output gradient with the
// filter turned 180 degrees.
// Small planes (MobileNetV2 ends at 1x1 to 4x4) would spend more on each call than in it, so a stack
// of planes that are consecutive in memory goes through one call, each plane `plane_stride` floats
// after the last in scratch: the copies in and out then walk memory in order (planes of one channel
// lie a whole sample apart, too far for the hardware prefetcher), and a tap never reads past its own
// plane's padded rows. Scratch cells that no pixel maps to stay zero from allocation, so a chunk of
// stacks zeroes its scratch once.
namespace {

constexpr int kTaps = 9;
constexpr std::int64_t kLanes = 16;  // float accumulators per tap in the weight gradient: one AVX-512 register
// Zeros after the last sub-plane: a flat loop's last j reads up to 2 floats past a padded plane
// (stride 1, tap (2, 2) of a thrown-away column), and the weight gradient rounds its loop up to kLanes.
constexpr std::int64_t kSlack = kLanes + 2;
// Padded floats per stack of planes: enough that a call covers many vectors, few enough that a stack
// and its output stay in L1 (8 KB each).
constexpr std::int64_t kStackFloats = 2048;
// The weight gradient moves its float lanes into double totals once they hold at least this many
// terms (at plane or block boundaries, so where depends on the shapes only): a float sum of fewer
// than 128 terms loses at most about 128 x 2^-24 of their magnitude, and small planes do not each pay
// a 16-lane reduction.
constexpr std::int64_t kTermsPerLane = 64;
// Stacks per chunk of work are chosen so a call has at most this many chunks: each chunk allocates
// and zeroes its scratch once, and there are still enough chunks to share among threads.
constexpr std::int64_t kMaxChunks = 64;
// The weight gradient's stacks hold at most channels / kMinChannelBlocks channels, and its jobs are
// runs of stacks, at most kWeightGradJobs of them: enough to share among threads, few enough that a
// job reads many consecutive planes of each sample (Note [A job's channels in memory order]).
constexpr std::int64_t kMinChannelBlocks = 8;
constexpr std::int64_t kWeightGradJobs = 16;

// Note [Row copies stay loops] (kernels/cpu/row_copies.h): the row-copying functions keep their loops.

// Where the padded pixels of a stack of `planes` [height, width] planes lie in scratch, for stride 1 or 2.
struct Layout {
  std::int64_t stride, row, rows;  // of each sub-plane of one plane: floats per row, and rows
  std::int64_t plane_stride;       // floats from one plane's sub-plane to the next: rows * row rounded up to kLanes
  std::int64_t planes;             // per stack

  std::int64_t sub_plane() const { return plane_stride * planes; }
  std::int64_t size() const { return stride * stride * sub_plane() + kSlack; }
  // Padded pixel (r, c) of plane p, that is input pixel (r - 1, c - 1).
  std::int64_t at(std::int64_t p, std::int64_t r, std::int64_t c) const {
    return ((r % stride) * stride + c % stride) * sub_plane() + p * plane_stride + (r / stride) * row + c / stride;
  }
};

// A plane's padded height is rounded up to a multiple of the stride, so the parity sub-planes line up.
Layout layout_of(std::int64_t height, std::int64_t width, std::int64_t stride, std::int64_t max_planes) {
  const std::int64_t row = ceil_div(width + 2, stride), rows = ceil_div(height + 2, stride);
  const std::int64_t plane_stride = ceil_div(row * rows, kLanes) * kLanes;
  const std::int64_t fit = kStackFloats / (stride * stride * plane_stride);
  const std::int64_t planes = std::max<std::int64_t>(1, std::min(max_planes, fit));
  return {stride, row, rows, plane_stride, planes};
}

// Copies a stack's planes, `count` dense [height, width] planes from `planes`, to their padded places;
// the border cells are left untouched. The destinations are Layout::at's, stepped row by row rather
// than computed per row: at() divides by the stride, and its divisions took most of this copy's time
// (it was the largest single item of an eval forward's profile, 16%).
__attribute__((target_clones("avx512f", "avx2", "default")))
FRUGAL_NO_MEMCPY_CALLS void pad_planes(const Layout& l, const float* planes, std::int64_t count, std::int64_t height,
                                       std::int64_t width, float* scratch) {
  if (l.stride == 1) {
    for (std::int64_t p = 0; p < count; ++p) {
      const float* src = planes + p * height * width;
      float* dst = scratch + l.at(p, 1, 1);  // input pixel (0, 0)
      for (std::int64_t h = 0; h < height; ++h, src += width, dst += l.row)
        for (std::int64_t w = 0; w < width; ++w) dst[w] = src[w];
    }
    return;
  }
  // Stride 2: input row h is padded row h + 1, in the row-parity sub-planes 1 (h even) and 0 (h odd);
  // input columns 0, 2, 4... go to padded columns 1, 3, 5... (column-parity sub-plane 1, from its
  // column 0), columns 1, 3, 5... to padded columns 2, 4, 6... (sub-plane 0, from its column 1).
  const std::int64_t odd_width = (width + 1) / 2, even_width = width / 2;
  for (std::int64_t p = 0; p < count; ++p)
    for (std::int64_t h = 0; h < height; ++h) {
      const float* src = planes + (p * height + h) * width;
      const std::int64_t row_start = ((h + 1) % 2) * 2 * l.sub_plane() + p * l.plane_stride + (h + 1) / 2 * l.row;
      float* odd_columns = scratch + row_start + l.sub_plane();  // == l.at(p, h + 1, 1)
      float* even_columns = scratch + row_start + 1;             // == l.at(p, h + 1, 2)
      for (std::int64_t k = 0; k < odd_width; ++k) odd_columns[k] = src[2 * k];
      for (std::int64_t k = 0; k < even_width; ++k) even_columns[k] = src[2 * k + 1];
    }
}

// Copies `count` planes of `height` rows of `width` floats, the rows and planes of src and dst each
// their own distance apart: outputs out of a flat result, output gradients into one.
__attribute__((target_clones("avx512f", "avx2", "default")))
FRUGAL_NO_MEMCPY_CALLS void copy_rows(std::int64_t count, std::int64_t height, std::int64_t width, const float* src,
                                      std::int64_t src_plane, std::int64_t src_row, float* dst, std::int64_t dst_plane,
                                      std::int64_t dst_row) {
  for (std::int64_t p = 0; p < count; ++p)
    for (std::int64_t h = 0; h < height; ++h) {
      const float* from = src + p * src_plane + h * src_row;
      float* to = dst + p * dst_plane + h * dst_row;
      for (std::int64_t w = 0; w < width; ++w) to[w] = from[w];
    }
}

// conv2d's ReLU6 epilogue over n floats of a flat result.
__attribute__((target_clones("avx512f", "avx2", "default")))
void clamp_flat(float* flat, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) flat[j] = clamp_relu6(flat[j]);
}

// One output's taps, s[offset[t] + j] * w[t] for t < kCount, added in that order: the one expression
// the flat loop and the rows written straight out both use, so their bits are the same (Note [Rows of
// whole vectors straight to the output]).
template <int kCount>
inline __attribute__((always_inline)) float tap_chain(const float* s, const std::int64_t* offset, const float* w,
                                                      std::int64_t j) {
  float total = s[offset[0] + j] * w[0];
  for (int t = 1; t < kCount; ++t) total += s[offset[t] + j] * w[t];
  return total;
}

// The flat loop of a stack, with kCount taps, added in the order given.
template <int kCount>
inline __attribute__((always_inline)) void sum_taps_of(const float* src, const std::int64_t* offset,
                                                       const float* weight, const float* bias, std::int64_t planes,
                                                       std::int64_t plane_stride, std::int64_t n, float* __restrict out) {
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* s = src + p * plane_stride;
    const float* w = weight + p * kCount;
    float* o = out + p * plane_stride;
    for (std::int64_t j = 0; j < n; ++j) o[j] = tap_chain<kCount>(s, offset, w, j) + bias[p];
  }
}

// For each plane p of a stack and j in [0, n), with P = p * plane_stride:
//   out[P + j] = bias[p] + sum over t < count of weight[p * count + t] * src[P + offset[t] + j].
// The count is a compile-time constant inside, so the taps unroll and the j loop vectorises.
__attribute__((target_clones("avx512f", "avx2", "default")))
void sum_taps(int count, const float* src, const std::int64_t* offset, const float* weight, const float* bias,
              std::int64_t planes, std::int64_t plane_stride, std::int64_t n, float* __restrict out) {
  switch (count) {
    case 1: return sum_taps_of<1>(src, offset, weight, bias, planes, plane_stride, n, out);
    case 2: return sum_taps_of<2>(src, offset, weight, bias, planes, plane_stride, n, out);
    case 4: return sum_taps_of<4>(src, offset, weight, bias, planes, plane_stride, n, out);
    default: return sum_taps_of<kTaps>(src, offset, weight, bias, planes, plane_stride, n, out);
  }
}

// For each plane p of a stack: lanes[p][t][l] += grad[j] * src[offset[t] + j] (both from plane p's
// start) for j in [0, n) with j % kLanes == l, the nine taps at once, so each loaded gradient serves
// nine multiply-adds. n is a multiple of kLanes.
__attribute__((target_clones("avx512f", "avx2", "default")))
void tap_dots(const float* src, const std::int64_t* offset, const float* grad, std::int64_t planes,
              std::int64_t plane_stride, std::int64_t n, float* lanes) {
  for (std::int64_t p = 0; p < planes; ++p) {
    // The 16 lanes of each tap as two octets, 18 vectors the compiler keeps in registers (as a
    // float[9][16] they went through memory at every multiply-add: 84% of this loop's time, perf).
    Octet sums[kTaps][2];
    float* plane_lanes = lanes + p * kTaps * kLanes;
    for (int t = 0; t < kTaps; ++t)
      for (int h = 0; h < 2; ++h) load(sums[t][h], plane_lanes + t * kLanes + h * kOctet);
    const float* s = src + p * plane_stride;
    const float* dy = grad + p * plane_stride;
    for (std::int64_t j = 0; j < n; j += kLanes)
      for (int h = 0; h < 2; ++h) {
        Octet g;
        load(g, dy + j + h * kOctet);
        for (int t = 0; t < kTaps; ++t) {
          Octet v;
          load(v, s + offset[t] + j + h * kOctet);
          sums[t][h] += g * v;
        }
      }
    for (int t = 0; t < kTaps; ++t)
      for (int h = 0; h < 2; ++h) std::memcpy(plane_lanes + t * kLanes + h * kOctet, &sums[t][h], sizeof(Octet));
  }
}

// Adds each tap's float lanes of `channels` channels, in lane order, into its double total and clears them.
void flush_lanes(std::int64_t channels, float* lanes, double* totals) {
  for (std::int64_t i = 0; i < channels * kTaps; ++i) {
    double total = 0.0;
    for (std::int64_t l = 0; l < kLanes; ++l) total += static_cast<double>(lanes[i * kLanes + l]);
    totals[i] += total;
    std::fill(lanes + i * kLanes, lanes + (i + 1) * kLanes, 0.0f);
  }
}

// Where tap (kh, kw) of output (0, 0) of a stack's first plane reads, for the nine taps in (kh, kw) order.
void tap_offsets(const Layout& l, std::int64_t* offset) {
  for (int t = 0; t < kTaps; ++t) offset[t] = l.at(0, t / 3, t % 3);
}

// The per-plane operands of one flat loop: each plane's weights (`taps` each) and bias.
struct StackTable {
  std::vector<float> weight, bias;
};

// Calls body(first, count, scratch, flat, table) for the planes [0, total) in stacks of up to
// l.planes consecutive planes, in parallel chunks that each allocate a zeroed scratch, a table and,
// where the body goes through the flat layout (with_flat; else flat is null), a flat output once.
template <typename Body>
void for_each_stack(std::int64_t total, const Layout& l, std::int64_t work, bool with_flat, Body&& body) {
  const std::int64_t stacks = ceil_div(total, l.planes);
  const std::int64_t chunk = l.planes * std::max<std::int64_t>(1, ceil_div(stacks, kMaxChunks));
  parallel_for_chunks(total, chunk, work, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(l.size()), 0.0f);
    std::vector<float> flat(with_flat ? static_cast<std::size_t>(l.sub_plane()) : 0);
    StackTable table{std::vector<float>(static_cast<std::size_t>(l.planes * kTaps)),
                     std::vector<float>(static_cast<std::size_t>(l.planes), 0.0f)};
    for (std::int64_t first = begin; first < end; first += l.planes)
      body(first, std::min(l.planes, end - first), scratch.data(), with_flat ? flat.data() : nullptr, table);
  });
}

// Note [Rows of whole vectors straight to the output]
// The flat loop computes row - out_width thrown-away columns per output row and leaves its result in
// a flat buffer, from which a second pass copies the rows out (and, with ReLU6, a pass before it
// clamps them): on the CIFAR stem's 32x32 maps those two passes took 24% of the forward's time, the
// copy 19% of the input gradient's (perf, [64, 144, 32, 32] on one thread). Where an output row is a
// whole number of vectors (kLanes floats: the 32x32 and 16x16 maps), each row is computed where it
// goes, the bias and the clamp applied as it is stored. Each output takes the same taps in the same
// order as in the flat loop, which on MobileNetV2's maps also ran whole vectors only (flat planes of
// 32 x 34, 16 x 18 and 16 x 17 floats), so the compiled multiply-adds and the bits are the same as
// before there (elsewhere the flat loop's tail, fused differently, may have computed a few outputs:
// results are the same for any thread count either way). Narrower rows keep the flat loop, whose
// point is that they are narrow.
bool rows_straight_out(std::int64_t out_width) { return out_width % kLanes == 0; }

// Planes [0, planes) of a stack, row by row: out[p * out_plane + oh * out_width + ow] = the flat
// loop's value at j = oh * row + ow, clamped with kRelu6.
template <bool kRelu6>
inline __attribute__((always_inline)) void sum_taps_rows_of(const float* src, const std::int64_t* offset,
                                                            const float* weight, const float* bias,
                                                            std::int64_t planes, std::int64_t plane_stride,
                                                            std::int64_t row, std::int64_t out_height,
                                                            std::int64_t out_width, std::int64_t out_plane,
                                                            float* __restrict out) {
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* w = weight + p * kTaps;
    for (std::int64_t oh = 0; oh < out_height; ++oh) {
      const float* s = src + p * plane_stride + oh * row;
      float* o = out + p * out_plane + oh * out_width;
      for (std::int64_t ow = 0; ow < out_width; ++ow) {
        const float value = tap_chain<kTaps>(s, offset, w, ow) + bias[p];
        o[ow] = kRelu6 ? clamp_relu6(value) : value;
      }
    }
  }
}

// sum_taps with nine taps, its outputs' rows written straight into planes `out_plane` floats apart
// (Note [Rows of whole vectors straight to the output]).
__attribute__((target_clones("avx512f", "avx2", "default")))
void sum_taps_into_rows(const float* src, const std::int64_t* offset, const float* weight, const float* bias,
                        std::int64_t planes, std::int64_t plane_stride, std::int64_t row, std::int64_t out_height,
                        std::int64_t out_width, std::int64_t out_plane, bool relu6, float* __restrict out) {
  if (relu6)
    return sum_taps_rows_of<true>(src, offset, weight, bias, planes, plane_stride, row, out_height, out_width,
                                  out_plane, out);
  sum_taps_rows_of<false>(src, offset, weight, bias, planes, plane_stride, row, out_height, out_width, out_plane, out);
}

// Stride 2's input gradient, gathered: input pixel (2 i + ph, 2 j + pw) receives, along each axis, tap
// 1 of output i when its parity is 0, and taps 0 (output i + 1) and 2 (output i) when it is 1. In the
// padded output gradient (one border pixel) those outputs lie at i + a with a = 1 for taps 1 and 2 and
// a = 2 for tap 0: each of the four parity classes is one flat loop of 1, 2 or 4 taps.
void backward_input_stride_2(const ConvGeometry& g, const Layout& l, const float* weight, std::int64_t first,
                             std::int64_t count, const float* scratch, float* flat, StackTable& table, float* grad_x) {
  constexpr std::int64_t kTapsOfParity[2][2] = {{1, -1}, {0, 2}};  // per parity: its taps, -1 for none
  for (std::int64_t ph = 0; ph < 2; ++ph)
    for (std::int64_t pw = 0; pw < 2; ++pw) {
      std::int64_t offset[4], taps[4];
      int n_taps = 0;
      for (std::int64_t kh : kTapsOfParity[ph])
        for (std::int64_t kw : kTapsOfParity[pw]) {
          if (kh < 0 || kw < 0) continue;
          offset[n_taps] = (kh == 0 ? 2 : 1) * l.row + (kw == 0 ? 2 : 1);
          taps[n_taps++] = kh * 3 + kw;
        }
      for (std::int64_t p = 0; p < count; ++p)
        for (int t = 0; t < n_taps; ++t)
          table.weight[p * n_taps + t] = weight[(first + p) % g.channels * kTaps + taps[t]];
      const std::int64_t rows = (g.height - ph + 1) / 2, columns = (g.width - pw + 1) / 2;
      sum_taps(n_taps, scratch, offset, table.weight.data(), table.bias.data(), count, l.plane_stride, rows * l.row,
               flat);
      for (std::int64_t p = 0; p < count; ++p) {
        float* dx = grad_x + (first + p) * g.plane();
        const float* src = flat + p * l.plane_stride;
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = 0; j < columns; ++j) dx[(2 * i + ph) * g.width + 2 * j + pw] = src[i * l.row + j];
      }
    }
}

// Note [One-pixel planes]
// A 1x1 plane (MobileNetV2's last stage at 32x32 inputs) padded by 1 meets only the centre tap of its
// 3x3 filter, whatever the stride: each kernel is a per-channel scale, computed directly, because
// the flat loops would spend a call, a copy in and a copy out on every single pixel.
constexpr int kCentre = 4;  // tap (1, 1)

bool one_pixel(const ConvGeometry& g) { return g.height == 1 && g.width == 1; }

// y[n][c * multiplier + k] = x[n][c] * centre tap + bias.
void forward_one_pixel(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const float* x,
                       const float* weight, const float* bias, float* y, bool relu6) {
  const std::int64_t out_channels = g.channels * multiplier;
  parallel_for(batch, batch * out_channels, [&](std::int64_t n) {
    for (std::int64_t c = 0; c < g.channels; ++c)  // by input channel: no division per output
      for (std::int64_t k = 0; k < multiplier; ++k) {
        const std::int64_t oc = c * multiplier + k;
        const float shift = bias ? bias[oc] : 0.0f;
        y[n * out_channels + oc] = x[n * g.channels + c] * weight[oc * kTaps + kCentre] + shift;
      }
    if (relu6) clamp_flat(y + n * out_channels, out_channels);  // a loop of its own vectorises: no branches
  });
}

// The weight gradient's centre tap sums the batch in double, in sample order; the other taps are 0.
void backward_weight_one_pixel(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const float* grad_y,
                               const float* x, float* grad_weight) {
  const std::int64_t out_channels = g.channels * multiplier;
  parallel_for(out_channels, out_channels * batch, [&](std::int64_t oc) {
    double total = 0.0;
    for (std::int64_t n = 0; n < batch; ++n)
      total += static_cast<double>(grad_y[n * out_channels + oc]) *
               static_cast<double>(x[n * g.channels + oc / multiplier]);
    for (int t = 0; t < kTaps; ++t) grad_weight[oc * kTaps + t] = t == kCentre ? static_cast<float>(total) : 0.0f;
  });
}

// Note [Small planes, channels across the lanes]
// On planes of a few pixels (MobileNetV2's late stages at 32x32 inputs: 4x4 and 2x2 outputs) the flat
// loops spend more on each plane's copies than on its taps: a 2x2 plane goes into a 4x4 padded one,
// its flat loop of 8 floats computes 4 pixels it throws away, and it comes out as 2 rows of 2. There
// the forward puts the vector lanes across channels instead: kTileChannels planes of one sample (a
// block of consecutive channels) are transposed into a tile [pixel][channel], each output pixel is
// its valid taps in tap order, one vector multiply-add per tap over the channels, then the bias
// (the taps on the border are skipped, as the reference loops skip them; the flat loop multiplies
// them by its zero border, which adds nothing to a finite sum but makes a NaN of an infinite weight),
// and the result is transposed back (both transposes in 4x4 blocks where they can: Note [Small-plane
// tiles in vectors]). Each channel block's weights are transposed once for the batch.
// Measured 2026-12-05 (docs/benchmarks.md), eval forwards of batch 64 alternating in one process with
// the flat loops: standard stem 16% faster on 1 and on 2 threads (2x2 planes alone: 15%), CIFAR stem
// (4x4 planes only) 2%; on 8x8 planes (tried: outputs up to 64 pixels) no faster than the flat loops.
// The backward kernels do the same on the same planes: the input gradient adds each output pixel's
// gradient times each valid tap onto the input pixel the tap read, the weight gradient keeps the
// nine taps' sums of a block's channels as local vectors while the samples go by (the flat loops'
// tap_dots loaded and stored them for every 2x2 plane, around one vector's work). Measured
// 2026-12-06, training steps of batch 64 alternating in one process with the flat loops: standard
// stem steps 10-12% shorter on 1 and on 2 threads (three runs), CIFAR stem 2% on 1 thread, no change on 2; with the tiles taken up
// to 8x8 outputs as well, 4% slower (both stems). Threads split the work by blocks of 16 channels (the
// small maps of MobileNetV2 have 96 channels or more), each block's samples in order.
constexpr std::int64_t kTileChannels = 16;   // one AVX-512 register of floats
constexpr std::int64_t kSmallOutPlane = 16;  // output pixels: 4x4 and smaller
constexpr std::int64_t kSmallInPlane = 64;   // input pixels: 8x8 (stride 2 into 4x4); a tile of 4 KiB

bool small_planes(const ConvGeometry& g) { return g.out_plane() <= kSmallOutPlane && g.plane() <= kSmallInPlane; }

// Note [Small-plane tiles in vectors]
// Written per float, the tile kernels' loops over a tile's 16 lanes were not what they look like:
// GCC compiled forward_channel_tile's lanes loop (total[l] += v[l] * w[l]) in the AVX-512 clone as
// 16 scalar multiply-adds per tap, and each copy into or out of a tile as a scalar load and store
// per float (one side of the copy is strided). So the lanes go as two Octets, as
// weight_grad_channel_tile's always did, and where a plane is a whole number of 4-pixel runs
// (MobileNetV2's small maps: 2x2, 4x4, 8x8) the copies go by 4x4 blocks transposed in registers
// (transpose_4x4, kernels/cpu/octets.h); a one-pixel plane is a plain copy. Measured 2026-12-07
// (docs/benchmarks.md), each kernel alone, batch 64, one thread: forward on 960 channels of 2x2
// 0.59 -> 0.51 ms with the block copies alone, 0.23 ms with both; input gradient 0.66 -> 0.22; 576
// channels of 4x4 at stride 2, forward 0.48 -> 0.19. Bits: the copies only move values; the Octet
// arithmetic is a multiply, then an add, per tap on every instruction set, where the AVX-512 clone's
// scalar loops fused the two: on an AVX-512 machine the forward's and the input gradient's bits on
// these planes are now the ones an AVX2 machine gave before. (GCC contracts what it can: an 8-float
// multiply-add needs FMA or AVX-512VL, which neither clone's target enables; a clone for such a
// target would change these bits, and tap_dots' and the weight gradient's.) The weight gradient's
// bits are unchanged, and every result is the same for any thread count, as before.

// Whether a full tile's copies of planes of `plane` pixels go by blocks.
[[gnu::always_inline]] inline bool blocks_of_four(std::int64_t plane) { return plane == 1 || plane % 4 == 0; }

// `lanes` consecutive planes of `plane` floats from `planes` into the tile [pixel][kTileChannels];
// lanes past `lanes` zero (computed, never stored).
[[gnu::always_inline]] inline void to_channel_tile(const float* __restrict planes, std::int64_t plane,
                                                   std::int64_t lanes, float* __restrict tile) {
  constexpr std::int64_t L = kTileChannels;
  if (lanes == L && blocks_of_four(plane)) {
    if (plane == 1) return (void)std::memcpy(tile, planes, L * sizeof(float));
    for (std::int64_t l = 0; l < L; l += 4)
      for (std::int64_t i = 0; i < plane; i += 4) transpose_4x4(planes + l * plane + i, plane, tile + i * L + l, L);
    return;
  }
  if (lanes < L) std::fill(tile, tile + plane * L, 0.0f);
  for (std::int64_t i = 0; i < plane; ++i)
    for (std::int64_t l = 0; l < lanes; ++l) tile[i * L + l] = planes[l * plane + i];
}

// The tile's first `lanes` lanes back into `lanes` planes of `plane` floats.
[[gnu::always_inline]] inline void from_channel_tile(const float* __restrict tile, std::int64_t plane,
                                                     std::int64_t lanes, float* __restrict planes) {
  constexpr std::int64_t L = kTileChannels;
  if (lanes == L && blocks_of_four(plane)) {
    if (plane == 1) return (void)std::memcpy(planes, tile, L * sizeof(float));
    for (std::int64_t i = 0; i < plane; i += 4)
      for (std::int64_t l = 0; l < L; l += 4) transpose_4x4(tile + i * L + l, L, planes + l * plane + i, plane);
    return;
  }
  for (std::int64_t l = 0; l < lanes; ++l)
    for (std::int64_t i = 0; i < plane; ++i) planes[l * plane + i] = tile[i * L + l];
}

// Input pixel (ih, iw) that tap t of output (oh, ow) reads, as ih * width + iw, or -1 on the border.
[[gnu::always_inline]] inline std::int64_t tap_source(const ConvGeometry& g, std::int64_t oh, std::int64_t ow, int t) {
  const std::int64_t ih = oh * g.stride_h + t / 3 - 1, iw = ow * g.stride_w + t % 3 - 1;
  return ih < 0 || ih >= g.height || iw < 0 || iw >= g.width ? -1 : ih * g.width + iw;
}

// The planes [c0, c0 + lanes) of one sample (x and y that sample's [C, H, W] and [C, OH, OW]), with
// the block's weights and biases transposed: weights[t * kTileChannels + l], bias[l].
__attribute__((target_clones("avx512f", "avx2", "default")))
void forward_channel_tile(const ConvGeometry& g, std::int64_t c0, std::int64_t lanes, const float* __restrict x,
                          const float* __restrict weights, const float* __restrict bias, float* __restrict y, bool relu6) {
  constexpr std::int64_t L = kTileChannels;
  float in[kSmallInPlane * L], out[kSmallOutPlane * L];
  to_channel_tile(x + c0 * g.plane(), g.plane(), lanes, in);
  for (std::int64_t oh = 0; oh < g.out_height; ++oh)
    for (std::int64_t ow = 0; ow < g.out_width; ++ow)
      for (int h = 0; h < 2; ++h) {  // the lanes as two octets (Note [Small-plane tiles in vectors])
        Octet total = {};  // 0 + the first product is that product
        for (int t = 0; t < kTaps; ++t) {
          const std::int64_t source = tap_source(g, oh, ow, t);
          if (source < 0) continue;
          Octet v, w;
          load(v, in + source * L + h * kOctet);
          load(w, weights + t * L + h * kOctet);
          total += v * w;
        }
        Octet b;
        load(b, bias + h * kOctet);
        total += b;
        std::memcpy(out + (oh * g.out_width + ow) * L + h * kOctet, &total, sizeof(Octet));
      }
  if (relu6) clamp_flat(out, g.out_plane() * L);  // a loop of its own vectorises: no branches
  from_channel_tile(out, g.out_plane(), lanes, y + c0 * g.out_plane());
}

// The block's nine filters, transposed: weights[t * kTileChannels + l] = filter t of channel c0 + l
// (zero past the last channel).
void transposed_filters(const float* weight, std::int64_t c0, std::int64_t lanes, float* weights) {
  std::fill(weights, weights + kTaps * kTileChannels, 0.0f);
  for (std::int64_t l = 0; l < lanes; ++l)
    for (int t = 0; t < kTaps; ++t) weights[t * kTileChannels + l] = weight[(c0 + l) * kTaps + t];
}

// Calls body(c0, lanes) for each block of kTileChannels channels [c0, c0 + lanes) (the last one
// possibly narrower), the blocks shared among the threads: the small-plane drivers' split, by
// channels alone, so each channel's sums are one thread's whatever the thread count.
template <typename Body>
void for_each_channel_block(const ConvGeometry& g, std::int64_t batch, Body&& body) {
  const std::int64_t blocks = ceil_div(g.channels, kTileChannels);
  parallel_for(blocks, batch * g.channels * kTaps * g.out_plane(), [&](std::int64_t block) {
    const std::int64_t c0 = block * kTileChannels;
    body(c0, std::min(kTileChannels, g.channels - c0));
  });
}

void forward_small_planes(const ConvGeometry& g, std::int64_t batch, const float* x, const float* weight,
                          const float* bias, float* y, bool relu6) {
  for_each_channel_block(g, batch, [&](std::int64_t c0, std::int64_t lanes) {
    float weights[kTaps * kTileChannels], biases[kTileChannels] = {};
    transposed_filters(weight, c0, lanes, weights);
    for (std::int64_t l = 0; l < lanes; ++l) biases[l] = bias ? bias[c0 + l] : 0.0f;
    for (std::int64_t n = 0; n < batch; ++n)
      forward_channel_tile(g, c0, lanes, x + n * g.channels * g.plane(), weights, biases,
                           y + n * g.channels * g.out_plane(), relu6);
  });
}

// The input gradient of the planes [c0, c0 + lanes) of one sample (dy and dx that sample's
// [C, OH, OW] and [C, H, W]): each output pixel's gradient times each of its valid taps, added onto
// the input pixel that tap read, outputs and taps in order (so each input pixel's sum has a fixed order).
__attribute__((target_clones("avx512f", "avx2", "default")))
void backward_input_channel_tile(const ConvGeometry& g, std::int64_t c0, std::int64_t lanes,
                                 const float* __restrict dy, const float* __restrict weights, float* __restrict dx) {
  constexpr std::int64_t L = kTileChannels;
  float gy[kSmallOutPlane * L], gx[kSmallInPlane * L];
  to_channel_tile(dy + c0 * g.out_plane(), g.out_plane(), lanes, gy);
  std::fill(gx, gx + g.plane() * L, 0.0f);  // 0 + the first product is that product
  for (std::int64_t oh = 0; oh < g.out_height; ++oh)
    for (std::int64_t ow = 0; ow < g.out_width; ++ow)
      for (int h = 0; h < 2; ++h) {  // the lanes as two octets (Note [Small-plane tiles in vectors])
        Octet d;
        load(d, gy + (oh * g.out_width + ow) * L + h * kOctet);
        for (int t = 0; t < kTaps; ++t) {
          const std::int64_t source = tap_source(g, oh, ow, t);
          if (source < 0) continue;
          float* at = gx + source * L + h * kOctet;
          Octet v, w;
          load(v, at);
          load(w, weights + t * L + h * kOctet);
          v += d * w;
          std::memcpy(at, &v, sizeof(Octet));
        }
      }
  from_channel_tile(gx, g.plane(), lanes, dx + c0 * g.plane());
}

void backward_input_small_planes(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* weight,
                                 float* grad_x) {
  for_each_channel_block(g, batch, [&](std::int64_t c0, std::int64_t lanes) {
    float weights[kTaps * kTileChannels];
    transposed_filters(weight, c0, lanes, weights);
    for (std::int64_t n = 0; n < batch; ++n)
      backward_input_channel_tile(g, c0, lanes, grad_y + n * g.channels * g.out_plane(), weights,
                                  grad_x + n * g.channels * g.plane());
  });
}

// Sums samples [0, count) of the planes [c0, c0 + lanes) (x and dy the first sample's [C, H, W] and
// [C, OH, OW], `sample_x` and `sample_dy` floats from one sample to the next) into sums[t *
// kTileChannels + l], channel c0 + l's sum for tap t: per sample, output pixels and taps in order. The
// nine sums are local vectors while the samples go by (as tap_dots' are), stored once at the end.
__attribute__((target_clones("avx512f", "avx2", "default")))
void weight_grad_channel_tile(const ConvGeometry& g, std::int64_t c0, std::int64_t lanes, const float* __restrict x,
                              std::int64_t sample_x, const float* __restrict dy, std::int64_t sample_dy,
                              std::int64_t count, float* __restrict sums) {
  constexpr std::int64_t L = kTileChannels;
  float in[kSmallInPlane * L], gy[kSmallOutPlane * L];
  Octet acc[kTaps][2] = {};
  for (std::int64_t n = 0; n < count; ++n) {
    to_channel_tile(x + n * sample_x + c0 * g.plane(), g.plane(), lanes, in);
    to_channel_tile(dy + n * sample_dy + c0 * g.out_plane(), g.out_plane(), lanes, gy);
    for (std::int64_t oh = 0; oh < g.out_height; ++oh)
      for (std::int64_t ow = 0; ow < g.out_width; ++ow)
        for (int h = 0; h < 2; ++h) {
          Octet d;
          load(d, gy + (oh * g.out_width + ow) * L + h * kOctet);
          for (int t = 0; t < kTaps; ++t) {
            const std::int64_t source = tap_source(g, oh, ow, t);
            if (source < 0) continue;
            Octet v;
            load(v, in + source * L + h * kOctet);
            acc[t][h] += d * v;
          }
        }
  }
  for (int t = 0; t < kTaps; ++t)
    for (int h = 0; h < 2; ++h) std::memcpy(sums + t * L + h * kOctet, &acc[t][h], sizeof(Octet));
}

// Each block of kTileChannels channels sums its nine taps over the batch, samples in order, in float
// lanes (one per channel) moved into double totals once they hold at least kTermsPerLane terms (fewer
// than kTermsPerLane + kSmallOutPlane), as the flat loops' are: at sample boundaries fixed by the
// shapes, so the same bits for any thread count.
void backward_weight_small_planes(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* x,
                                  float* grad_weight) {
  const std::int64_t samples_per_flush = ceil_div(kTermsPerLane, g.out_plane());  // a tap adds <= out_plane terms per sample
  const std::int64_t sample_x = g.channels * g.plane(), sample_dy = g.channels * g.out_plane();
  for_each_channel_block(g, batch, [&](std::int64_t c0, std::int64_t lanes) {
    float sums[kTaps * kTileChannels];
    double totals[kTaps * kTileChannels] = {};
    for (std::int64_t n = 0; n < batch; n += samples_per_flush) {
      weight_grad_channel_tile(g, c0, lanes, x + n * sample_x, sample_x, grad_y + n * sample_dy, sample_dy,
                               std::min(samples_per_flush, batch - n), sums);
      for (std::int64_t i = 0; i < kTaps * kTileChannels; ++i) totals[i] += static_cast<double>(sums[i]);
    }
    for (std::int64_t l = 0; l < lanes; ++l)
      for (int t = 0; t < kTaps; ++t) grad_weight[(c0 + l) * kTaps + t] = static_cast<float>(totals[t * kTileChannels + l]);
  });
}

}  // namespace

bool depthwise_3x3_applies(DType dtype, const ConvGeometry& g) {
  return dtype == DType::f32 && g.kernel_h == 3 && g.kernel_w == 3 && g.pad_h == 1 && g.pad_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.stride_h == g.stride_w && (g.stride_h == 1 || g.stride_h == 2);
}

void depthwise_3x3_forward(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const float* x,
                           const float* weight, const float* bias, float* y, bool relu6) {
  if (one_pixel(g)) return forward_one_pixel(g, batch, multiplier, x, weight, bias, y, relu6);
  if (multiplier == 1 && small_planes(g)) return forward_small_planes(g, batch, x, weight, bias, y, relu6);
  const std::int64_t total = batch * g.channels;  // input planes, one per (sample, channel)
  const Layout l = layout_of(g.height, g.width, g.stride_h, total);
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  const bool through_flat = !rows_straight_out(g.out_width);
  for_each_stack(total, l, total * multiplier * kTaps * g.out_plane(), through_flat,
                 [&](std::int64_t first, std::int64_t count, float* scratch, float* flat, StackTable& table) {
                   pad_planes(l, x + first * g.plane(), count, g.height, g.width, scratch);
                   // Input plane q feeds output planes q * multiplier + k: one flat loop per k.
                   for (std::int64_t k = 0; k < multiplier; ++k) {
                     for (std::int64_t p = 0; p < count; ++p) {
                       const std::int64_t oc = (first + p) % g.channels * multiplier + k;
                       std::copy(weight + oc * kTaps, weight + (oc + 1) * kTaps, table.weight.data() + p * kTaps);
                       table.bias[p] = bias ? bias[oc] : 0.0f;
                     }
                     float* out = y + (first * multiplier + k) * g.out_plane();
                     if (!through_flat) {
                       sum_taps_into_rows(scratch, offset, table.weight.data(), table.bias.data(), count,
                                          l.plane_stride, l.row, g.out_height, g.out_width,
                                          multiplier * g.out_plane(), relu6, out);
                       continue;
                     }
                     sum_taps(kTaps, scratch, offset, table.weight.data(), table.bias.data(), count, l.plane_stride,
                              g.out_height * l.row, flat);
                     if (relu6) clamp_flat(flat, count * l.plane_stride);  // the stack's outputs, in L1
                     copy_rows(count, g.out_height, g.out_width, flat, l.plane_stride, l.row, out,
                               multiplier * g.out_plane(), g.out_width);
                   }
                 });
}

void depthwise_3x3_backward_input(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* weight,
                                  float* grad_x) {
  if (one_pixel(g)) {  // Note [One-pixel planes]
    parallel_for(batch, batch * g.channels, [&](std::int64_t n) {
      for (std::int64_t c = 0; c < g.channels; ++c)
        grad_x[n * g.channels + c] = grad_y[n * g.channels + c] * weight[c * kTaps + kCentre];
    });
    return;
  }
  if (small_planes(g)) return backward_input_small_planes(g, batch, grad_y, weight, grad_x);
  const std::int64_t total = batch * g.channels;
  const Layout l = layout_of(g.out_height, g.out_width, 1, total);  // the output gradient, padded
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  // Stride 2 scatters through the flat layout; stride 1 needs it only where rows cannot go straight out.
  const bool stride_2 = g.stride_h == 2;
  const bool through_flat = stride_2 || !rows_straight_out(g.width);
  for_each_stack(total, l, total * kTaps * g.out_plane(), through_flat,
                 [&](std::int64_t first, std::int64_t count, float* scratch, float* flat, StackTable& table) {
                   pad_planes(l, grad_y + first * g.out_plane(), count, g.out_height, g.out_width, scratch);
                   if (stride_2)
                     return backward_input_stride_2(g, l, weight, first, count, scratch, flat, table, grad_x);
                   // Each filter turned 180 degrees: tap t reads where tap 8 - t wrote.
                   for (std::int64_t p = 0; p < count; ++p) {
                     const float* filter = weight + (first + p) % g.channels * kTaps;
                     for (int t = 0; t < kTaps; ++t) table.weight[p * kTaps + t] = filter[kTaps - 1 - t];
                   }
                   if (!through_flat)
                     return sum_taps_into_rows(scratch, offset, table.weight.data(), table.bias.data(), count,
                                               l.plane_stride, l.row, g.height, g.width, g.plane(), false,
                                               grad_x + first * g.plane());
                   sum_taps(kTaps, scratch, offset, table.weight.data(), table.bias.data(), count, l.plane_stride,
                            g.height * l.row, flat);
                   copy_rows(count, g.height, g.width, flat, l.plane_stride, l.row, grad_x + first * g.plane(), g.plane(),
                             g.width);
                 });
}

// Note [A job's channels in memory order]
// A channel's weight gradient sums over the whole batch, so a job walks the samples for each of its
// channels. When a job was one stack (on 32x32 maps one channel: a padded 32x32 plane fills the L1
// stack), each sample's plane was a 4 KiB run a whole sample (C planes) from the last, and every run
// began cold: the copies into the padded and flat layouts waited on memory for 60% of the kernel's
// time (perf, [64, 144, 32, 32] on one thread). A job now covers several consecutive stacks and, for
// each sample, pads and sums them one after another: a run of their planes in memory order, which
// the hardware prefetcher follows. Each stack adds the same terms in the same order as when it was a
// job of its own, and flushes at the same points (every stack of a sample adds the same number of
// terms per lane), so the bits are unchanged.
void depthwise_3x3_backward_weight(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                                   const float* grad_y, const float* x, float* grad_weight) {
  if (one_pixel(g)) return backward_weight_one_pixel(g, batch, multiplier, grad_y, x, grad_weight);
  if (multiplier == 1 && small_planes(g)) return backward_weight_small_planes(g, batch, grad_y, x, grad_weight);
  const Layout l = layout_of(g.height, g.width, g.stride_h, ceil_div(g.channels, kMinChannelBlocks));
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  // Each plane's output gradient in the flat layout of its outputs (j = oh * row + ow): zero in the
  // thrown-away columns and up to n, a multiple of kLanes, so those j add nothing.
  const std::int64_t n = ceil_div(g.out_height * l.row, kLanes) * kLanes, block = kTermsPerLane * kLanes;
  // Note [A job's channels in memory order]: a job is `per_job` consecutive stacks of channels.
  const std::int64_t stacks = ceil_div(g.channels, l.planes);
  const std::int64_t per_job = ceil_div(stacks, std::min(stacks, kWeightGradJobs));
  const std::int64_t jobs = ceil_div(stacks, per_job);
  const std::int64_t work = g.channels * multiplier * kTaps * batch * g.out_plane();
  // One job: those channels c and one k < multiplier, so output channels c * multiplier + k over the
  // whole batch (a stem of one input channel still makes `multiplier` jobs).
  parallel_for(jobs * multiplier, work, [&](std::int64_t job) {
    const std::int64_t c0 = job / multiplier * per_job * l.planes, k = job % multiplier;
    const std::int64_t channels = std::min(per_job * l.planes, g.channels - c0);
    std::vector<float> scratch(static_cast<std::size_t>(l.size()), 0.0f);
    std::vector<float> grad(static_cast<std::size_t>(l.sub_plane()), 0.0f);
    std::vector<float> lanes(static_cast<std::size_t>(channels * kTaps * kLanes), 0.0f);
    std::vector<double> totals(static_cast<std::size_t>(channels * kTaps), 0.0);
    std::int64_t pending = 0;  // terms per lane since the last flush, the same for every channel
    for (std::int64_t s = 0; s < batch; ++s) {  // samples in order: each channel's sum order is fixed
      std::int64_t since_flush = 0;  // every stack's the same: the last one's carries to the next sample
      for (std::int64_t stack = c0; stack < c0 + channels; stack += l.planes) {
        const std::int64_t count = std::min(l.planes, c0 + channels - stack), first = s * g.channels + stack;
        float* stack_lanes = lanes.data() + (stack - c0) * kTaps * kLanes;
        double* stack_totals = totals.data() + (stack - c0) * kTaps;
        pad_planes(l, x + first * g.plane(), count, g.height, g.width, scratch.data());
        copy_rows(count, g.out_height, g.out_width, grad_y + (first * multiplier + k) * g.out_plane(),
                  multiplier * g.out_plane(), g.out_width, grad.data(), l.plane_stride, l.row);
        since_flush = pending;
        for (std::int64_t j = 0; j < n; j += block) {  // big planes flush within the plane
          const std::int64_t length = std::min(n - j, block);
          tap_dots(scratch.data() + j, offset, grad.data() + j, count, l.plane_stride, length, stack_lanes);
          since_flush += length / kLanes;
          if (since_flush >= kTermsPerLane) flush_lanes(count, stack_lanes, stack_totals), since_flush = 0;
        }
      }
      pending = since_flush;
    }
    flush_lanes(channels, lanes.data(), totals.data());
    for (std::int64_t p = 0; p < channels; ++p)
      for (int t = 0; t < kTaps; ++t)
        grad_weight[((c0 + p) * multiplier + k) * kTaps + t] = static_cast<float>(totals[p * kTaps + t]);
  });
}

}  // namespace frugal::cpu
