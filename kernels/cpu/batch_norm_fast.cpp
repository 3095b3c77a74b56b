// CPU batch norm, the fast loops (cpu::fast in kernels/batch_norm_backends.h): the four kernels of
// the readable reference (kernels/cpu/batch_norm.cpp), for f32, written so that the compiler
// vectorises them, and the training forward and backward the dispatcher calls, each two of them one
// after the other, the sums read in memory order (Note [Sums in memory order]); and the same for the
// kernels that work from a saved xhat (Note [One saved tensor per BN-ReLU6] in
// kernels/batch_norm_ops.h), whose training forward and backward are per-channel sweeps that run a
// channel's two passes back to back (the separate passes measured no faster for its backward on 8x8
// and 4x4 planes). f64, f16 and bf16 go to
// the reference; planes shorter than 16 elements take loops of their own, a sample at a time
// (Note [Normalising small planes]). What changes against the reference:
//   - sums run in 16 f32 lanes per block of a channel, each block's lanes folded into double
//     (Note [Batch norm statistics in f32 lanes]);
//   - the per-channel affine is hoisted out of the element loops, which walk one contiguous plane
//     (one sample's channel) with plain pointers instead of shape.offset(n, c, s) per element, many
//     planes per call;
//   - the loops are compiled for AVX-512, AVX2 and plain x86-64, the best picked at load time
//     (GCC's target_clones, as kernels/cpu/gemm.cpp's micro-kernel), without multiply-add
//     contraction (kernels/CMakeLists.txt), so every variant gives the same bits.
// The elementwise passes keep kernels/batch_norm_ops.h's arithmetic, and so the reference's bits;
// the sums agree with the reference to f32 rounding. Everything is bit-identical for any thread
// count: work is split by plane or sample (the elementwise passes), by channel (the sweeps from a
// saved xhat), or by fixed groups of samples (the statistics and backward sums from x), and each
// channel's blocks or groups are merged in order.
// Not here: other dtypes' loops, the checks and the dispatch (kernels/batch_norm.cpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/bf16_rows.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "kernels/activation_codec_ops.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/cpu/octets.h"

namespace frugal::cpu::fast {

// Note [Batch norm statistics in f32 lanes]
// A channel's M = N * S elements are cut into blocks of whole planes (consecutive samples of one
// sample group, Note [Blocks within sample groups]) of at most kBlockElements elements, or pieces of
// one plane when a plane is larger. One pass over a block
// sums d = x - K and d^2 in 16 f32 lanes, K the block's first element, and folds the lanes into
// double: the block's mean is K + sum(d) / n and its M2 = sum(d^2) - sum(d)^2 / n. The blocks are
// merged in order with Chan's formula (Welford::merge), as the reference merges its planes. The
// shift makes a large common offset (values 1e4 + noise) cancel exactly before anything is squared,
// and each lane adds at most kBlockElements / 16 = 256 terms. The subtraction in M2 loses the digits
// that K's distance from the mean adds to sum(d^2): when the shift removed less than kFarShift of
// it (K an outlier of the block), the block is read again shifted by its mean, which costs a second
// read of 16 KiB still in L1. The plain two-pass scheme (every block read for its mean, then for the
// deviations) needs no such check, but measured on a [64, C, S] tensor of 8 MiB here, on one
// thread, it ran at 12.4 GB/s (S = 1024) and 6.0 GB/s (S = 16) against 17.6 and 9.9 for one shifted
// pass, which is as fast as a bare sum (18.7 and 10.4).
constexpr std::int64_t kLanes = 16;            // one AVX-512 register of floats, two AVX2 ones
constexpr std::int64_t kBlockElements = 4096;  // 16 KiB of floats: fits L1 (32-48 KiB) with room for the rest
// Normally distributed data puts K within 3 standard deviations of the block's mean in 99.7% of
// blocks, where sum(d)^2 / n is under 0.9 of sum(d^2); beyond, M2 would keep fewer than 21 of f32's
// 24 bits.
constexpr double kFarShift = 0.9;
// The per-channel sweeps from a saved xhat (batch_norm_train_forward_saving and the backward from
// xhat) walk a channel across the batch, one plane per sample, on planes of kSweepMinPlane and more.
// Measured on one thread when the plain forward and backward swept too, the sweeps beat the separate
// passes from 64-element planes up (25% at 32x32, equal at 8x8) and lost below (1.5-1.9x slower at
// 4x4, where each plane is a single cache line 60 KiB from the next). The plain ones read in memory
// order now, which beat their sweeps everywhere (Note [Sums in memory order]).
constexpr std::int64_t kSweepMinPlane = 64;

namespace {

// 16 float lanes, the same on every machine so that the sums are too, held as two vectors of 8
// (lanes 0-7 and 8-15). Not as one vector of 16: GCC has no register for one on AVX2 and keeps it on
// the stack, so every add of a loop summing into one went through memory. Measured (perf, one
// thread, a CIFAR-stem training step of the standard graph): block_deviations 6.9% of the step with
// one vector of 16, 3.6% with two of 8; block_grad_sums 13.8% and 10.7% (it waits on memory now).
// Passed by reference only (a vector passed by value changes the calling convention between the
// target_clones variants). "The same bits" below excludes a NaN's payload and sign: where two NaNs
// meet in an add or a multiply, which one comes out depends on the operand order GCC picks.
struct alignas(32) Lanes {  // of two octets (kernels/cpu/octets.h); aligned by hand: see LaneSums
  Octet half[2];
};
static_assert(sizeof(Lanes) == kLanes * sizeof(float));

// The lanes and the tail's lanes folded into double: each lane and its tail added, then the 16
// pairs halved in a tree (lane l + lane l + 8, then + 4, + 2, + 1), so that the adds do not wait on
// each other 16 deep: a fold ends every block, and on 4x4 maps a block is only 16 samples' planes
// (Note [Blocks within sample groups]). Its own effect was not measured apart from the blocks': the
// 4x4 maps' training forward took 13-15% longer on one thread with the smaller blocks either way. A
// row's remainder (its last length % 16 elements) is added into plain arrays: indexing a vector by a
// variable lane goes through memory every time.
double fold(const Lanes& lanes, const float (&tail)[kLanes]) {
  double pairs[kLanes];
  for (std::int64_t l = 0; l < kLanes; ++l)
    pairs[l] = static_cast<double>(lanes.half[l / kOctet][l % kOctet]) + static_cast<double>(tail[l]);
  for (std::int64_t width = kLanes / 2; width >= 1; width /= 2)
    for (std::int64_t l = 0; l < width; ++l) pairs[l] += pairs[l + width];
  return pairs[0];
}

// At most kSampleGroups groups of consecutive samples, fixed by the shape, not the thread count: the
// sums of small planes (Note [Normalising small planes]) add a group into accumulators of its own,
// then the groups in group order; the larger planes' blocks lie within one group, and a channel's
// blocks are merged in order (Note [Blocks within sample groups]). A thread takes whole groups, so
// the sums use at most four threads: as many as a batch of 64 on this project's machines needs,
// where more groups would cut the 4x4 maps' blocks smaller still.
constexpr std::int64_t kSampleGroups = 4;

// Samples per group: the last group possibly shorter, never empty (the batch is at least 1: the
// dispatcher runs no training pass on an empty tensor).
std::int64_t samples_per_group(const BatchNormShape& shape) { return (shape.batch + kSampleGroups - 1) / kSampleGroups; }

std::int64_t sample_groups(const BatchNormShape& shape) {
  return (shape.batch + samples_per_group(shape) - 1) / samples_per_group(shape);
}

// Calls body(group, first sample, end sample) for each group, in parallel when worth it.
template <typename Body>
void for_sample_groups(const BatchNormShape& shape, Body&& body) {
  const std::int64_t per_group = samples_per_group(shape);
  parallel_for(sample_groups(shape), shape.batch * shape.channels * shape.spatial, [&](std::int64_t group) {
    body(group, group * per_group, std::min(shape.batch, (group + 1) * per_group));
  });
}

// One block of channel c: `planes` runs of `length` elements, the first at `first`, each next one
// `stride` elements further (stride C * S: the same channel of the next sample).
struct Block {
  std::int64_t first, stride, planes, length;
  double count() const { return static_cast<double>(planes * length); }
};

// Note [Blocks within sample groups]
// A channel's blocks never cross from one sample group to the next: within each group, a block is
// up to kBlockElements / S consecutive samples' planes, or a piece of one plane when planes are
// larger. The memory-order passes (Note [Sums in memory order]) then read the batch a group at a
// time, all channels of a group's samples, and a thread takes whole groups, as the elementwise
// passes and the convolutions before them take samples: the gradient and x a thread sums are mostly
// those its own core wrote or read last (Note [Each thread starts on its own share] in
// core/cpu/parallel.h). Each block's result is kept, and a channel's blocks are merged in order
// after the groups, so the sums are those of the channel's walk (channel_statistics) whichever thread
// ran a group. Split by channel ranges instead, each thread read, sample by sample, the half of the
// channels it owned, about half of them written on the other core: measured with `perf record` of
// 2-thread standard-stem training steps, the backward sums took 4.0-4.6 ms of thread time a step
// against 2.4-2.8 on one thread, and 2.9-3.3 split by sample groups (docs/benchmarks.md, "The speed
// of `frugal train` on the CPU"). The cost: four blocks per channel where a whole batch of 4x4 maps
// was one, each folded and merged (their training forward 13-15% slower on one thread, measured there).
struct BlockGrid {
  BatchNormShape shape;
  std::int64_t groups;          // sample_groups
  std::int64_t group_samples;   // samples of a full group (samples_per_group)
  std::int64_t block_samples;   // samples of a full block: 1 when planes are cut into pieces
  std::int64_t pieces;          // blocks per plane: pieces of kBlockElements when S is larger, else 1
  std::int64_t group_blocks;    // blocks of a full group
  std::int64_t channel_blocks;  // blocks of a channel, in all groups

