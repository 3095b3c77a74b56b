// CPU activation codecs (kernels/activation_codec_backends.h), the reference the CUDA kernels are
// checked against. Each parallel_for iteration owns what it writes: a mask byte, a channel's range,
// an (n, c) plane of codes or values. The split follows the shapes alone, and a channel's range is
// min, max and a count, exact in any order, so every thread count gives the same bytes.
#include "core/cpu/parallel.h"
#include "kernels/activation_codec_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {
// Bytes per parallel_for iteration of pack_mask: 32768 elements, the work that pays for a thread
// (Note [Small loops run on the calling thread]).
constexpr std::int64_t kMaskBytesPerChunk = 4096;

// Full mask bytes [begin, end): a loop GCC vectorises for f32 (Note [Masks without branches]). A
// function, not a lambda, so that its operands are locals: a byte store may alias anything a
// lambda's captured references point to, which would have them reloaded every byte.
template <typename C, typename T>
void pack_full_bytes(const T* x, OpenRange<C> range, std::uint8_t* mask, std::int64_t begin, std::int64_t end) {
  for (std::int64_t byte = begin; byte < end; ++byte) mask[byte] = mask_bits(x + byte * 8, 8, range);
}

// One (n, c) plane's range, in order.
template <typename C, typename T>
ChannelRange<C> plane_range(const T* x, std::int64_t count) {
  ChannelRange<C> range;
  for (std::int64_t i = 0; i < count; ++i) range.add(convert<C>(x[i]));
  return range;
}

// One (n, c) plane's codes. A function with its operands as locals, like pack_full_bytes, so that
// the byte stores cannot alias low and step, and GCC vectorises the f32 loop.
template <typename C, typename T>
void encode_plane(const T* x, std::int64_t count, float low, float step, std::uint8_t* codes) {
  for (std::int64_t i = 0; i < count; ++i) codes[i] = encode_value(convert<C>(x[i]), low, step);
}
}  // namespace

void pack_mask(DType dtype, const void* x, std::int64_t numel, double low, double high, std::uint8_t* mask) {
  visit_floating(dtype, "pack_mask_between", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    const OpenRange<C> range = open_range<C>(low, high);
    const std::int64_t full = numel / 8;
    parallel_for_chunks(full, kMaskBytesPerChunk, numel,
                        [&](std::int64_t begin, std::int64_t end) { pack_full_bytes(in, range, mask, begin, end); });
    if (full < packed_mask_bytes(numel)) mask[full] = pack_mask_byte(in, numel, range, full);
  });
}

void apply_mask(DType dtype, const void* grad, const std::uint8_t* mask, std::int64_t numel, void* out) {
  visit_floating(dtype, "apply_packed_mask", [&]<typename T, typename C>() {
    const T* g = static_cast<const T*>(grad);
    T* result = static_cast<T*>(out);
    parallel_for(packed_mask_bytes(numel), numel,
                 [&](std::int64_t byte) { apply_mask_byte(g, mask, result, numel, byte); });
  });
}

// One channel per iteration, its N planes merged in order. Channels, not planes, so that no
// per-plane partial ranges need a buffer: a CNN layer's dozens of channels keep both cores busy.
void channel_ranges(DType dtype, const void* x, const BatchNormShape& shape, float* low, float* step) {
  visit_floating(dtype, "encode_per_channel_u8", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    parallel_for(shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t c) {
      ChannelRange<C> range;
      for (std::int64_t n = 0; n < shape.batch; ++n) range.merge(plane_range<C>(in + shape.offset(n, c, 0), shape.spatial));
      finish_channel(range, c, low, step);
    });
  });
}

void encode_channels(DType dtype, const void* x, const BatchNormShape& shape, const float* low, const float* step,
                     std::uint8_t* codes) {
  visit_floating(dtype, "encode_per_channel_u8", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t c = plane % shape.channels, first = plane * shape.spatial;
      encode_plane<C>(in + first, shape.spatial, low[c], step[c], codes + first);
    });
  });
}

void decode_channels(DType dtype, const std::uint8_t* codes, const BatchNormShape& shape, const float* low,
                     const float* step, void* out) {
  visit_floating(dtype, "decode_per_channel_u8", [&]<typename T, typename C>() {
    T* values = static_cast<T*>(out);
    parallel_for(shape.batch * shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t plane) {
      const std::int64_t c = plane % shape.channels, first = plane * shape.spatial;
      for (std::int64_t i = first; i < first + shape.spatial; ++i) values[i] = decode_value<T>(codes[i], low[c], step[c]);
    });
  });
}

}  // namespace frugal::cpu
