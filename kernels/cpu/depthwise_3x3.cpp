// The CPU's fast depthwise 3x3 convolution (kernels/cpu/depthwise_3x3.h): forward, input gradient and
// weight gradient for f32, padding 1, stride 1 or 2, as MobileNetV2 uses it. Each plane is first
// copied into a zero-padded scratch layout (Note [Depthwise 3x3 on flat padded planes]) so that every
// tap becomes one contiguous, bounds-free loop over the whole plane that GCC vectorises, whatever the
// plane's width (MobileNetV2's are 1 to 32 pixels wide). The inner loops are compiled for AVX-512,
// AVX2 and plain x86-64 and picked at load time (GCC's target_clones, as kernels/cpu/gemm.cpp does).
// What they guarantee: the same bits for any thread count (work is split by planes and channels, each
// computed whole by one thread in an order fixed by the shapes); against the reference loops in
// kernels/cpu/conv.cpp, f32 rounding differences only (multiply-adds may be fused, and the weight
// gradient sums 16 float lanes of fewer than 128 terms each into double, where the reference sums every term in double).
// Not here: other shapes and dtypes, which take the reference.
#include "kernels/cpu/depthwise_3x3.h"

#include <algorithm>
#include <vector>

#include "core/cpu/parallel.h"

namespace frugal::cpu {

// Note [Depthwise 3x3 on flat padded planes]
// A plane [H, W] is copied into scratch with a one-pixel zero border, rows `row` floats apart. With
// stride 1, output (oh, ow) reads the padded pixels (oh + kh, ow + kw), which lie at
// tap(kh, kw) + oh * row + ow: every tap reads scratch at one fixed offset from j = oh * row + ow. So
// the whole plane is one flat loop over j in [0, OH * row), nine multiply-adds per j, with no bounds
// test and no per-row restart, even when W is 2 or 4; the row - OW extra j per row are computed and
// thrown away. With stride 2, output (oh, ow) reads padded pixel (2 oh + kh, 2 ow + kw); splitting the
// padded plane into four sub-planes by the parity of row and column makes that pixel
// (oh + kh / 2, ow + kw / 2) of sub-plane (kh % 2, kw % 2), again one offset per tap from
// j = oh * row + ow, and the loads stay contiguous. The input gradient of stride 1 is the same loop
// over the padded output gradient with the filter turned 180 degrees. Scratch cells that no pixel maps
// to stay zero from allocation, so a chunk of planes zeroes its scratch once.
namespace {

constexpr int kTaps = 9;
constexpr std::int64_t kLanes = 16;  // float accumulators per tap in the weight gradient: one AVX-512 register
// Zeros after the last sub-plane: a flat loop's last j reads up to 2 floats past the padded plane
// (stride 1, tap (2, 2) of a thrown-away column), and the weight gradient rounds its loop up to kLanes.
constexpr std::int64_t kSlack = kLanes + 2;
// The weight gradient moves its float lanes into double totals once they hold at least this many
// terms (at plane or block boundaries, so where depends on the shapes only): a float sum of fewer
// than 128 terms loses at most about 128 x 2^-24 of their magnitude, and small planes (1 to 4 pixels
// at MobileNetV2's end) do not each pay a 16-lane reduction.
constexpr std::int64_t kTermsPerLane = 64;
// Planes per chunk of work are chosen so a call has at most this many chunks: each chunk allocates
// and zeroes its scratch once, and there are still enough chunks to share among threads.
constexpr std::int64_t kMaxChunks = 64;

// Where the padded pixels of one [height, width] plane lie in scratch, for stride 1 or 2.
struct Layout {
  std::int64_t stride, row, rows;  // of each sub-plane: floats per row, and rows