  std::int64_t group_end(std::int64_t g) const { return std::min(shape.batch, (g + 1) * group_samples); }
  // The first sample of the block that holds sample n of group g, and that block's samples.
  std::int64_t block_start(std::int64_t g, std::int64_t n) const { return n - (n - g * group_samples) % block_samples; }
  std::int64_t block_planes(std::int64_t g, std::int64_t start) const { return std::min(block_samples, group_end(g) - start); }
  // Channel c's block from sample `start` of group g (piece p of its plane when planes are cut).
  Block block(std::int64_t c, std::int64_t g, std::int64_t start, std::int64_t p) const {
    const std::int64_t stride = shape.channels * shape.spatial;
    if (pieces > 1) {
      const std::int64_t s = p * kBlockElements;
      return Block{shape.offset(start, c, s), stride, 1, std::min(kBlockElements, shape.spatial - s)};
    }
    return Block{shape.offset(start, c, 0), stride, block_planes(g, start), shape.spatial};
  }
  // That block's index among its channel's blocks, in order.
  std::int64_t index(std::int64_t g, std::int64_t start, std::int64_t p) const {
    return g * group_blocks + (start - g * group_samples) / block_samples * pieces + p;
  }
};

BlockGrid block_grid(const BatchNormShape& shape) {
  BlockGrid grid{.shape = shape, .groups = sample_groups(shape), .group_samples = samples_per_group(shape),
                 .block_samples = 1, .pieces = 1, .group_blocks = 0, .channel_blocks = 0};
  if (shape.spatial >= kBlockElements)
    grid.pieces = (shape.spatial + kBlockElements - 1) / kBlockElements;
  else
    grid.block_samples = std::min(kBlockElements / shape.spatial, grid.group_samples);
  const auto blocks_of = [&](std::int64_t samples) { return (samples + grid.block_samples - 1) / grid.block_samples * grid.pieces; };
  grid.group_blocks = blocks_of(grid.group_samples);
  const std::int64_t last = grid.groups - 1;
  grid.channel_blocks = last * grid.group_blocks + blocks_of(shape.batch - last * grid.group_samples);
  return grid;
}

// Where block `index` of channel c keeps its result (a Welford or batch_norm::GradSums): block-major,
// so that a group's results, which one thread writes, lie together, not beside another thread's in
// every channel's cache lines.
std::size_t result_at(const BlockGrid& grid, std::int64_t c, std::int64_t index) {
  return static_cast<std::size_t>(index * grid.shape.channels + c);
}

// Channel c's per-block results merged in block order.
template <typename Result>
Result merged_blocks(const std::vector<Result>& results, const BlockGrid& grid, std::int64_t c) {
  Result total;
  for (std::int64_t i = 0; i < grid.channel_blocks; ++i) total.merge(results[result_at(grid, c, i)]);
  return total;
}

// Calls body(block) for channel c's blocks in order (Note [Blocks within sample groups]).
template <typename Body>
void for_each_block(const BatchNormShape& shape, std::int64_t c, Body&& body) {
  const BlockGrid grid = block_grid(shape);
  for (std::int64_t g = 0; g < grid.groups; ++g)
    for (std::int64_t start = g * grid.group_samples; start < grid.group_end(g); start += grid.block_samples)
      for (std::int64_t p = 0; p < grid.pieces; ++p) body(grid.block(c, g, start, p));
}

// Two sums in 16 lanes each (LaneSums) and their rows' remainders (LaneTails): a block's partial
// sums, carried from one of its planes to the next. Row loops take them by reference and are inlined
// into their callers, which keep the lanes in registers as a local (in memory beside the rows read
// they could alias them); the tails are plain arrays, in memory either way. Lanes and LaneSums are
// aligned by hand: outside the AVX clones GCC aligns a 32-byte vector to 16 bytes only, so an array
// of them allocated there would meet the AVX clones' aligned loads at odd addresses; LaneSums to a
// whole cache line, so that one channel's sums never share a line with the next's.
struct alignas(64) LaneSums {
  Lanes first = {}, second = {};
};
struct LaneTails {
  float first[kLanes] = {}, second[kLanes] = {};  // a row's last length % 16 elements
};

// Adds x - shift and (x - shift)^2 of a row into `sums`.
[[gnu::always_inline]] inline void add_row_deviations(const float* row, std::int64_t length, float shift,
                                                      LaneSums& sums, LaneTails& tails) {
  std::int64_t s = 0;
  for (; s + kLanes <= length; s += kLanes) {
    for (int h = 0; h < 2; ++h) {
      Octet v;
      load(v, row + s + h * kOctet);
      const Octet d = v - shift;
      sums.first.half[h] += d;
      sums.second.half[h] += d * d;
    }
  }
  for (std::int64_t l = 0; s + l < length; ++l) {
    const float d = row[s + l] - shift;
    tails.first[l] += d;
    tails.second[l] += d * d;
  }
}

// sum(x - shift) and sum((x - shift)^2) over a block.
__attribute__((target_clones("avx512f", "avx2", "default")))
void block_deviations(const float* x, Block b, float shift, double& sum, double& squares) {
  LaneSums sums;
  LaneTails tails;
  for (std::int64_t p = 0; p < b.planes; ++p)
    add_row_deviations(x + b.first + p * b.stride, b.length, shift, sums, tails);
  sum = fold(sums.first, tails.first);
  squares = fold(sums.second, tails.second);
}

// A block's count, mean and M2 from its sums shifted by its first element (the Note): read again
// around its mean when that element was far from it.
Welford block_result(const float* x, Block b, float shift, double sum, double squares) {
  const double count = b.count();
  if (sum * sum / count > kFarShift * squares) {  // the first element is far from the block's mean
    shift = static_cast<float>(static_cast<double>(shift) + sum / count);
    block_deviations(x, b, shift, sum, squares);
  }
  const double m2 = squares - sum * sum / count;
  return Welford{count, static_cast<double>(shift) + sum / count, m2 > 0.0 ? m2 : 0.0};
}

// One block's count, mean and M2 (the Note).
Welford block_statistics(const float* x, Block b) {
  const float shift = x[b.first];
  double sum = 0.0, squares = 0.0;
  block_deviations(x, b, shift, sum, squares);
  return block_result(x, b, shift, sum, squares);
}

// How the incoming gradient goes back through a fused ReLU6 (passing where 0 < output < 6): by the
// output as stored, or by the output recomputed from x, from the input with the forward's affine
// (Note [The ReLU6 mask from the input]) or from a saved xhat (x = xhat). None set: not gated.
struct Relu6Gate {
  const float* output = nullptr;
  const batch_norm::ChannelAffine<float>* from_input = nullptr;
  const batch_norm::ChannelScaleShift<float>* from_xhat = nullptr;
  bool any() const { return output || from_input || from_xhat; }
};

// Note [The ReLU6 mask from the input]
// A BN-ReLU6's backward needs the mask 0 < y < 6 of its output y. Reading y costs a pass over a
// tensor as large as x, and on the CIFAR stem's 32x32 maps (37 MiB, more than this machine's L3) it
// comes from memory: the sums' pass read the gradient, x and y. y = clamp((x - mean) * scale + bias)
// (batch_norm::normalize) is recomputed from x instead, with the same mean, invstd, weight and bias
// the forward used: the same operations on the same floats, so the same y and the same mask
// (compiled without contraction, kernels/CMakeLists.txt). Only batch_norm_backward does this, on
// planes of at least 16 floats, whose training forward is normalize_planes; the eval forward's planes
// use the same normalize with the running statistics the eval backward is given.
// Recomputing costs a normalize per element in each of the backward's two passes, which pays only
// where y would come from memory (relu6_mask_from_input_pays): the backward streams four tensors of
// x's size (x, dy and y read, dx written), and from a 32 MiB L3 (this host's; inside its VM sysconf
// reports 320 MiB, the whole processor's, so it is not asked) not all of them stay in cache.
// Measured when the backward still swept a channel at a time, by `frugal bench roofline --threads 1`
// (2026-12-06, the AMD EPYC host; each BN-ReLU6 backward of the model timed on its own, ms per batch
// of 64 summed; the two ways alternating, three runs each): CIFAR stem (8 to 37 MiB) 130.9, 145.2 and
// 136.7 reading y, 125.0, 129.9 and 119.3 recomputing it from 8 MiB on; standard stem (6 MiB at most,
// none recomputed) 17.1-17.4 and 16.7-17.6. Recomputed everywhere, the standard stem's rows ran 7-10%
// slower (17.3-20.0 against 15.8-17.1): tensors that fit the cache are cheaper to read. Reading in
// memory order (Note [Sums in memory order]) moved the point: the same day and host, CIFAR-stem
// training steps alternating in one process between thresholds, 12 MiB against 8 took 0.977 and 0.966
// of the time on one thread, 1.005 and 1.015 on two (never recomputing: 1.027 and 1.067 of 8 MiB's);
// the 9 MiB tensors ([64, 144, 16, 16] and [64, 576, 8, 8]) took 12-19% longer recomputed, alone.
constexpr std::int64_t kMaskFromInputBytes = std::int64_t{12} << 20;

// A row of dy gated as `gate` says: `gated` filled and returned, or the row itself without a gate.
// The gating runs as a plain loop over the row: GCC vectorises that loop with mask registers, where
// comparisons written on vectors compile lane by lane for AVX-512F.
[[gnu::always_inline]] inline const float* gated_row(const float* grad, const float* x, const Relu6Gate& gate,
                                                     std::int64_t row, std::int64_t length, float* gated) {
  if (gate.output) {
    for (std::int64_t s = 0; s < length; ++s) gated[s] = batch_norm::incoming_grad<float>(grad, gate.output, row + s);
  } else if (gate.from_input) {
    for (std::int64_t s = 0; s < length; ++s)
      gated[s] = batch_norm::incoming_grad_from_input<float>(grad, x, *gate.from_input, row + s);
  } else if (gate.from_xhat) {
    for (std::int64_t s = 0; s < length; ++s)
      gated[s] = batch_norm::incoming_grad_from_xhat<float>(grad, x, *gate.from_xhat, true, row + s);
  }
  return gate.any() ? gated : grad + row;
}

// Adds dy and dy * (x - mean) of a row into `sums`.
[[gnu::always_inline]] inline void add_row_grad_sums(const float* g, const float* in, std::int64_t length, float mean,
                                                     LaneSums& sums, LaneTails& tails) {
  std::int64_t s = 0;
  for (; s + kLanes <= length; s += kLanes) {
    for (int h = 0; h < 2; ++h) {
      Octet dy, v;
      load(dy, g + s + h * kOctet);
      load(v, in + s + h * kOctet);
      sums.first.half[h] += dy;
      sums.second.half[h] += dy * (v - mean);
    }
  }
  for (std::int64_t l = 0; s + l < length; ++l) {
    tails.first[l] += g[s + l];
    tails.second[l] += g[s + l] * (in[s + l] - mean);
  }
}

// sum(dy) and sum(dy * (x - mean)) over a block, dy gated as `gate` says.
__attribute__((target_clones("avx512f", "avx2", "default")))
void block_grad_sums(const float* grad, const float* x, const Relu6Gate& gate, Block b, float mean, double& sum_dy,
                     double& sum_dy_centered) {
  LaneSums sums;
  LaneTails tails;
  float gated[kBlockElements];  // a row is at most a block long
  for (std::int64_t p = 0; p < b.planes; ++p) {
    const std::int64_t row = b.first + p * b.stride;
    add_row_grad_sums(gated_row(grad, x, gate, row, b.length, gated), x + row, b.length, mean, sums, tails);
  }
  sum_dy = fold(sums.first, tails.first);
  sum_dy_centered = fold(sums.second, tails.second);
}

// One plane's forward and input gradient, inlined into the target_clones loops below.
inline void normalize_row(const float* in, std::int64_t length, const batch_norm::ChannelAffine<float>& a, bool relu6,
                          float* out) {
  if (relu6)
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::normalize(in[s], a, true);
  else
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::normalize(in[s], a, false);
}

// `fused` (the fused ReLU6's output, or null) gates the incoming gradient.
inline void grad_input_row(const float* g, const float* in, const float* fused, std::int64_t length,
                           const batch_norm::ChannelBackward<float>& b, float* out) {
  if (fused)
    for (std::int64_t s = 0; s < length; ++s)
      out[s] = batch_norm::grad_input(batch_norm::incoming_grad<float>(g, fused, s), in[s], b);
  else
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::grad_input(g[s], in[s], b);
}

// The same with the output recomputed from the input (Note [The ReLU6 mask from the input]).
inline void grad_input_row_from_input(const float* g, const float* in, std::int64_t length,
                                      const batch_norm::ChannelAffine<float>& a,
                                      const batch_norm::ChannelBackward<float>& b, float* out) {
  for (std::int64_t s = 0; s < length; ++s)
    out[s] = batch_norm::grad_input(batch_norm::incoming_grad_from_input<float>(g, in, a, s), in[s], b);
}

// Planes [begin, end) of the forward (plane n * C + c: one sample's channel c). Many small planes
// per call (a 4x4 map is one AVX-512 vector), so the call and the channel's affine cost little
// beside the elements.
__attribute__((target_clones("avx512f", "avx2", "default")))
void normalize_planes(const float* x, const BatchNormShape& shape, std::int64_t begin, std::int64_t end,
                      const float* mean, const float* invstd, const float* weight, const float* bias, bool relu6,
                      float* y) {
  for (std::int64_t plane = begin; plane < end; ++plane) {
    const auto a = batch_norm::channel_affine(mean, invstd, weight, bias, plane % shape.channels);
    normalize_row(x + plane * shape.spatial, shape.spatial, a, relu6, y + plane * shape.spatial);
  }
}

// Planes [begin, end) of the input gradient, dy gated by `fused` (the fused ReLU6's output, or
// null), or by that output recomputed from x with the forward's weight and bias when `recompute`
// (Note [The ReLU6 mask from the input]).
__attribute__((target_clones("avx512f", "avx2", "default")))
void grad_input_planes(const float* grad, const float* x, const float* fused, bool recompute, const BatchNormShape& shape,
                       std::int64_t begin, std::int64_t end, const float* mean, const float* invstd, const float* weight,
                       const float* bias, const float* sum_dy, const float* sum_dy_xhat, bool training,
                       float* grad_input) {
  for (std::int64_t plane = begin; plane < end; ++plane) {
    const std::int64_t c = plane % shape.channels, first = plane * shape.spatial;
    const auto b = batch_norm::channel_backward(mean, invstd, weight, sum_dy, sum_dy_xhat, training, shape.per_channel(), c);
    if (recompute)
      grad_input_row_from_input(grad + first, x + first, shape.spatial,
                                batch_norm::channel_affine(mean, invstd, weight, bias, c), b, grad_input + first);
    else
      grad_input_row(grad + first, x + first, fused ? fused + first : nullptr, shape.spatial, b, grad_input + first);
  }
}

// Channel c's statistics: its blocks merged in order (Note [Batch norm statistics in f32 lanes],
// Note [Blocks within sample groups]).
// The per-channel sweeps from a saved xhat read a channel so; the plain statistics read in memory
// order (below), with the same bits.
Welford channel_statistics(const float* x, const BatchNormShape& shape, std::int64_t c) {
  Welford stats;
  for_each_block(shape, c, [&](Block b) { stats.merge(block_statistics(x, b)); });
  return stats;
}

// ---- Note [Sums in memory order]
// A channel's statistics and its backward's sums are its blocks (for_each_block) merged in order.
// Read a channel at a time, a block is up to min(kBlockElements / S, a group's samples) runs of S
// floats (4 on 32x32 maps, 16 on 16x16 and smaller in a batch of 64), one per sample, C * S floats
// apart. In MobileNetV2 those distances are multiples of 64 KiB: a channel's runs fall into the same sets
// of L1 and L2 and evict each other, and the prefetchers start again at every run. Measured on one
// thread (the AMD EPYC host, 2026-12-06), a [64, 96, 32, 32] tensor took 2.7 ms for its statistics
// read so, where one pass that reads and writes it (normalize) took 1.8. So a sample group is read
// in memory order instead: for each of its samples, every channel's plane one after another, a
// single run of C * S floats. Each channel's open block keeps its lanes and tails from one of its
// planes to the next and is finished where for_each_block ends it, its result stored by its index
// (BlockGrid). Every lane adds the same terms in the same order as the channel's walk, so the sums
// have its bits (tested), and the groups are fixed by the shape, so they do not depend on the
// thread count (Note [Blocks within sample groups]).

// Calls body(c, row, length, block, index, starts, ends) for the runs of sample group g in memory
// order: `length` floats of channel c's plane in one sample from `row`, the `block` (as
// for_each_block cuts channel c) they belong to, its `index` among the channel's blocks, and whether
// this run is the block's first (`starts`) and its last (`ends`).
template <typename Body>
[[gnu::always_inline]] inline void for_each_run_in_memory_order(const BlockGrid& grid, std::int64_t g, Body&& body) {
  const BatchNormShape& shape = grid.shape;
  for (std::int64_t n = g * grid.group_samples; n < grid.group_end(g); ++n) {
    const std::int64_t start = grid.block_start(g, n), first_index = grid.index(g, start, 0);
    const bool starts = n == start, ends = n == start + grid.block_planes(g, start) - 1;
    for (std::int64_t c = 0; c < shape.channels; ++c)
      for (std::int64_t p = 0; p < grid.pieces; ++p) {  // pieces of a large plane
        const Block block = grid.block(c, g, start, p);
        const std::int64_t row = block.first + (n - start) * block.stride;
        body(c, row, block.length, block, first_index + p, starts, ends);
      }
  }
}

// The statistics of sample group g's blocks into block_stats (at result_at);
// `open`, `tails` and `shifts` hold each channel's unfinished block.
__attribute__((target_clones("avx512f", "avx2", "default")))
void statistics_in_memory_order(const float* x, const BlockGrid& grid, std::int64_t g, Welford* block_stats,
                                LaneSums* open, LaneTails* tails, float* shifts) {
  const auto add_run = [&](std::int64_t c, std::int64_t row, std::int64_t length, const Block& b, std::int64_t index,
                           bool starts, bool ends) __attribute__((always_inline)) {
    if (starts) {
      shifts[c] = x[b.first];
      tails[c] = LaneTails{};
    }
    LaneSums sums = starts ? LaneSums{} : open[c];
    add_row_deviations(x + row, length, shifts[c], sums, tails[c]);
    if (!ends) {
      open[c] = sums;
      return;
    }
    block_stats[result_at(grid, c, index)] =
        block_result(x, b, shifts[c], fold(sums.first, tails[c].first), fold(sums.second, tails[c].second));
  };
  for_each_run_in_memory_order(grid, g, add_run);
}

// sum(dy) and sum(dy * (x - mean)) of sample group g's blocks into block_sums (at result_at), dy
// gated by the fused ReLU6's output, or by its output recomputed
// with affines[c] when they are given.
__attribute__((target_clones("avx512f", "avx2", "default")))
void grad_sums_in_memory_order(const float* grad, const float* x, const float* fused_output,
                               const batch_norm::ChannelAffine<float>* affines, const BlockGrid& grid, std::int64_t g,
                               const float* mean, batch_norm::GradSums* block_sums, LaneSums* open, LaneTails* tails) {
  float gated[kBlockElements];  // a run is at most a block long
  const auto add_run = [&](std::int64_t c, std::int64_t row, std::int64_t length, const Block&, std::int64_t index,
                           bool starts, bool ends) __attribute__((always_inline)) {
    const Relu6Gate gate = affines ? Relu6Gate{.from_input = &affines[c]} : Relu6Gate{.output = fused_output};
    if (starts) tails[c] = LaneTails{};
    LaneSums sums = starts ? LaneSums{} : open[c];
    add_row_grad_sums(gated_row(grad, x, gate, row, length, gated), x + row, length, mean[c], sums, tails[c]);
    if (!ends) {
      open[c] = sums;
      return;
    }
    block_sums[result_at(grid, c, index)] = {fold(sums.first, tails[c].first), fold(sums.second, tails[c].second)};
  };
  for_each_run_in_memory_order(grid, g, add_run);
}

// ---- The loops from a saved xhat (Note [One saved tensor per BN-ReLU6], kernels/batch_norm_ops.h)

// One plane's xhat, then y from it as stored (f32 stores what it computes).
inline void normalize_saving_row(const float* in, std::int64_t length, float mean, float invstd,
                                 const batch_norm::ChannelScaleShift<float>& a, bool relu6, float* xhat, float* y) {
  for (std::int64_t s = 0; s < length; ++s) xhat[s] = batch_norm::xhat(in[s], mean, invstd);
  if (relu6)
    for (std::int64_t s = 0; s < length; ++s) y[s] = batch_norm::output_from_xhat(xhat[s], a, true);
  else
    for (std::int64_t s = 0; s < length; ++s) y[s] = batch_norm::output_from_xhat(xhat[s], a, false);
}

// Planes [begin, end) of the forward that saves xhat.
__attribute__((target_clones("avx512f", "avx2", "default")))
void xhat_planes(const float* x, const BatchNormShape& shape, std::int64_t begin, std::int64_t end, const float* mean,
                 const float* invstd, const float* weight, const float* bias, bool relu6, float* xhat, float* y) {
  for (std::int64_t plane = begin; plane < end; ++plane) {
    const std::int64_t c = plane % shape.channels, first = plane * shape.spatial;
    normalize_saving_row(x + first, shape.spatial, mean[c], invstd[c], batch_norm::channel_scale_shift(weight, bias, c),
                         relu6, xhat + first, y + first);
  }
}

// Channel c's planes of the forward that saves xhat, for the per-channel sweep.
__attribute__((target_clones("avx512f", "avx2", "default")))
void xhat_channel(const float* x, const BatchNormShape& shape, std::int64_t c, float mean, float invstd,
                  const batch_norm::ChannelScaleShift<float>& a, bool relu6, float* xhat, float* y) {
  for (std::int64_t n = 0; n < shape.batch; ++n) {
    const std::int64_t first = shape.offset(n, c, 0);
    normalize_saving_row(x + first, shape.spatial, mean, invstd, a, relu6, xhat + first, y + first);
  }
}

// y from one plane's xhat (or a piece of it).
inline void affine_row(const float* in, std::int64_t length, const batch_norm::ChannelScaleShift<float>& a, bool relu6,
                       float* out) {
  if (relu6)
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::output_from_xhat(in[s], a, true);
  else
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::output_from_xhat(in[s], a, false);
}

// Planes [begin, end) of batch_norm_affine.
__attribute__((target_clones("avx512f", "avx2", "default")))
void affine_planes(const float* xhat, const BatchNormShape& shape, std::int64_t begin, std::int64_t end,
                   const float* weight, const float* bias, bool relu6, float* y) {
  for (std::int64_t plane = begin; plane < end; ++plane)
    affine_row(xhat + plane * shape.spatial, shape.spatial,
               batch_norm::channel_scale_shift(weight, bias, plane % shape.channels), relu6, y + plane * shape.spatial);
}

// One plane's input gradient from xhat, the gradient gated by the recomputed output with relu6.
inline void xhat_grad_input_row(const float* g, const float* in, std::int64_t length,
                                const batch_norm::ChannelScaleShift<float>& a, bool relu6,
                                const batch_norm::ChannelBackward<float>& b, float* out) {
  if (relu6)
    for (std::int64_t s = 0; s < length; ++s)
      out[s] = batch_norm::grad_input_from_xhat(batch_norm::incoming_grad_from_xhat<float>(g, in, a, true, s), in[s], b);
  else
    for (std::int64_t s = 0; s < length; ++s) out[s] = batch_norm::grad_input_from_xhat(g[s], in[s], b);
}

// Channel c's planes of it.
__attribute__((target_clones("avx512f", "avx2", "default")))
void xhat_grad_input_channel(const float* grad, const float* xhat, const BatchNormShape& shape, std::int64_t c,
                             const batch_norm::ChannelScaleShift<float>& a, bool relu6,
                             const batch_norm::ChannelBackward<float>& b, float* grad_input) {
  for (std::int64_t n = 0; n < shape.batch; ++n) {
    const std::int64_t first = shape.offset(n, c, 0);
    xhat_grad_input_row(grad + first, xhat + first, shape.spatial, a, relu6, b, grad_input + first);
  }
}

// Channel c's sum(dy) and sum(dy * xhat): block_grad_sums with x = xhat and mean 0.
void xhat_channel_grad_sums(const float* grad, const float* xhat, const BatchNormShape& shape, std::int64_t c,
                            const batch_norm::ChannelScaleShift<float>& a, bool relu6, float* sum_dy,
                            float* sum_dy_xhat) {
  batch_norm::GradSums sums;
  for_each_block(shape, c, [&](Block b) {
    double dy = 0.0, dy_xhat = 0.0;
    block_grad_sums(grad, xhat, {.from_xhat = relu6 ? &a : nullptr}, b, 0.0f, dy, dy_xhat);
    sums.merge({dy, dy_xhat});
  });
  sum_dy[c] = static_cast<float>(sums.dy);
  sum_dy_xhat[c] = static_cast<float>(sums.dy_xhat);
}

// ---- xhat kept in bf16, ReLU6's mask as bits (Note [Compact xhat in the same pass])

// Note [Compact xhat in the same pass]
// With bf16 compression and bit masks (nn/saved_activations.h) BatchNorm-ReLU6 keeps xhat in bf16
// and the mask 0 < y < 6 as bits. Done as separate passes, the forward writes xhat in f32, a cast
// reads it back to write bf16, and pack_mask_between reads y again; the backward widens all of xhat
// to f32 and apply_packed_mask gates all of dy before BatchNorm's own backward reads both: on the
// CIFAR stem these passes were a fifth of a training step. Here the forward computes xhat and y 8
// elements at a time and stores the bf16 xhat and the bits straight from registers (Note [The
// compact forward in registers]); the backward widens xhat and gates dy in registers (Note
// [Widening in registers]). The same arithmetic on the same values as the separate passes, so the
// same bits (tests/cpu/test_batch_norm_normalized.cpp checks), with xhat written once, in 2 bytes.
// A plane's bits must start a byte, so that no two threads write one: masks need planes of a
// multiple of 8 elements (every plane of MobileNetV2 at 32x32 with the CIFAR stem is); other shapes
// take the separate passes (kernels/batch_norm.cpp).

// The buffers of the rebuild (compact_affine_planes) and of the backward whose mask is recomputed.
constexpr std::int64_t kPiece = kBlockElements;  // what block_grad_sums takes at once, and a multiple of 8

// The loops with a piece buffer are functions of their own, each compiled for AVX-512, AVX2 and
// x86-64: GCC does not inline a function with a 16 KiB array into the target_clones loops, and
// left as a plain function it would run without AVX.

// Note [The compact forward in registers]
// The forward keeping a bf16 xhat and the mask bits computes 8 elements at a time in registers:
// xhat, y from it (batch_norm::output_from_xhat's product, sum and clamp), xhat rounded to bf16 and
// the 8 bits of 0 < y < 6, then stores y, the 8 bf16 values and one mask byte. Through a piece
// buffer (xhat written in f32, then f32_to_bf16 and a packing loop reading it and y back) these were
// 9.9% of a one-thread CIFAR-stem step with bf16 and bit masks (perf: the normalising loop 4.1%, the
// packing 3.8%, the cast 2.1%). The same operations on the same values as those loops, so the same
// bits (tests/cpu/test_batch_norm_normalized.cpp).

// f32_to_bf16's rounding (nearest even, a NaN kept and made quiet) of 8 values in lanes.
inline void store_bf16(BFloat16* out, const Octet& v) {
  const OctetBits bits = (OctetBits)v;
  const OctetBits rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const OctetBits quiet_nan = (bits >> 16) | 0x40u;
  const OctetHalves halves = __builtin_convertvector((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded, OctetHalves);
  std::memcpy(static_cast<void*>(out), &halves, sizeof halves);
}

// One plane's forward: xhat in bf16 and, with a mask, its bits, y in f32 from the f32 xhat. A plane
// of a length not a multiple of 8 (there is no mask then) ends through normalize_saving_row.
__attribute__((target_clones("avx512f", "avx2", "default")))
void normalize_compact_row(const float* in, std::int64_t length, float mean, float invstd,
                           const batch_norm::ChannelScaleShift<float>& a, bool relu6, BFloat16* xhat,
                           std::uint8_t* mask, float* y) {
  const OpenRange<float> range = open_range<float>(0.0, kReLU6Top);
  const Octet zero = {}, six = zero + static_cast<float>(kReLU6Top);
  const float weight = a.weight, bias = a.bias;
  const std::int64_t whole = length / kOctet * kOctet;
  for (std::int64_t s = 0; s < whole; s += kOctet) {
    Octet x;
    load(x, in + s);
    const Octet normalized = (x - mean) * invstd;                    // batch_norm::xhat
    Octet out = normalized * weight + bias;                           // multiply_add_unfused: -ffp-contract=off
    if (relu6) {                                                      // clamp_nan(out, 0, 6)
      out = out < zero ? zero : out;
      out = out > six ? six : out;
    }
    std::memcpy(y + s, &out, sizeof out);
    store_bf16(xhat + s, normalized);
    if (mask) mask[s / kOctet] = mask_byte_of(out, range);
  }
  if (whole == length) return;
  float tail[kOctet];
  normalize_saving_row(in + whole, length - whole, mean, invstd, a, relu6, tail, y + whole);
  f32_to_bf16(tail, xhat + whole, length - whole);
}

// Planes [begin, end) of it.
void compact_planes(const float* x, const BatchNormShape& shape, std::int64_t begin, std::int64_t end,
                    const float* mean, const float* invstd, const float* weight, const float* bias, bool relu6,
                    BFloat16* xhat, std::uint8_t* mask, float* y) {
  for (std::int64_t plane = begin; plane < end; ++plane) {
    const std::int64_t c = plane % shape.channels, first = plane * shape.spatial;
    normalize_compact_row(x + first, shape.spatial, mean[c], invstd[c], batch_norm::channel_scale_shift(weight, bias, c),
                          relu6, xhat + first, mask ? mask + first / 8 : nullptr, y + first);
  }
}

// Channel c's planes of it, for the per-channel sweep.
void compact_channel(const float* x, const BatchNormShape& shape, std::int64_t c, float mean, float invstd,
                     const batch_norm::ChannelScaleShift<float>& a, bool relu6, BFloat16* xhat, std::uint8_t* mask,
                     float* y) {
  for (std::int64_t n = 0; n < shape.batch; ++n) {
    const std::int64_t first = shape.offset(n, c, 0);
    normalize_compact_row(x + first, shape.spatial, mean, invstd, a, relu6, xhat + first,
                          mask ? mask + first / 8 : nullptr, y + first);
  }
}

// Planes [begin, end) of batch_norm_affine from a bf16 xhat.
__attribute__((target_clones("avx512f", "avx2", "default")))
void compact_affine_planes(const BFloat16* xhat, const BatchNormShape& shape, std::int64_t begin, std::int64_t end,
                           const float* weight, const float* bias, bool relu6, float* y) {
  float piece[kPiece];
  for (std::int64_t plane = begin; plane < end; ++plane) {
    const auto a = batch_norm::channel_scale_shift(weight, bias, plane % shape.channels);
    for (std::int64_t s = 0; s < shape.spatial; s += kPiece) {
      const std::int64_t first = plane * shape.spatial + s, n = std::min(kPiece, shape.spatial - s);
      bf16_to_f32(xhat + first, piece, n);
      affine_row(piece, n, a, relu6, y + first);
    }
  }
}

// n elements of dy into a buffer, gated by the mask's bits when there is one (mask_at: the bits of
// the first element, at the start of a byte; n then a multiple of 8).
inline void gate_piece(const float* grad, const std::uint8_t* mask_at, std::int64_t n, float* grad_piece) {
  if (!mask_at) {
    std::memcpy(grad_piece, grad, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  for (std::int64_t byte = 0; byte < n / 8; ++byte) apply_mask_byte(grad, mask_at, grad_piece, n, byte);
}

// n elements of xhat widened, and of dy gated (gate_piece), into buffers: the rows' last elements
// that fill no whole vector, and the backward whose mask is recomputed.
__attribute__((target_clones("avx512f", "avx2", "default")))
void widen_piece(const float* __restrict grad, const BFloat16* __restrict xhat, const std::uint8_t* __restrict mask_at,
                 std::int64_t n, float* __restrict grad_piece, float* __restrict xhat_piece) {
  bf16_to_f32(xhat, xhat_piece, n);
  gate_piece(grad, mask_at, n, grad_piece);
}

// Note [Widening in registers]
// With the mask as bits (or no ReLU6 to gate by), BatchNorm's two backward passes from a bf16 xhat
// widen 8 values of xhat and gate 8 of dy (one mask byte) in registers and use them there: no piece
// buffer is written and read back. Through the buffers (widen_piece, then the f32 loops) the
// widening and gating were 12.6% of a one-thread CIFAR-stem step (perf), each element widened
// twice, once per pass. The sums keep block_grad_sums' 16 lanes as two octets (kernels/cpu/octets.h:
// load_gated gates by a mask byte): a 16-float vector has no register on AVX2, so GCC keeps it on
// the stack and every add of the loop went through memory (measured: the sums pass took 10.0% of
// the step so, 7.4% in two registers, where reading dy from memory bounds it). The arithmetic is
// the f32 loops' on the same values in the same lanes, so the same bits
// (tests/cpu/test_batch_norm_normalized.cpp). A ReLU6 without bits recomputes its mask from xhat
// (incoming_grad_from_xhat): that form keeps the buffers (compact_channel_grad_sums_buffered,
// compact_grad_input_channel_buffered). An f32 xhat with bits (one decoded from 8-bit codes; an
// exact f32 xhat keeps no bits, it gives the mask itself) takes the same loops with plain loads
// (load_xhat): gated by separate passes, its dy was first copied whole into a gated map, which put
// an int8 MobileNetV2 step's peak at 62.2 MiB instead of 57.7 (batch 64).

// 8 bf16 values as f32: each value's bits moved to the top half of a 32-bit word, as bf16_to_f32
// does. Casts between vectors of one size reinterpret the bits.
inline void load_widened(Octet& v, const BFloat16* p) {
  OctetHalves halves;
  std::memcpy(&halves, p, sizeof halves);
  v = (Octet)(__builtin_convertvector(halves, OctetWords) << 16);
}

// The mask byte of element i (a multiple of 8) of a tensor whose first bit is at `mask` (null: no
// mask).
inline const std::uint8_t* mask_byte(const std::uint8_t* mask, std::int64_t i) { return mask ? mask + i / 8 : nullptr; }

// The two forms of xhat the gated backward below reads: bf16, widened, or f32 as it is (one decoded
// from 8-bit codes). Overloads, so that one loop body serves both; always inlined into each
// instruction set's clone.
[[gnu::always_inline]] inline void load_xhat(Octet& v, const BFloat16* p) { load_widened(v, p); }
[[gnu::always_inline]] inline void load_xhat(Octet& v, const float* p) { load(v, p); }
[[gnu::always_inline]] inline void load_piece(const float* grad, const BFloat16* xhat, const std::uint8_t* mask_at,
                                              std::int64_t n, float* grad_piece, float* xhat_piece) {
  widen_piece(grad, xhat, mask_at, n, grad_piece, xhat_piece);
}
[[gnu::always_inline]] inline void load_piece(const float* grad, const float* xhat, const std::uint8_t* mask_at,
                                              std::int64_t n, float* grad_piece, float* xhat_piece) {
  std::memcpy(xhat_piece, xhat, static_cast<std::size_t>(n) * sizeof(float));
  gate_piece(grad, mask_at, n, grad_piece);
}

// One block's sum(dy) and sum(dy * xhat) from a bf16 or f32 xhat: block_grad_sums with mean 0 on
// the (widened,) gated values (x - 0 is x). A row's last length % 16 elements (8 or none with a
// mask, whose planes hold a multiple of 8; up to 15 without) go through load_piece into the tail
// lanes, in a loop of their own after the rows' whole vectors (a call inside the vector loop would
// have the sums saved around it). Each lane still adds its elements in row order, so the sums are
// block_grad_sums'.
template <typename XHat>
[[gnu::always_inline]] inline void gated_block_grad_sums(const float* grad, const XHat* xhat, const std::uint8_t* mask,
                                                         Block b, double& sum_dy, double& sum_dy_xhat) {
  const std::int64_t whole = b.length / kLanes * kLanes;
  Lanes dy_sums = {}, xhat_sums = {};
  for (std::int64_t p = 0; p < b.planes; ++p) {
    const std::int64_t row = b.first + p * b.stride;
    for (std::int64_t s = row; s < row + whole; s += kLanes)
      for (int h = 0; h < 2; ++h) {
        const std::int64_t at = s + h * kOctet;
        Octet g, v;
        load_gated(g, grad + at, mask_byte(mask, at));
        load_xhat(v, xhat + at);
        dy_sums.half[h] += g;
        xhat_sums.half[h] += g * v;
      }
  }
  float tail_dy[kLanes] = {}, tail_xhat[kLanes] = {}, tail_g[kLanes], tail_v[kLanes];
  for (std::int64_t p = 0; p < b.planes && whole < b.length; ++p) {
    const std::int64_t tail = b.first + p * b.stride + whole;
    load_piece(grad + tail, xhat + tail, mask_byte(mask, tail), b.length - whole, tail_g, tail_v);
    for (std::int64_t l = 0; whole + l < b.length; ++l) {
      tail_dy[l] += tail_g[l];
      tail_xhat[l] += tail_g[l] * tail_v[l];
    }
  }
  sum_dy = fold(dy_sums, tail_dy);
  sum_dy_xhat = fold(xhat_sums, tail_xhat);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void block_grad_sums_in_lanes(const float* grad, const BFloat16* xhat, const std::uint8_t* mask, Block b,
                              double& sum_dy, double& sum_dy_xhat) {
  gated_block_grad_sums(grad, xhat, mask, b, sum_dy, sum_dy_xhat);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void block_grad_sums_in_lanes(const float* grad, const float* xhat, const std::uint8_t* mask, Block b,
                              double& sum_dy, double& sum_dy_xhat) {
  gated_block_grad_sums(grad, xhat, mask, b, sum_dy, sum_dy_xhat);
}

// Channel c's sums in lanes, block by block.
template <typename XHat>
void channel_grad_sums_in_lanes(const float* grad, const XHat* xhat, const std::uint8_t* mask,
                                const BatchNormShape& shape, std::int64_t c, float* sum_dy, float* sum_dy_xhat) {
  batch_norm::GradSums sums;
  for_each_block(shape, c, [&](Block b) {
    double dy = 0.0, dy_xhat = 0.0;
    block_grad_sums_in_lanes(grad, xhat, mask, b, dy, dy_xhat);
    sums.merge({dy, dy_xhat});
  });
  sum_dy[c] = static_cast<float>(sums.dy);
  sum_dy_xhat[c] = static_cast<float>(sums.dy_xhat);
}

// Channel c's input gradient from a bf16 or f32 xhat in registers: grad_input_from_xhat on 8
// elements at a time, a row's last length % 8 (without a mask only) through load_piece.
template <typename XHat>
[[gnu::always_inline]] inline void gated_grad_input_channel(const float* grad, const XHat* xhat,
                                                            const std::uint8_t* mask, const BatchNormShape& shape,
                                                            std::int64_t c, const batch_norm::ChannelBackward<float>& b,
                                                            float* grad_input) {
  const std::int64_t whole = shape.spatial / kOctet * kOctet;
  // In locals: read through `b` the loop would load them again after every store to grad_input.
  const float scale = b.scale, mean_dy = b.mean_dy, mean_dy_xhat = b.mean_dy_xhat;
  for (std::int64_t n = 0; n < shape.batch; ++n) {
    const std::int64_t first = shape.offset(n, c, 0);
    for (std::int64_t s = first; s < first + whole; s += kOctet) {
      Octet g, v;
      load_gated(g, grad + s, mask_byte(mask, s));
      load_xhat(v, xhat + s);
      const Octet out = scale * (g - mean_dy - v * mean_dy_xhat);
      std::memcpy(grad_input + s, &out, sizeof out);
    }
  }
  float tail_g[kOctet], tail_v[kOctet];
  for (std::int64_t n = 0; n < shape.batch && whole < shape.spatial; ++n) {
    const std::int64_t tail = shape.offset(n, c, whole);
    load_piece(grad + tail, xhat + tail, nullptr, shape.spatial - whole, tail_g, tail_v);
    for (std::int64_t l = 0; whole + l < shape.spatial; ++l)
      grad_input[tail + l] = batch_norm::grad_input_from_xhat(tail_g[l], tail_v[l], b);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void grad_input_channel_in_lanes(const float* grad, const BFloat16* xhat, const std::uint8_t* mask,
                                 const BatchNormShape& shape, std::int64_t c,
                                 const batch_norm::ChannelBackward<float>& b, float* grad_input) {
  gated_grad_input_channel(grad, xhat, mask, shape, c, b, grad_input);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void grad_input_channel_in_lanes(const float* grad, const float* xhat, const std::uint8_t* mask,
                                 const BatchNormShape& shape, std::int64_t c,
                                 const batch_norm::ChannelBackward<float>& b, float* grad_input) {
  gated_grad_input_channel(grad, xhat, mask, shape, c, b, grad_input);
}

// Channel c's whole backward in lanes: its sums (when wanted), then its input gradient.
template <typename XHat>
void channel_backward_in_lanes(const float* grad, const XHat* xhat, const std::uint8_t* mask,
                               const BatchNormShape& shape, std::int64_t c, const float* invstd, const float* weight,
                               bool training, float* sum_dy, float* sum_dy_xhat, float* grad_input) {
  if (sum_dy) channel_grad_sums_in_lanes(grad, xhat, mask, shape, c, sum_dy, sum_dy_xhat);
  const auto b = batch_norm::channel_backward<float>(nullptr, invstd, weight, sum_dy, sum_dy_xhat, training,
                                                     shape.per_channel(), c);
  grad_input_channel_in_lanes(grad, xhat, mask, shape, c, b, grad_input);
}

// Channel c's sum(dy) and sum(dy * xhat) from a bf16 xhat whose ReLU6 mask is recomputed: block by
// block, each widened into L1 and summed by block_grad_sums as xhat_channel_grad_sums sums it (the
// same lanes, so the same sums).
void compact_channel_grad_sums_buffered(const float* grad, const BFloat16* xhat, const BatchNormShape& shape,
                                        std::int64_t c, const batch_norm::ChannelScaleShift<float>& a,
                                        float* sum_dy, float* sum_dy_xhat) {
  float grad_piece[kPiece], xhat_piece[kPiece];
  batch_norm::GradSums sums;
  for_each_block(shape, c, [&](Block b) {
    for (std::int64_t p = 0; p < b.planes; ++p) {
      const std::int64_t row = b.first + p * b.stride;
      widen_piece(grad + row, xhat + row, nullptr, b.length, grad_piece + p * b.length, xhat_piece + p * b.length);
    }
    double dy = 0.0, dy_xhat = 0.0;
    block_grad_sums(grad_piece, xhat_piece, {.from_xhat = &a}, Block{0, b.length, b.planes, b.length}, 0.0f, dy,
                    dy_xhat);
    sums.merge({dy, dy_xhat});
  });
  sum_dy[c] = static_cast<float>(sums.dy);
  sum_dy_xhat[c] = static_cast<float>(sums.dy_xhat);
}

// Channel c's input gradient from a bf16 xhat whose ReLU6 mask is recomputed, a piece of a plane at
// a time.
__attribute__((target_clones("avx512f", "avx2", "default")))
void compact_grad_input_channel_buffered(const float* grad, const BFloat16* xhat, const BatchNormShape& shape,
                                         std::int64_t c, const batch_norm::ChannelScaleShift<float>& a,
                                         const batch_norm::ChannelBackward<float>& b, float* grad_input) {
  float grad_piece[kPiece], xhat_piece[kPiece];
  for (std::int64_t n = 0; n < shape.batch; ++n)
    for (std::int64_t s = 0; s < shape.spatial; s += kPiece) {
      const std::int64_t first = shape.offset(n, c, s), length = std::min(kPiece, shape.spatial - s);
      widen_piece(grad + first, xhat + first, nullptr, length, grad_piece, xhat_piece);
      xhat_grad_input_row(grad_piece, xhat_piece, length, a, true, b, grad_input + first);
    }
}

// Calls body(begin, end) over all N * C planes in chunks of about kBlockElements elements, in
// parallel when worth it.
template <typename Body>
void for_plane_chunks(const BatchNormShape& shape, Body&& body) {
  const std::int64_t planes = shape.batch * shape.channels;
  const std::int64_t chunk = std::max<std::int64_t>(1, kBlockElements / std::max<std::int64_t>(1, shape.spatial));
  parallel_for_chunks(planes, chunk, planes * shape.spatial, body);
}

// f32 with planes of at least one vector. Shorter planes (2x2 and 1x1 maps, [N, C] input) would leave
// the lanes empty and every element to the scalar remainder loops (measured on [64, 960, 2, 2], the
// reference ran the forward 2.4x and the backward 1.4x faster): they take the per-sample loops.
bool runs_fast(DType dtype, const BatchNormShape& shape) { return dtype == DType::f32 && shape.spatial >= kLanes; }

const float* as_f32(const void* p) { return static_cast<const float*>(p); }
float* as_f32(void* p) { return static_cast<float*>(p); }

// Every channel's statistics: the sample groups read in memory order, in parallel, then each
// channel's blocks merged in order.
void statistics_by_sample_groups(const float* x, const BatchNormShape& shape, double momentum, double eps,
                                 float* save_mean, float* save_invstd, float* running_mean, float* running_var) {
  const BlockGrid grid = block_grid(shape);
  const auto channels = static_cast<std::size_t>(shape.channels);
  std::vector<Welford> block_stats(channels * static_cast<std::size_t>(grid.channel_blocks));
  for_sample_groups(shape, [&](std::int64_t g, std::int64_t, std::int64_t) {
    std::vector<LaneSums> open(channels);
    std::vector<LaneTails> tails(channels);
    std::vector<float> shifts(channels);
    statistics_in_memory_order(x, grid, g, block_stats.data(), open.data(), tails.data(), shifts.data());
  });
  for (std::int64_t c = 0; c < shape.channels; ++c)
    batch_norm::finish_statistics(merged_blocks(block_stats, grid, c), c, momentum, eps, save_mean, save_invstd,
                                  running_mean, running_var);
}

// Every channel's sum(dy) and sum(dy * xhat), the sample groups read in memory order, dy gated by
// fused_output or, when `recompute`, by the output recomputed from x with the forward's weight and
// bias.
void grad_sums_by_sample_groups(const float* grad, const float* x, const float* fused_output, bool recompute,
                                const BatchNormShape& shape, const float* mean, const float* invstd,
                                const float* weight, const float* bias, float* sum_dy, float* sum_dy_xhat) {
  const BlockGrid grid = block_grid(shape);
  const auto channels = static_cast<std::size_t>(shape.channels);
  std::vector<batch_norm::GradSums> block_sums(channels * static_cast<std::size_t>(grid.channel_blocks));
  std::vector<batch_norm::ChannelAffine<float>> affines;
  if (recompute)
    for (std::int64_t c = 0; c < shape.channels; ++c) affines.push_back(batch_norm::channel_affine(mean, invstd, weight, bias, c));
  for_sample_groups(shape, [&](std::int64_t g, std::int64_t, std::int64_t) {
    std::vector<LaneSums> open(channels);
    std::vector<LaneTails> tails(channels);
    grad_sums_in_memory_order(grad, x, fused_output, recompute ? affines.data() : nullptr, grid, g, mean,
                              block_sums.data(), open.data(), tails.data());
  });
  for (std::int64_t c = 0; c < shape.channels; ++c) {  // sum(dy * xhat) = invstd * sum(dy * (x - mean))
    const batch_norm::GradSums sums = merged_blocks(block_sums, grid, c);
    sum_dy[c] = static_cast<float>(sums.dy);
    sum_dy_xhat[c] = static_cast<float>(sums.dy_xhat * static_cast<double>(invstd[c]));
  }
}

// The input gradient over every plane, in chunks of planes in memory order (grad_input_planes): the
// backward's second pass, after the sums.
void grad_input_by_plane_chunks(const float* grad, const float* x, const float* fused_output, bool recompute,
                                const BatchNormShape& shape, const float* mean, const float* invstd,
                                const float* weight, const float* bias, const float* sum_dy, const float* sum_dy_xhat,
                                bool training, float* grad_input) {
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    grad_input_planes(grad, x, fused_output, recompute, shape, begin, end, mean, invstd, weight, bias, sum_dy,
                      sum_dy_xhat, training, grad_input);
  });
}

// Note [Normalising small planes]: with planes of fewer than 16 elements (MobileNetV2's 4, 2 and 1
// pixel maps late in the network) a loop per plane is a few elements long. But every sample is the
// same [C, S] pattern of channels, so the channel's mean, scale and bias are laid out once per call
// along one sample's C * S elements, and each sample is then one contiguous loop over them, the
// per-element arithmetic still batch_norm::normalize's: the same bits as the reference.
__attribute__((target_clones("avx512f", "avx2", "default")))
void normalize_sample(const float* x, std::int64_t length, const float* mean, const float* scale, const float* bias,
                      bool relu6, float* y) {
  if (relu6) {
    for (std::int64_t i = 0; i < length; ++i)
      y[i] = batch_norm::normalize(x[i], batch_norm::ChannelAffine<float>{mean[i], scale[i], bias[i]}, true);
    return;
  }
  for (std::int64_t i = 0; i < length; ++i)
    y[i] = batch_norm::normalize(x[i], batch_norm::ChannelAffine<float>{mean[i], scale[i], bias[i]}, false);
}

// A per-channel value laid out along one sample's C * S elements.
std::vector<float> per_element(std::int64_t channels, std::int64_t spatial, const auto& value_of_channel) {
  std::vector<float> out(static_cast<std::size_t>(channels * spatial));
  for (std::int64_t c = 0; c < channels; ++c) std::fill_n(out.begin() + c * spatial, spatial, value_of_channel(c));
  return out;
}

void normalize_small_planes(const float* x, const BatchNormShape& shape, const float* mean, const float* invstd,
                            const float* weight, const float* bias, bool relu6, float* y) {
  const std::int64_t length = shape.channels * shape.spatial;  // one sample
  auto affine = [&](std::int64_t c) { return batch_norm::channel_affine(mean, invstd, weight, bias, c); };
  const std::vector<float> means = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return affine(c).mean; });
  const std::vector<float> scales = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return affine(c).scale; });
  const std::vector<float> biases = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return affine(c).bias; });
  parallel_for(shape.batch, shape.batch * length, [&](std::int64_t n) {
    normalize_sample(x + n * length, length, means.data(), scales.data(), biases.data(), relu6, y + n * length);
  });
}

// Sums on small planes, in the same per-sample layout: each of kSampleGroups fixed groups of
// consecutive samples adds its samples element by element into double accumulators of its own;
// the groups are then added in group order and each channel's S elements in order. Fixed by the
// shapes, so the same bits on any thread count; the reference sums a channel element by element
// instead, so the two differ by rounding. The backward's sums are of dy and dy * (x - mean).

// The statistics on small planes, grouped the same way: each group adds d = x - K and d^2 element
// by element in double, K the channel's first element (so a large common offset cancels before
// anything is squared), and a channel's mean is K + sum(d) / M and its M2 sum(d^2) - sum(d)^2 / M.
// In double, with d^2 of an f32 difference exact, K's distance from the mean costs nothing unless it
// is millions of standard deviations.
__attribute__((target_clones("avx512f", "avx2", "default")))
void add_sample_deviations(const float* x, std::int64_t length, const float* shift, double* sums, double* squares) {
  for (std::int64_t i = 0; i < length; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(shift[i]);
    sums[i] += d;
    squares[i] += d * d;
  }
}

// A channel's total of per-element accumulators over the groups, in group order, then S order.
double channel_total(const std::vector<double>& sums, const BatchNormShape& shape, std::int64_t c) {
  const std::int64_t length = shape.channels * shape.spatial;
  double total = 0.0;
  for (std::int64_t group = 0; group < sample_groups(shape); ++group)
    for (std::int64_t s = 0; s < shape.spatial; ++s) total += sums[group * length + c * shape.spatial + s];
  return total;
}

void small_plane_statistics(const float* x, const BatchNormShape& shape, double momentum, double eps, float* save_mean,
                            float* save_invstd, float* running_mean, float* running_var) {
  const std::int64_t length = shape.channels * shape.spatial;
  const std::vector<float> shifts = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return x[c * shape.spatial]; });
  std::vector<double> sums(static_cast<std::size_t>(sample_groups(shape) * length)), squares(sums.size());
  for_sample_groups(shape, [&](std::int64_t group, std::int64_t first, std::int64_t end) {
    for (std::int64_t n = first; n < end; ++n)
      add_sample_deviations(x + n * length, length, shifts.data(), &sums[group * length], &squares[group * length]);
  });
  const auto count = static_cast<double>(shape.per_channel());
  for (std::int64_t c = 0; c < shape.channels; ++c) {
    const double sum = channel_total(sums, shape, c), m2 = channel_total(squares, shape, c) - sum * sum / count;
    const Welford stats{count, static_cast<double>(shifts[c * shape.spatial]) + sum / count, m2 > 0.0 ? m2 : 0.0};
    batch_norm::finish_statistics(stats, c, momentum, eps, save_mean, save_invstd, running_mean, running_var);
  }
}

