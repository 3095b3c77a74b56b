// CUDA activation codecs (kernels/activation_codec_backends.h), the same names as the CPU kernels.
//   masks: grid-stride loops, one thread per mask byte (eight elements), so each thread owns the byte
//     it writes: no atomics (ActNN packs 32 bits per int32 with atomicOr instead).
//   channel_ranges: one block per channel; each thread folds a strided share of the channel's N * S
//     values into a ChannelRange, the block combines them (kernels/cuda/block_reduce.cuh), thread 0
//     writes the channel's low and step. Min, max and a count: the same result in any order.
//   encode / decode: a 2-D grid, blockIdx.y a channel, the x dimension striding over its values, so
//     each thread reads its channel's low and step once.
// The arithmetic is kernels/activation_codec_ops.h, the same as the CPU's, so codes and decoded
// values are the same bits. Built by nvcc and for the CUDA emulator (core/cuda/kernel_support.h).
#include <algorithm>

#include "core/cuda/kernel_support.h"
#include "kernels/activation_codec_backends.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
// One block per channel: as many loads in flight as a block allows, or only the warps a short
// channel's values fill (as batch_norm.cu's reductions).
constexpr int kRangeThreads = 1024;
constexpr int kChannelThreads = 256;                 // encode/decode: 8 warps per block, memory-bound
constexpr std::int64_t kMaxBlocksPerChannel = 64;    // with dozens of channels, thousands of blocks
constexpr std::int64_t kMaxChannelBlocks = 65535;    // CUDA's limit on gridDim.y; more channels loop

template <typename T, typename C>
__global__ void pack_mask_kernel(const T* x, std::int64_t numel, OpenRange<C> range, std::uint8_t* mask) {
  for (std::int64_t byte = grid_thread(); byte < packed_mask_bytes(numel); byte += grid_threads())
    mask[byte] = pack_mask_byte(x, numel, range, byte);
}

template <typename T>
__global__ void apply_mask_kernel(const T* grad, const std::uint8_t* mask, std::int64_t numel, T* out) {
  for (std::int64_t byte = grid_thread(); byte < packed_mask_bytes(numel); byte += grid_threads())
    apply_mask_byte(grad, mask, out, numel, byte);
}

template <typename T, typename C>
__global__ void channel_ranges_kernel(const T* x, BatchNormShape shape, float* low, float* step) {
  FRUGAL_DYNAMIC_SHARED(ChannelRange<C>, per_warp);
  for (std::int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    ChannelRange<C> range;
    for (ChannelWalk w(shape, threadIdx.x, blockDim.x); w.n < shape.batch; w.advance())
      range.add(convert<C>(x[shape.offset(w.n, c, w.s)]));
    range = block_reduce(range, per_warp);
    if (threadIdx.x == 0) finish_channel(range, c, low, step);
  }
}

template <typename T, typename C>
__global__ void encode_kernel(const T* x, BatchNormShape shape, const float* low, const float* step,
                              std::uint8_t* codes) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const float channel_low = low[c], channel_step = step[c];
    for (ChannelWalk w(shape, first, stride); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      codes[i] = encode_value(convert<C>(x[i]), channel_low, channel_step);
    }
  }
}

template <typename T>
__global__ void decode_kernel(const std::uint8_t* codes, BatchNormShape shape, const float* low, const float* step,
                              T* out) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const float channel_low = low[c], channel_step = step[c];
    for (ChannelWalk w(shape, first, stride); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      out[i] = decode_value<T>(codes[i], channel_low, channel_step);
    }
  }
}

int channel_blocks(const BatchNormShape& shape) { return static_cast<int>(std::min(shape.channels, kMaxChannelBlocks)); }

dim3 channel_grid(const BatchNormShape& shape) {
  const std::int64_t along = (shape.per_channel() + kChannelThreads - 1) / kChannelThreads;
  return dim3(static_cast<unsigned>(std::min(along, kMaxBlocksPerChannel)), static_cast<unsigned>(channel_blocks(shape)));
}
}  // namespace

void pack_mask(DType dtype, const void* x, std::int64_t numel, double low, double high, std::uint8_t* mask) {
  visit_floating(dtype, "pack_mask_between", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(packed_mask_bytes(numel)), kGridBlockThreads, 0, nullptr, pack_mask_kernel<T, C>)(
        static_cast<const T*>(x), numel, open_range<C>(low, high), mask);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void apply_mask(DType dtype, const void* grad, const std::uint8_t* mask, std::int64_t numel, void* out) {
  visit_floating(dtype, "apply_packed_mask", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(packed_mask_bytes(numel)), kGridBlockThreads, 0, nullptr, apply_mask_kernel<T>)(
        static_cast<const T*>(grad), mask, numel, static_cast<T*>(out));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void channel_ranges(DType dtype, const void* x, const BatchNormShape& shape, float* low, float* step) {
  visit_floating(dtype, "encode_per_channel_u8", [&]<typename T, typename C>() {
    const int threads = threads_for_row(shape.per_channel(), kRangeThreads);
    FRUGAL_LAUNCH(channel_blocks(shape), threads, block_reduce_shared_bytes<ChannelRange<C>>(threads), nullptr,
                  channel_ranges_kernel<T, C>)(static_cast<const T*>(x), shape, low, step);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void encode_channels(DType dtype, const void* x, const BatchNormShape& shape, const float* low, const float* step,
                     std::uint8_t* codes) {
  visit_floating(dtype, "encode_per_channel_u8", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(channel_grid(shape), kChannelThreads, 0, nullptr, encode_kernel<T, C>)(static_cast<const T*>(x), shape,
                                                                                       low, step, codes);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void decode_channels(DType dtype, const std::uint8_t* codes, const BatchNormShape& shape, const float* low,
                     const float* step, void* out) {
  visit_floating(dtype, "decode_per_channel_u8", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(channel_grid(shape), kChannelThreads, 0, nullptr, decode_kernel<T>)(codes, shape, low, step,
                                                                                       static_cast<T*>(out));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