  std::int64_t sub_plane() const { return row * rows; }
  std::int64_t size() const { return stride * stride * sub_plane() + kSlack; }
  // Padded pixel (r, c), that is input pixel (r - 1, c - 1).
  std::int64_t at(std::int64_t r, std::int64_t c) const {
    return ((r % stride) * stride + c % stride) * sub_plane() + (r / stride) * row + c / stride;
  }
};

Layout layout_of(std::int64_t height, std::int64_t width, std::int64_t stride) {
  return {stride, ceil_div(width + 2, stride), ceil_div(height + 2, stride)};
}

// Copies a [height, width] plane to its padded place in scratch; the border cells are left untouched.
void pad_plane(const Layout& l, const float* plane, std::int64_t height, std::int64_t width, float* scratch) {
  for (std::int64_t h = 0; h < height; ++h) {
    const float* src = plane + h * width;
    if (l.stride == 1) {
      std::copy(src, src + width, scratch + l.at(h + 1, 1));
      continue;
    }
    float* odd_columns = scratch + l.at(h + 1, 1);   // padded columns 1, 3, 5...: input columns 0, 2, 4...
    float* even_columns = scratch + l.at(h + 1, 2);  // padded columns 2, 4, 6...: input columns 1, 3, 5...
    for (std::int64_t k = 0; 2 * k < width; ++k) odd_columns[k] = src[2 * k];
    for (std::int64_t k = 0; 2 * k + 1 < width; ++k) even_columns[k] = src[2 * k + 1];
  }
}

// One output pixel of a flat loop: bias + the taps' products, added in the order given.
template <int kCount>
inline __attribute__((always_inline)) void sum_taps_of(const float* src, const std::int64_t* offset,
                                                       const float* weight, float bias, std::int64_t n,
                                                       float* __restrict out) {
  for (std::int64_t j = 0; j < n; ++j) {
    float total = src[offset[0] + j] * weight[0];
    for (int t = 1; t < kCount; ++t) total += src[offset[t] + j] * weight[t];
    out[j] = total + bias;
  }
}

// out[j] = bias + sum over t < count of weight[t] * src[offset[t] + j], for j in [0, n). The count is
// a compile-time constant inside, so the taps unroll and the j loop vectorises.
__attribute__((target_clones("avx512f", "avx2", "default")))
void sum_taps(int count, const float* src, const std::int64_t* offset, const float* weight, float bias, std::int64_t n,
              float* __restrict out) {
  switch (count) {
    case 1: return sum_taps_of<1>(src, offset, weight, bias, n, out);
    case 2: return sum_taps_of<2>(src, offset, weight, bias, n, out);
    case 4: return sum_taps_of<4>(src, offset, weight, bias, n, out);
    default: return sum_taps_of<kTaps>(src, offset, weight, bias, n, out);
  }
}

// lanes[t][l] += grad[j] * src[offset[t] + j] for j in [0, n) with j % kLanes == l, for the nine
// taps at once, so each loaded gradient serves nine multiply-adds. n is a multiple of kLanes.
__attribute__((target_clones("avx512f", "avx2", "default")))
void tap_dots(const float* src, const std::int64_t* offset, const float* grad, std::int64_t n,
              float (&lanes)[kTaps][kLanes]) {
  float sums[kTaps][kLanes];  // a local copy the compiler can keep in registers: lanes may alias grad
  std::copy(&lanes[0][0], &lanes[0][0] + kTaps * kLanes, &sums[0][0]);
  for (std::int64_t j = 0; j < n; j += kLanes)
    for (int t = 0; t < kTaps; ++t)
      for (std::int64_t l = 0; l < kLanes; ++l) sums[t][l] += grad[j + l] * src[offset[t] + j + l];
  std::copy(&sums[0][0], &sums[0][0] + kTaps * kLanes, &lanes[0][0]);
}

// Adds each tap's float lanes, in lane order, into its double total and clears them.
void flush_lanes(float (&lanes)[kTaps][kLanes], double* totals) {
  for (int t = 0; t < kTaps; ++t) {
    double total = 0.0;
    for (std::int64_t l = 0; l < kLanes; ++l) total += static_cast<double>(lanes[t][l]);
    totals[t] += total;
    std::fill(lanes[t], lanes[t] + kLanes, 0.0f);
  }
}

// Where tap (kh, kw) of output (0, 0) reads, for each of the nine taps in (kh, kw) order.
void tap_offsets(const Layout& l, std::int64_t* offset) {
  for (int t = 0; t < kTaps; ++t) offset[t] = l.at(t / 3, t % 3);
}

// Copies the first `width` floats of each of `height` rows, `row` apart in flat, to a dense plane.
void unpad_rows(const float* flat, std::int64_t row, std::int64_t height, std::int64_t width, float* plane) {
  for (std::int64_t h = 0; h < height; ++h) std::copy(flat + h * row, flat + h * row + width, plane + h * width);
}

// Runs body(begin, end) over chunks of the planes [0, count), each with its own zeroed scratch and
// flat output of the given sizes.
template <typename Body>
void for_plane_chunks(std::int64_t count, std::int64_t work, std::int64_t scratch_size, std::int64_t flat_size,
                      Body&& body) {
  const std::int64_t chunk = std::max<std::int64_t>(1, ceil_div(count, kMaxChunks));
  parallel_for_chunks(count, chunk, work, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(scratch_size), 0.0f), flat(static_cast<std::size_t>(flat_size));
    body(begin, end, scratch.data(), flat.data());
  });
}