// A sample's dy and dy * (x - mean), element by element. With a fused ReLU6 the sample's gradient is
// gated into `gated` first (gated_row): gated inside this loop, the mask's test compiled to a branch
// per element, mispredicted on about half of them, and the loop ran scalar (8.5% of a 2-thread
// standard-stem training step, `perf record`, 2026-12-06). The same dy either way, so the same sums.
__attribute__((target_clones("avx512f", "avx2", "default")))
void add_sample_grad_sums(const float* grad, const float* x, const float* fused, std::int64_t length,
                          const float* mean, float* gated, double* dy_sums, double* centered_sums) {
  const float* g = gated_row(grad, x, {.output = fused}, 0, length, gated);
  for (std::int64_t i = 0; i < length; ++i) {
    dy_sums[i] += static_cast<double>(g[i]);
    centered_sums[i] += static_cast<double>(g[i] * (x[i] - mean[i]));
  }
}

void small_plane_grad_sums(const float* grad, const float* x, const float* fused, const BatchNormShape& shape,
                           const float* mean, const float* invstd, float* sum_dy, float* sum_dy_xhat) {
  const std::int64_t length = shape.channels * shape.spatial;
  const std::vector<float> means = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return mean[c]; });
  std::vector<double> dy(static_cast<std::size_t>(sample_groups(shape) * length)), centered(dy.size());
  for_sample_groups(shape, [&](std::int64_t group, std::int64_t first, std::int64_t end) {
    std::vector<float> gated(fused ? static_cast<std::size_t>(length) : 0);  // this group's gated sample
    for (std::int64_t n = first; n < end; ++n) {
      const std::int64_t at = n * length;
      add_sample_grad_sums(grad + at, x + at, fused ? fused + at : nullptr, length, means.data(), gated.data(),
                           &dy[group * length], &centered[group * length]);
    }
  });
  for (std::int64_t c = 0; c < shape.channels; ++c) {
    sum_dy[c] = static_cast<float>(channel_total(dy, shape, c));
    sum_dy_xhat[c] = static_cast<float>(channel_total(centered, shape, c) * static_cast<double>(invstd[c]));
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void grad_input_sample(const float* g, const float* x, const float* fused, std::int64_t length, const float* mean,
                       const float* invstd, const float* scale, const float* mean_dy, const float* mean_dy_xhat,
                       float* out) {
  auto coefficients = [&](std::int64_t i) {
    return batch_norm::ChannelBackward<float>{mean[i], invstd[i], scale[i], mean_dy[i], mean_dy_xhat[i]};
  };
  if (fused) {
    for (std::int64_t i = 0; i < length; ++i)
      out[i] = batch_norm::grad_input(batch_norm::incoming_grad<float>(g, fused, i), x[i], coefficients(i));
    return;
  }
  for (std::int64_t i = 0; i < length; ++i) out[i] = batch_norm::grad_input(g[i], x[i], coefficients(i));
}

void small_plane_grad_input(const float* grad, const float* x, const float* fused, const BatchNormShape& shape,
                            const float* mean, const float* invstd, const float* weight, const float* sum_dy,
                            const float* sum_dy_xhat, bool training, float* grad_input) {
  const std::int64_t length = shape.channels * shape.spatial;
  const std::int64_t C = shape.channels, S = shape.spatial;
  std::vector<batch_norm::ChannelBackward<float>> b;  // each channel's coefficients, computed once
  b.reserve(static_cast<std::size_t>(C));
  for (std::int64_t c = 0; c < C; ++c)
    b.push_back(batch_norm::channel_backward(mean, invstd, weight, sum_dy, sum_dy_xhat, training, shape.per_channel(), c));
  const std::vector<float> means = per_element(C, S, [&](std::size_t c) { return b[c].mean; });
  const std::vector<float> invstds = per_element(C, S, [&](std::size_t c) { return b[c].invstd; });
  const std::vector<float> scales = per_element(C, S, [&](std::size_t c) { return b[c].scale; });
  const std::vector<float> mean_dys = per_element(C, S, [&](std::size_t c) { return b[c].mean_dy; });
  const std::vector<float> mean_dy_xhats = per_element(C, S, [&](std::size_t c) { return b[c].mean_dy_xhat; });
  parallel_for(shape.batch, shape.batch * length, [&](std::int64_t n) {
    const std::int64_t at = n * length;
    grad_input_sample(grad + at, x + at, fused ? fused + at : nullptr, length, means.data(), invstds.data(),
                      scales.data(), mean_dys.data(), mean_dy_xhats.data(), grad_input + at);
  });
}

// The xhat path on small planes (Note [Normalising small planes]): the per-channel values laid out
// along a sample, a sample per loop; the sums grouped as small_plane_grad_sums's.
__attribute__((target_clones("avx512f", "avx2", "default")))
void xhat_sample(const float* x, std::int64_t length, const float* mean, const float* invstd, float* xhat) {
  for (std::int64_t i = 0; i < length; ++i) xhat[i] = batch_norm::xhat(x[i], mean[i], invstd[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void affine_sample(const float* xhat, std::int64_t length, const float* weight, const float* bias, bool relu6, float* y) {
  if (relu6)
    for (std::int64_t i = 0; i < length; ++i) y[i] = batch_norm::output_from_xhat(xhat[i], {weight[i], bias[i]}, true);
  else
    for (std::int64_t i = 0; i < length; ++i) y[i] = batch_norm::output_from_xhat(xhat[i], {weight[i], bias[i]}, false);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void add_sample_xhat_grad_sums(const float* g, const float* xhat, std::int64_t length, const float* weight,
                               const float* bias, bool relu6, double* dy_sums, double* xhat_sums) {
  for (std::int64_t i = 0; i < length; ++i) {
    const float dy = batch_norm::incoming_grad_from_xhat<float>(g, xhat, {weight[i], bias[i]}, relu6, i);
    dy_sums[i] += static_cast<double>(dy);
    xhat_sums[i] += static_cast<double>(dy * xhat[i]);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void xhat_grad_input_sample(const float* g, const float* xhat, std::int64_t length, const float* weight,
                            const float* bias, bool relu6, const float* scale, const float* mean_dy,
                            const float* mean_dy_xhat, float* out) {
  for (std::int64_t i = 0; i < length; ++i) {
    const float dy = batch_norm::incoming_grad_from_xhat<float>(g, xhat, {weight[i], bias[i]}, relu6, i);
    out[i] = batch_norm::grad_input_from_xhat(dy, xhat[i], {0.0f, 0.0f, scale[i], mean_dy[i], mean_dy_xhat[i]});
  }
}

// A sample's weight and bias laid out along it (1 and 0 when not affine).
struct SampleScaleShift {
  std::vector<float> weight, bias;
};

SampleScaleShift sample_scale_shift(const BatchNormShape& shape, const float* weight, const float* bias) {
  auto a = [&](std::int64_t c) { return batch_norm::channel_scale_shift(weight, bias, c); };
  return {per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return a(c).weight; }),
          per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return a(c).bias; })};
}

void small_plane_xhat(const float* x, const BatchNormShape& shape, const float* mean, const float* invstd,
                      const float* weight, const float* bias, bool relu6, float* xhat, float* y) {
  const std::int64_t length = shape.channels * shape.spatial;
  const SampleScaleShift a = sample_scale_shift(shape, weight, bias);
  const std::vector<float> means = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return mean[c]; });
  const std::vector<float> invstds = per_element(shape.channels, shape.spatial, [&](std::int64_t c) { return invstd[c]; });
  parallel_for(shape.batch, shape.batch * length, [&](std::int64_t n) {
    const std::int64_t at = n * length;
    xhat_sample(x + at, length, means.data(), invstds.data(), xhat + at);
    affine_sample(xhat + at, length, a.weight.data(), a.bias.data(), relu6, y + at);
  });
}

void small_plane_affine(const float* xhat, const BatchNormShape& shape, const float* weight, const float* bias,
                        bool relu6, float* y) {
  const std::int64_t length = shape.channels * shape.spatial;
  const SampleScaleShift a = sample_scale_shift(shape, weight, bias);
  parallel_for(shape.batch, shape.batch * length, [&](std::int64_t n) {
    affine_sample(xhat + n * length, length, a.weight.data(), a.bias.data(), relu6, y + n * length);
  });
}

void small_plane_xhat_backward(const float* grad, const float* xhat, const BatchNormShape& shape, const float* invstd,
                               const float* weight, const float* bias, bool relu6, bool training, float* sum_dy,
                               float* sum_dy_xhat, float* grad_input) {
  const std::int64_t length = shape.channels * shape.spatial, C = shape.channels, S = shape.spatial;
  const SampleScaleShift a = sample_scale_shift(shape, weight, bias);
  if (sum_dy) {
    std::vector<double> dy(static_cast<std::size_t>(sample_groups(shape) * length)), dy_xhat(dy.size());
    for_sample_groups(shape, [&](std::int64_t group, std::int64_t first, std::int64_t end) {
      for (std::int64_t n = first; n < end; ++n)
        add_sample_xhat_grad_sums(grad + n * length, xhat + n * length, length, a.weight.data(), a.bias.data(), relu6,
                                  &dy[group * length], &dy_xhat[group * length]);
    });
    for (std::int64_t c = 0; c < C; ++c) {
      sum_dy[c] = static_cast<float>(channel_total(dy, shape, c));
      sum_dy_xhat[c] = static_cast<float>(channel_total(dy_xhat, shape, c));
    }
  }
  auto b = [&](std::int64_t c) {
    return batch_norm::channel_backward<float>(nullptr, invstd, weight, sum_dy, sum_dy_xhat, training, shape.per_channel(), c);
  };
  const std::vector<float> scales = per_element(C, S, [&](std::int64_t c) { return b(c).scale; });
  const std::vector<float> mean_dys = per_element(C, S, [&](std::int64_t c) { return b(c).mean_dy; });
  const std::vector<float> mean_dy_xhats = per_element(C, S, [&](std::int64_t c) { return b(c).mean_dy_xhat; });
  parallel_for(shape.batch, shape.batch * length, [&](std::int64_t n) {
    const std::int64_t at = n * length;
    xhat_grad_input_sample(grad + at, xhat + at, length, a.weight.data(), a.bias.data(), relu6, scales.data(),
                           mean_dys.data(), mean_dy_xhats.data(), grad_input + at);
  });
}

}  // namespace

