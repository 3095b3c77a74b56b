// CPU activation codecs (kernels/activation_codec_backends.h), the reference the CUDA kernels are
// checked against. Each parallel_for iteration owns what it writes: a mask byte, a channel's range,
// an (n, c) plane of codes or values. The split follows the shapes alone, and a channel's range is
// min, max and a count, exact in any order, so every thread count gives the same bytes.
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/cpu/parallel.h"
#include "kernels/activation_codec_backends.h"
#include "kernels/cpu/octets.h"
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

// Note [Masks per instruction set]
// f32 masks, the bit masks' packing and gating in every step of a way that keeps them, a byte (8
// values, one octet) at a time in loops compiled for AVX-512 and AVX2 too. Built for baseline x86-64
// alone (pack_full_bytes, apply_mask_byte) they took 2.7% and 3.6% of a one-thread CIFAR-stem step
// with int8 and bit masks (perf). Functions of their own: clang does not compile target_clones
// templates. The same bytes and values (kernels/cpu/octets.h's mask_byte_of and load_gated).
__attribute__((target_clones("avx512f", "avx2", "default")))
void pack_f32_bytes(const float* x, OpenRange<float> range, std::uint8_t* mask, std::int64_t begin, std::int64_t end) {
  for (std::int64_t byte = begin; byte < end; ++byte) {
    Octet v;
    load(v, x + byte * kOctet);
    mask[byte] = mask_byte_of(v, range);
  }
}

// Full mask bytes [begin, end) of out = grad gated by the bits.
__attribute__((target_clones("avx512f", "avx2", "default")))
void apply_f32_bytes(const float* grad, const std::uint8_t* mask, std::int64_t begin, std::int64_t end, float* out) {
  for (std::int64_t byte = begin; byte < end; ++byte) {
    Octet g;
    load_gated(g, grad + byte * kOctet, mask + byte);
    std::memcpy(out + byte * kOctet, &g, sizeof g);
  }
}

// One (n, c) plane's range, in order: f16, bf16 and f64 planes.
template <typename C, typename T>
ChannelRange<C> plane_range(const T* x, std::int64_t count) {
  ChannelRange<C> range;
  for (std::int64_t i = 0; i < count; ++i) range.add(convert<C>(x[i]));
  return range;
}

// Note [Channel ranges in lanes]
// An f32 plane's range is ChannelRange::add's comparisons over two vectors of 8 lanes, lane l of
// vector k taking the elements 16j + 8k + l, merged at the end. GCC will not vectorise the scalar
// loop, since reordering `x < low ? x : low` could change which NaN or which signed zero comes out,
// and with one accumulator each step would wait for the last (a comparison's latency). Here a NaN
// is noted and marks the channel whatever low and high hold, and the min and max of the other
// values are exact in any order (up to the sign of a zero bound, which codes and decodes alike), so
// the codes are the scalar loop's; the lanes follow the plane alone, so every thread count gives the
// same bytes. 8 lanes, not 16: a 16-lane vector has no AVX2 register (kernels/cpu/octets.h).
// Measured (perf, one thread, 8 CIFAR-stem steps with int8 and bit masks): the scalar loop took
// 15.2% of the step.

__attribute__((target_clones("avx512f", "avx2", "default")))
ChannelRange<float> f32_plane_range(const float* x, std::int64_t count) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Octet low[2] = {Octet{} + kInf, Octet{} + kInf}, high[2] = {Octet{} - kInf, Octet{} - kInf};
  OctetWords seen_nan[2] = {};
  std::int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    for (int k = 0; k < 2; ++k) {
      Octet v;
      std::memcpy(&v, x + i + 8 * k, sizeof v);
      low[k] = v < low[k] ? v : low[k];
      high[k] = v > high[k] ? v : high[k];
      seen_nan[k] |= v != v;  // a true comparison is all ones
    }
  // Only whether a lane saw a NaN is kept (a count in 32-bit lanes could wrap on a plane of 2^35
  // elements): the NaN count that finish_channel reads is only ever compared with 0.
  ChannelRange<float> range;
  for (int k = 0; k < 2; ++k)
    for (int l = 0; l < 8; ++l) range.merge({low[k][l], high[k][l], seen_nan[k][l] != 0 ? 1 : 0});
  for (; i < count; ++i) range.add(x[i]);
  return range;
}

