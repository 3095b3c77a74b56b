// block_reduce: one accumulator per thread folded into the whole block's, for the one-block-per-output
// kernels of softmax.cu, loss.cu, batch_norm.cu and conv.cu (the depthwise weight gradient). Included by kernel sources only (it needs
// core/cuda/kernel_support.h), so it builds for the GPU and for the emulator alike.
//   1. each warp folds its 32 lanes with xor shuffles: after 5 steps every lane holds the warp's total;
//   2. lane 0 of each warp leaves that total in shared memory;
//   3. after a barrier every thread folds the few warp totals itself, so all threads get the block's
//      total without a second broadcast round.
// An accumulator is any trivially copyable struct with merge(); it crosses lanes as 64-bit words when
// its size allows (32-bit otherwise), so no accumulator needs a shuffle of its own.
// Not here: reductions over more than one block (reduce.cu loops outputs over blocks instead).
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/cuda/kernel_support.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

inline constexpr int kWarpLanes = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;

// The widest word an accumulator divides into. On a GPU a 64-bit shuffle is two 32-bit ones, the same
// instructions either way; in the kernel emulator every shuffle is one meeting of the warp's lanes, a
// fiber switch per lane, so 64-bit words halve the cost of accumulators of doubles there (Welford's
// three doubles: 3 meetings per step, not 6).
template <typename Acc>
using ShuffleWord = std::conditional_t<sizeof(Acc) % sizeof(unsigned long long) == 0, unsigned long long, unsigned>;

template <typename Acc>
__device__ Acc shuffle_xor(const Acc& acc, int lane_mask) {
  static_assert(std::is_trivially_copyable_v<Acc> && sizeof(Acc) % sizeof(unsigned) == 0);
  ShuffleWord<Acc> words[sizeof(Acc) / sizeof(ShuffleWord<Acc>)];
  memcpy(words, &acc, sizeof(Acc));
  for (auto& word : words) word = __shfl_xor_sync(kAllLanes, word, lane_mask);
  Acc result;
  memcpy(&result, words, sizeof(Acc));
  return result;
}

// Needs blockDim.x a multiple of 32 (every lane present for the shuffles) and `per_warp` (shared
// memory) room for blockDim.x / 32 accumulators; every thread of the block must call it.
template <typename Acc>
__device__ Acc block_reduce(Acc acc, SharedPtr<Acc> per_warp) {
  for (int lane_mask = kWarpLanes / 2; lane_mask > 0; lane_mask /= 2) acc.merge(shuffle_xor(acc, lane_mask));
  if (threadIdx.x % kWarpLanes == 0) per_warp[threadIdx.x / kWarpLanes] = acc;
  __syncthreads();
  Acc total = per_warp[0];
  for (unsigned w = 1; w < blockDim.x / kWarpLanes; ++w) total.merge(per_warp[w]);
  __syncthreads();  // the caller's next reduction reuses per_warp
  return total;
}

// Threads for a block that walks a row of `cols` elements: whole warps, as many as the row fills,
// at most `max_threads`. A 10-class row gets one warp; rows of 256 or more get 8 warps.
inline int threads_for_row(std::int64_t cols, int max_threads) {
  const std::int64_t warps = (cols + kWarpLanes - 1) / kWarpLanes;
  return static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(warps, 1) * kWarpLanes, max_threads));
}

// block_reduce's shared memory in a block of `threads`: one accumulator per warp.
template <typename Acc>
std::size_t block_reduce_shared_bytes(int threads) {
  return static_cast<std::size_t>(threads / kWarpLanes) * sizeof(Acc);
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