void batch_norm_statistics(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,
                           void* save_mean, void* save_invstd, void* running_mean, void* running_var) {
  if (dtype == DType::f32 && shape.spatial < kLanes)
    return small_plane_statistics(as_f32(x), shape, momentum, eps, as_f32(save_mean), as_f32(save_invstd),
                                  as_f32(running_mean), as_f32(running_var));
  if (!runs_fast(dtype, shape))
    return cpu::batch_norm_statistics(dtype, x, shape, momentum, eps, save_mean, save_invstd, running_mean, running_var);
  statistics_by_sample_groups(as_f32(x), shape, momentum, eps, as_f32(save_mean), as_f32(save_invstd),
                              as_f32(running_mean), as_f32(running_var));
}

void batch_norm_normalize(DType dtype, const void* x, const BatchNormShape& shape, const void* mean, const void* invstd,
                          const void* weight, const void* bias, bool relu6, void* y) {
  if (dtype == DType::f32 && shape.spatial < kLanes)
    return normalize_small_planes(as_f32(x), shape, as_f32(mean), as_f32(invstd), as_f32(weight), as_f32(bias), relu6,
                                  as_f32(y));
  if (!runs_fast(dtype, shape)) return cpu::batch_norm_normalize(dtype, x, shape, mean, invstd, weight, bias, relu6, y);
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    normalize_planes(as_f32(x), shape, begin, end, as_f32(mean), as_f32(invstd), as_f32(weight), as_f32(bias), relu6,
                     as_f32(y));
  });
}