// Stride 2's input gradient, gathered: input pixel (2 i + ph, 2 j + pw) receives, along each axis, tap
// 1 of output i when its parity is 0, and taps 0 (output i + 1) and 2 (output i) when it is 1. In the
// padded output gradient (one border pixel) those outputs lie at i + a with a = 1 for taps 1 and 2 and
// a = 2 for tap 0: each of the four parity classes is one flat loop of 1, 2 or 4 taps.
void backward_input_stride_2(const ConvGeometry& g, const Layout& l, const float* filter, const float* scratch,
                             float* flat, float* dx) {
  constexpr std::int64_t kTapsOfParity[2][2] = {{1, -1}, {0, 2}};  // per parity: its taps, -1 for none
  for (std::int64_t ph = 0; ph < 2; ++ph)
    for (std::int64_t pw = 0; pw < 2; ++pw) {
      std::int64_t offset[4];
      float weight[4];
      int count = 0;
      for (std::int64_t kh : kTapsOfParity[ph])
        for (std::int64_t kw : kTapsOfParity[pw]) {
          if (kh < 0 || kw < 0) continue;
          offset[count] = (kh == 0 ? 2 : 1) * l.row + (kw == 0 ? 2 : 1);
          weight[count++] = filter[kh * 3 + kw];
        }
      const std::int64_t rows = (g.height - ph + 1) / 2, columns = (g.width - pw + 1) / 2;
      sum_taps(count, scratch, offset, weight, 0.0f, rows * l.row, flat);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < columns; ++j) dx[(2 * i + ph) * g.width + 2 * j + pw] = flat[i * l.row + j];
    }
}

}  // namespace

bool depthwise_3x3_applies(DType dtype, const ConvGeometry& g, std::int64_t multiplier) {
  return dtype == DType::f32 && multiplier == 1 && g.kernel_h == 3 && g.kernel_w == 3 && g.pad_h == 1 && g.pad_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.stride_h == g.stride_w && (g.stride_h == 1 || g.stride_h == 2);
}