// One (n, c) plane's codes. A function with its operands as locals, like pack_full_bytes, so that
// the byte stores cannot alias low and step, and GCC vectorises the f32 loop.
template <typename C, typename T>
void encode_plane(const T* x, std::int64_t count, float low, float step, std::uint8_t* codes) {
  for (std::int64_t i = 0; i < count; ++i) codes[i] = encode_value(convert<C>(x[i]), low, step);
}

// Note [Codes per instruction set]
// The f32 planes' coding and decoding, the int8 way's two passes over every saved feature map,
// compiled for AVX-512 and AVX2 too: built for baseline x86-64 alone they ran in 4-float SSE
// vectors (perf, one thread, CIFAR-stem steps with int8 and bit masks: coding 5.9% of the step,
// decoding 3.3%). Functions of their own, not instances of the templates: clang does not compile
// target_clones templates. The same codes and values on every variant: the division is IEEE's
// everywhere, and decode_value's product is exact in double, so an FMA rounds its sum as an add does.
__attribute__((target_clones("avx512f", "avx2", "default")))
void encode_f32_plane(const float* x, std::int64_t count, float low, float step, std::uint8_t* codes) {
  for (std::int64_t i = 0; i < count; ++i) codes[i] = encode_value(x[i], low, step);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void decode_f32_plane(const std::uint8_t* codes, std::int64_t count, float low, float step, float* values) {
  for (std::int64_t i = 0; i < count; ++i) values[i] = decode_value<float>(codes[i], low, step);
}
}  // namespace

void pack_mask(DType dtype, const void* x, std::int64_t numel, double low, double high, std::uint8_t* mask) {
  visit_floating(dtype, "pack_mask_between", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    const OpenRange<C> range = open_range<C>(low, high);
    const std::int64_t full = numel / 8;
    parallel_for_chunks(full, kMaskBytesPerChunk, numel, [&](std::int64_t begin, std::int64_t end) {
      if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>)
        pack_f32_bytes(in, range, mask, begin, end);
      else
        pack_full_bytes(in, range, mask, begin, end);
    });
    if (full < packed_mask_bytes(numel)) mask[full] = pack_mask_byte(in, numel, range, full);
  });
}

void apply_mask(DType dtype, const void* grad, const std::uint8_t* mask, std::int64_t numel, void* out) {
  visit_floating(dtype, "apply_packed_mask", [&]<typename T, typename C>() {
    const T* g = static_cast<const T*>(grad);
    T* result = static_cast<T*>(out);
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t full = numel / 8;
      parallel_for_chunks(full, kMaskBytesPerChunk, numel,
                          [&](std::int64_t begin, std::int64_t end) { apply_f32_bytes(g, mask, begin, end, result); });
      if (full < packed_mask_bytes(numel)) apply_mask_byte(g, mask, result, numel, full);
    } else {
      parallel_for(packed_mask_bytes(numel), numel,
                   [&](std::int64_t byte) { apply_mask_byte(g, mask, result, numel, byte); });
    }
  });
}

// One channel per iteration, its N planes merged in order. Channels, not planes, so that no
// per-plane partial ranges need a buffer: a CNN layer's dozens of channels keep both cores busy.
void channel_ranges(DType dtype, const void* x, const BatchNormShape& shape, float* low, float* step) {
  visit_floating(dtype, "encode_per_channel_u8", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    parallel_for(shape.channels, shape.channels * shape.per_channel(), [&](std::int64_t c) {
      ChannelRange<C> range;
      for (std::int64_t n = 0; n < shape.batch; ++n) {
        const T* plane = in + shape.offset(n, c, 0);
        if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>)
          range.merge(f32_plane_range(plane, shape.spatial));
        else
          range.merge(plane_range<C>(plane, shape.spatial));
      }
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
      if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>)
        encode_f32_plane(in + first, shape.spatial, low[c], step[c], codes + first);
      else
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
      if constexpr (std::is_same_v<T, float>)
        decode_f32_plane(codes + first, shape.spatial, low[c], step[c], values + first);
      else
        for (std::int64_t i = first; i < first + shape.spatial; ++i) values[i] = decode_value<T>(codes[i], low[c], step[c]);
    });
  });
}

}  // namespace frugal::cpu