void batch_norm_backward_sums(DType dtype, const void* grad, const void* x, const void* fused_output,
                              const BatchNormShape& shape, const void* mean, const void* invstd, void* sum_dy,
                              void* sum_dy_xhat) {
  if (dtype == DType::f32 && shape.spatial < kLanes)
    return small_plane_grad_sums(as_f32(grad), as_f32(x), as_f32(fused_output), shape, as_f32(mean), as_f32(invstd),
                                 as_f32(sum_dy), as_f32(sum_dy_xhat));
  if (!runs_fast(dtype, shape))
    return cpu::batch_norm_backward_sums(dtype, grad, x, fused_output, shape, mean, invstd, sum_dy, sum_dy_xhat);
  grad_sums_by_sample_groups(as_f32(grad), as_f32(x), as_f32(fused_output), false, shape, as_f32(mean),
                             as_f32(invstd), nullptr, nullptr, as_f32(sum_dy), as_f32(sum_dy_xhat));
}

void batch_norm_backward_input(DType dtype, const void* grad, const void* x, const void* fused_output,
                               const BatchNormShape& shape, const void* mean, const void* invstd, const void* weight,
                               const void* sum_dy, const void* sum_dy_xhat, bool training, void* grad_input) {
  if (dtype == DType::f32 && shape.spatial < kLanes)
    return small_plane_grad_input(as_f32(grad), as_f32(x), as_f32(fused_output), shape, as_f32(mean), as_f32(invstd),
                                  as_f32(weight), as_f32(sum_dy), as_f32(sum_dy_xhat), training, as_f32(grad_input));
  if (!runs_fast(dtype, shape))
    return cpu::batch_norm_backward_input(dtype, grad, x, fused_output, shape, mean, invstd, weight, sum_dy, sum_dy_xhat,
                                          training, grad_input);
  grad_input_by_plane_chunks(as_f32(grad), as_f32(x), as_f32(fused_output), false, shape, as_f32(mean), as_f32(invstd),
                             as_f32(weight), nullptr, as_f32(sum_dy), as_f32(sum_dy_xhat), training, as_f32(grad_input));
}