void depthwise_3x3_forward(const ConvGeometry& g, std::int64_t batch, const float* x, const float* weight,
                           const float* bias, float* y) {
  const Layout l = layout_of(g.height, g.width, g.stride_h);
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  const std::int64_t count = batch * g.channels, n = g.out_height * l.row;
  for_plane_chunks(count, count * kTaps * g.out_plane(), l.size(), n,
                   [&](std::int64_t begin, std::int64_t end, float* scratch, float* flat) {
                     for (std::int64_t plane = begin; plane < end; ++plane) {  // one (sample, channel)
                       const std::int64_t c = plane % g.channels;
                       pad_plane(l, x + plane * g.plane(), g.height, g.width, scratch);
                       sum_taps(kTaps, scratch, offset, weight + c * kTaps, bias ? bias[c] : 0.0f, n, flat);
                       unpad_rows(flat, l.row, g.out_height, g.out_width, y + plane * g.out_plane());
                     }
                   });
}

void depthwise_3x3_backward_input(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* weight,
                                  float* grad_x) {
  const Layout l = layout_of(g.out_height, g.out_width, 1);  // the output gradient, padded
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  const std::int64_t count = batch * g.channels, n = g.height * l.row;
  for_plane_chunks(count, count * kTaps * g.out_plane(), l.size(), n,
                   [&](std::int64_t begin, std::int64_t end, float* scratch, float* flat) {
                     for (std::int64_t plane = begin; plane < end; ++plane) {  // one (sample, channel)
                       const float* filter = weight + plane % g.channels * kTaps;
                       pad_plane(l, grad_y + plane * g.out_plane(), g.out_height, g.out_width, scratch);
                       float* dx = grad_x + plane * g.plane();
                       if (g.stride_h == 2) {
                         backward_input_stride_2(g, l, filter, scratch, flat, dx);
                         continue;
                       }
                       float turned[kTaps];  // the filter turned 180 degrees: tap t reads where tap 8 - t wrote
                       for (int t = 0; t < kTaps; ++t) turned[t] = filter[kTaps - 1 - t];
                       sum_taps(kTaps, scratch, offset, turned, 0.0f, n, flat);
                       unpad_rows(flat, l.row, g.height, g.width, dx);
                     }
                   });
}

void depthwise_3x3_backward_weight(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* x,
                                   float* grad_weight) {
  const Layout l = layout_of(g.height, g.width, g.stride_h);
  std::int64_t offset[kTaps];
  tap_offsets(l, offset);
  // The output gradient in the flat layout of the outputs (j = oh * row + ow), zero in the thrown-away
  // columns and up to a multiple of kLanes, so those j add nothing.
  const std::int64_t n = ceil_div(g.out_height * l.row, kLanes) * kLanes;
  parallel_for(g.channels, g.channels * kTaps * batch * g.out_plane(), [&](std::int64_t c) {  // one channel, whole batch
    std::vector<float> scratch(static_cast<std::size_t>(l.size()), 0.0f), grad(static_cast<std::size_t>(n), 0.0f);
    double totals[kTaps] = {};
    float lanes[kTaps][kLanes] = {};
    std::int64_t pending = 0;  // terms per lane since the last flush
    for (std::int64_t s = 0; s < batch; ++s) {
      const std::int64_t plane = s * g.channels + c;
      pad_plane(l, x + plane * g.plane(), g.height, g.width, scratch.data());
      for (std::int64_t oh = 0; oh < g.out_height; ++oh) {
        const float* src = grad_y + plane * g.out_plane() + oh * g.out_width;
        std::copy(src, src + g.out_width, grad.data() + oh * l.row);
      }
      for (std::int64_t j = 0; j < n; j += kTermsPerLane * kLanes) {  // big planes flush within the plane
        const std::int64_t block = std::min(n - j, kTermsPerLane * kLanes);
        tap_dots(scratch.data() + j, offset, grad.data() + j, block, lanes);
        pending += block / kLanes;
        if (pending >= kTermsPerLane) flush_lanes(lanes, totals), pending = 0;
      }
    }
    flush_lanes(lanes, totals);
    for (int t = 0; t < kTaps; ++t) grad_weight[c * kTaps + t] = static_cast<float>(totals[t]);
  });
}

}  // namespace frugal::cpu