void batch_norm_train_forward(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,
                              const void* weight, const void* bias, bool relu6, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var, void* y) {
  batch_norm_statistics(dtype, x, shape, momentum, eps, save_mean, save_invstd, running_mean, running_var);
  batch_norm_normalize(dtype, x, shape, save_mean, save_invstd, weight, bias, relu6, y);
}

bool relu6_mask_from_input_pays(const BatchNormShape& shape) {
  return shape.batch * shape.channels * shape.spatial * static_cast<std::int64_t>(sizeof(float)) >= kMaskFromInputBytes;
}

void batch_norm_backward(DType dtype, const void* grad, const void* x, const void* fused_output,
                         const BatchNormShape& shape, const void* mean, const void* invstd, const void* weight,
                         const void* bias, bool mask_from_input, bool training, void* sum_dy, void* sum_dy_xhat,
                         void* grad_input) {
  if (!runs_fast(dtype, shape)) {
    if (sum_dy) batch_norm_backward_sums(dtype, grad, x, fused_output, shape, mean, invstd, sum_dy, sum_dy_xhat);
    return batch_norm_backward_input(dtype, grad, x, fused_output, shape, mean, invstd, weight, sum_dy, sum_dy_xhat,
                                     training, grad_input);
  }
  const bool recompute = fused_output && mask_from_input;  // Note [The ReLU6 mask from the input]
  if (sum_dy)
    grad_sums_by_sample_groups(as_f32(grad), as_f32(x), as_f32(fused_output), recompute, shape, as_f32(mean),
                               as_f32(invstd), as_f32(weight), as_f32(bias), as_f32(sum_dy), as_f32(sum_dy_xhat));
  grad_input_by_plane_chunks(as_f32(grad), as_f32(x), as_f32(fused_output), recompute, shape, as_f32(mean),
                             as_f32(invstd), as_f32(weight), as_f32(bias), as_f32(sum_dy), as_f32(sum_dy_xhat), training,
                             as_f32(grad_input));
}

void batch_norm_normalize_saving(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,
                                 const void* invstd, const void* weight, const void* bias, bool relu6, void* xhat,
                                 void* y) {
  if (dtype != DType::f32)
    return cpu::batch_norm_normalize_saving(dtype, x, shape, mean, invstd, weight, bias, relu6, xhat, y);
  if (shape.spatial < kLanes)
    return small_plane_xhat(as_f32(x), shape, as_f32(mean), as_f32(invstd), as_f32(weight), as_f32(bias), relu6,
                            as_f32(xhat), as_f32(y));
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    xhat_planes(as_f32(x), shape, begin, end, as_f32(mean), as_f32(invstd), as_f32(weight), as_f32(bias), relu6,
                as_f32(xhat), as_f32(y));
  });
}

void batch_norm_train_forward_saving(DType dtype, const void* x, const BatchNormShape& shape, double momentum,
                                     double eps, const void* weight, const void* bias, bool relu6, void* save_mean,
                                     void* save_invstd, void* running_mean, void* running_var, void* xhat, void* y) {
  if (dtype != DType::f32 || shape.spatial < kSweepMinPlane) {
    batch_norm_statistics(dtype, x, shape, momentum, eps, save_mean, save_invstd, running_mean, running_var);
    return batch_norm_normalize_saving(dtype, x, shape, save_mean, save_invstd, weight, bias, relu6, xhat, y);
  }
  parallel_for(shape.channels, 3 * shape.channels * shape.per_channel(), [&](std::int64_t c) {
    batch_norm::finish_statistics(channel_statistics(as_f32(x), shape, c), c, momentum, eps, as_f32(save_mean),
                                  as_f32(save_invstd), as_f32(running_mean), as_f32(running_var));
    xhat_channel(as_f32(x), shape, c, as_f32(save_mean)[c], as_f32(save_invstd)[c],
                 batch_norm::channel_scale_shift(as_f32(weight), as_f32(bias), c), relu6, as_f32(xhat), as_f32(y));
  });
}

void batch_norm_affine(DType dtype, const void* xhat, const BatchNormShape& shape, const void* weight, const void* bias,
                       bool relu6, void* y) {
  if (dtype != DType::f32) return cpu::batch_norm_affine(dtype, xhat, shape, weight, bias, relu6, y);
  if (shape.spatial < kLanes)
    return small_plane_affine(as_f32(xhat), shape, as_f32(weight), as_f32(bias), relu6, as_f32(y));
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    affine_planes(as_f32(xhat), shape, begin, end, as_f32(weight), as_f32(bias), relu6, as_f32(y));
  });
}

void batch_norm_backward_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                   const void* invstd, const void* weight, const void* bias, bool relu6, bool training,
                                   void* sum_dy, void* sum_dy_xhat, void* grad_input) {
  if (dtype != DType::f32) {
    if (sum_dy)
      cpu::batch_norm_backward_sums_from_xhat(dtype, grad, xhat, shape, weight, bias, relu6, sum_dy, sum_dy_xhat);
    return cpu::batch_norm_backward_input_from_xhat(dtype, grad, xhat, shape, invstd, weight, bias, relu6, sum_dy,
                                                    sum_dy_xhat, training, grad_input);
  }
  if (shape.spatial < kLanes)
    return small_plane_xhat_backward(as_f32(grad), as_f32(xhat), shape, as_f32(invstd), as_f32(weight), as_f32(bias),
                                     relu6, training, as_f32(sum_dy), as_f32(sum_dy_xhat), as_f32(grad_input));
  parallel_for(shape.channels, 2 * shape.channels * shape.per_channel(), [&](std::int64_t c) {
    const auto a = batch_norm::channel_scale_shift(as_f32(weight), as_f32(bias), c);
    if (sum_dy) xhat_channel_grad_sums(as_f32(grad), as_f32(xhat), shape, c, a, relu6, as_f32(sum_dy), as_f32(sum_dy_xhat));
    const auto b = batch_norm::channel_backward<float>(nullptr, as_f32(invstd), as_f32(weight), as_f32(sum_dy),
                                                       as_f32(sum_dy_xhat), training, shape.per_channel(), c);
    xhat_grad_input_channel(as_f32(grad), as_f32(xhat), shape, c, a, relu6, b, as_f32(grad_input));
  });
}

bool keeps_compact_xhat(DType dtype, const BatchNormShape& shape, bool mask) {
  return runs_fast(dtype, shape) && (!mask || shape.spatial % 8 == 0);
}

namespace {
// The loops over a mask read it a byte per 8 elements of a row and leave no tail (widen_piece, the
// in-lanes passes): a row of any other length would go unmasked or half-widened. The dispatcher
// asks keeps_compact_xhat first; this says so if it ever did not.
void check_mask_rows(const BatchNormShape& shape, const std::uint8_t* mask) {
  FRUGAL_CHECK(!mask || shape.spatial % 8 == 0, "batch norm's compact loops: a mask of bits needs planes of a "
               "multiple of 8 elements, got ", shape.spatial, " (keeps_compact_xhat says which shapes qualify)");
}
}  // namespace

void batch_norm_train_forward_compact(const float* x, const BatchNormShape& shape, double momentum, double eps,
                                      const float* weight, const float* bias, bool relu6, float* save_mean,
                                      float* save_invstd, float* running_mean, float* running_var, BFloat16* xhat,
                                      std::uint8_t* mask, float* y) {
  check_mask_rows(shape, mask);
  if (shape.spatial < kSweepMinPlane) {
    batch_norm_statistics(DType::f32, x, shape, momentum, eps, save_mean, save_invstd, running_mean, running_var);
    return batch_norm_normalize_compact(x, shape, save_mean, save_invstd, weight, bias, relu6, xhat, mask, y);
  }
  parallel_for(shape.channels, 3 * shape.channels * shape.per_channel(), [&](std::int64_t c) {
    batch_norm::finish_statistics(channel_statistics(x, shape, c), c, momentum, eps, save_mean, save_invstd,
                                  running_mean, running_var);
    compact_channel(x, shape, c, save_mean[c], save_invstd[c], batch_norm::channel_scale_shift(weight, bias, c), relu6,
                    xhat, mask, y);
  });
}

void batch_norm_normalize_compact(const float* x, const BatchNormShape& shape, const float* mean, const float* invstd,
                                  const float* weight, const float* bias, bool relu6, BFloat16* xhat,
                                  std::uint8_t* mask, float* y) {
  check_mask_rows(shape, mask);
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    compact_planes(x, shape, begin, end, mean, invstd, weight, bias, relu6, xhat, mask, y);
  });
}

void batch_norm_affine_compact(const BFloat16* xhat, const BatchNormShape& shape, const float* weight,
                               const float* bias, bool relu6, float* y) {
  for_plane_chunks(shape, [&](std::int64_t begin, std::int64_t end) {
    compact_affine_planes(xhat, shape, begin, end, weight, bias, relu6, y);
  });
}

void batch_norm_backward_from_compact_xhat(const float* grad, const BFloat16* xhat, const std::uint8_t* mask,
                                           const BatchNormShape& shape, const float* invstd, const float* weight,
                                           const float* bias, bool relu6, bool training, float* sum_dy,
                                           float* sum_dy_xhat, float* grad_input) {
  check_mask_rows(shape, mask);
  parallel_for(shape.channels, 2 * shape.channels * shape.per_channel(), [&](std::int64_t c) {
    if (!relu6 || mask)  // Note [Widening in registers]; a ReLU6 without bits recomputes its mask
      return channel_backward_in_lanes(grad, xhat, mask, shape, c, invstd, weight, training, sum_dy, sum_dy_xhat,
                                       grad_input);
    const auto a = batch_norm::channel_scale_shift(weight, bias, c);
    if (sum_dy) compact_channel_grad_sums_buffered(grad, xhat, shape, c, a, sum_dy, sum_dy_xhat);
    const auto b = batch_norm::channel_backward<float>(nullptr, invstd, weight, sum_dy, sum_dy_xhat, training,
                                                       shape.per_channel(), c);
    compact_grad_input_channel_buffered(grad, xhat, shape, c, a, b, grad_input);
  });
}

void batch_norm_backward_from_xhat_bits(const float* grad, const float* xhat, const std::uint8_t* mask,
                                        const BatchNormShape& shape, const float* invstd, const float* weight,
                                        bool training, float* sum_dy, float* sum_dy_xhat, float* grad_input) {
  FRUGAL_CHECK(mask && runs_fast(DType::f32, shape), "batch norm's gated backward: needs a mask of bits and planes "
               "of at least ", kLanes, " elements, got ", mask ? "a mask" : "no mask", " and ", shape.spatial);
  check_mask_rows(shape, mask);
  parallel_for(shape.channels, 2 * shape.channels * shape.per_channel(), [&](std::int64_t c) {
    channel_backward_in_lanes(grad, xhat, mask, shape, c, invstd, weight, training, sum_dy, sum_dy_xhat, grad_input);
  });
}

}  // namespace frugal::cpu::fast
