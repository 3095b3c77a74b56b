// CPU dropout (kernels/dropout_backends.h): one parallel_for iteration per sixteen Philox blocks of
// four elements. In f32 on a CPU with AVX-512 the sixteen blocks run in vector lanes (Note [Philox
// in vector lanes]); every other dtype, CPU and the last blocks go one block at a time through
// dropout_block (kernels/dropout_ops.h), the readable reference the lanes are tested against bit
// for bit.
// Not here: the draw's seed and offset (kernels/dropout.cpp), the CUDA kernel.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/cpu/parallel.h"
#include "core/philox.h"
#include "kernels/cpu/philox_lanes.h"
#include "kernels/dropout_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

// Note [Philox in vector lanes]
// A Philox 4x32-10 block (core/philox.h) is ten rounds of two 32x32 -> 64-bit multiplies and a few
// xors, a dependent chain that GCC leaves scalar. In the classifier's dropout of a MobileNetV2
// training step ([64, 1280], forward and backward) that loop was 1.6% of the step on one thread, and
// these lanes 0.3% (perf, 2026-12-07; docs/benchmarks.md). Here sixteen consecutive blocks go
// through the rounds side by side, block first + j in lane j of four vectors (one per counter word):
// _mm512_mul_epu32 multiplies the even lanes' words into 64-bit products and, with the odd lanes
// shifted down, the odd ones; each product's halves are blended back into lanes. The keep test is
// bernoulli's, uniform_from_word(w) < a, done on integers: (w >> 8) * 2^-24 < a exactly when
// (w >> 8) < ceil(a * 2^24) (w >> 8 is a whole number, and a * 2^24 is exact in double;
// bernoulli_keep_threshold). Element 4 (first + j) + w is word w of lane j, so each 16-element slice
// of the output takes its mask bits from four lanes of each word's mask (interleave_masks).
namespace {

// The rounds below name Philox's four counter words, and the masks interleave four words of sixteen
// lanes into four 16-element slices of nibbles.
static_assert(kPhiloxWordsPerBlock == 4 && kPhiloxLanes == 16, "the lanes are written for Philox4x32 in AVX-512");

// The high and low 32 bits of each lane's a * multiplier. The zero-masked forms of the multiply and
// the shifts (every lane selected): GCC 12's plain _mm512_mul_epu32 and immediate shifts pass an
// undefined vector that -Wuninitialized reports.
struct Halves {
  __m512i high, low;
};
__attribute__((target("avx512f"))) inline Halves multiply_wide(__m512i a, std::uint32_t multiplier) {
  constexpr __mmask8 kAllQuads = 0xFF;      // eight 64-bit lanes
  constexpr __mmask16 kOddLanes = 0xAAAA;   // the high halves of the 64-bit lanes
  const __m512i m = _mm512_set1_epi32(static_cast<int>(multiplier));
  const __m512i even = _mm512_maskz_mul_epu32(kAllQuads, a, m);  // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_maskz_mul_epu32(kAllQuads, _mm512_maskz_srli_epi64(kAllQuads, a, 32), m);  // 1, 3, ...
  return {_mm512_mask_blend_epi32(kOddLanes, _mm512_maskz_srli_epi64(kAllQuads, even, 32), odd),
          _mm512_mask_blend_epi32(kOddLanes, even, _mm512_maskz_slli_epi64(kAllQuads, odd, 32))};
}

// philox_block(seed, offset, first + j).w[w] in lane j of words[w].
__attribute__((target("avx512f"))) inline void philox_lanes(std::uint64_t seed, std::uint64_t offset,
                                                            std::uint64_t first,
                                                            __m512i (&words)[kPhiloxWordsPerBlock]) {
  using namespace philox_detail;
  const __m512i low = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first)));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first >> 32)));
  __m512i c0 = _mm512_add_epi32(low, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 wrapped = _mm512_cmplt_epu32_mask(c0, low);  // the block's low word passed 2^32
  __m512i c1 = _mm512_mask_add_epi32(high, wrapped, high, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(offset)));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(offset >> 32)));
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < kRounds; ++r) {  // philox_detail::round, lane by lane
    if (r > 0) {
      k0 += kKeyBump0;
      k1 += kKeyBump1;
    }
    const Halves p0 = multiply_wide(c0, kMultiplier0), p1 = multiply_wide(c2, kMultiplier1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(p1.high, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = p1.low;
    c2 = _mm512_xor_si512(_mm512_xor_si512(p0.high, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = p0.low;
  }
  words[0] = c0;
  words[1] = c1;
  words[2] = c2;
  words[3] = c3;
}

// Bits 0-3 of n at bits 0, 4, 8 and 12.
inline std::uint32_t spread_nibble(std::uint32_t n) { return (n & 1u) | (n & 2u) << 3 | (n & 4u) << 6 | (n & 8u) << 9; }

// The mask of output slice q (elements 16 q .. 16 q + 15 of the sixteen blocks, blocks 4 q .. 4 q + 3):
// bit 4 i + w is lane 4 q + i of word w's mask.
inline __mmask16 interleave_masks(const __mmask16 (&kept)[kPhiloxWordsPerBlock], int q) {
  std::uint32_t mask = 0;
  for (int w = 0; w < kPhiloxWordsPerBlock; ++w)
    mask |= spread_nibble((static_cast<std::uint32_t>(kept[w]) >> (4 * q)) & 0xFu) << w;
  return static_cast<__mmask16>(mask);
}

// Elements 4 first .. 4 first + 63 of f32 dropout: the sixteen blocks' words, bernoulli's keep test,
// and kept ? in * scale : 0 (dropout_block's arithmetic in float, so its bits).
__attribute__((target("avx512f"))) void dropout_sixteen_blocks(const float* in, float* out, const DropoutSpec& spec,
                                                              std::uint32_t threshold, std::uint64_t first) {
  __m512i words[kPhiloxWordsPerBlock];
  philox_lanes(spec.keep.seed, spec.keep.offset, first, words);
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(threshold));
  __mmask16 kept[kPhiloxWordsPerBlock];
  constexpr __mmask16 kAllLanes = 0xFFFF;
  for (int w = 0; w < kPhiloxWordsPerBlock; ++w)
    kept[w] = _mm512_cmplt_epu32_mask(_mm512_maskz_srli_epi32(kAllLanes, words[w], kUniformShift), limit);
  const __m512 scale = _mm512_set1_ps(static_cast<float>(spec.scale));
  const std::int64_t base = kPhiloxWordsPerBlock * static_cast<std::int64_t>(first);
  for (int q = 0; q < kPhiloxWordsPerBlock; ++q) {  // 64 elements: four slices of sixteen
    const std::int64_t at = base + kPhiloxLanes * q;
    _mm512_storeu_ps(out + at, _mm512_maskz_mul_ps(interleave_masks(kept, q), _mm512_loadu_ps(in + at), scale));
  }
}

__attribute__((target("avx512f"))) void philox_sixteen_blocks_avx512(std::uint64_t seed, std::uint64_t offset,
                                                                    std::uint64_t first, PhiloxWordsInLanes& words) {
  __m512i lanes[kPhiloxWordsPerBlock];
  philox_lanes(seed, offset, first, lanes);
  for (int w = 0; w < kPhiloxWordsPerBlock; ++w) _mm512_storeu_si512(words[w], lanes[w]);
}

}  // namespace

std::uint32_t bernoulli_keep_threshold(double a) {
  const double t = std::ceil(a * kTwoPow24);
  if (!(t > 0.0)) return 0u;  // NaN too: uniform_from_word(w) < NaN keeps nothing
  return static_cast<std::uint32_t>(std::min(t, kTwoPow24));
}

bool philox_in_lanes() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return available;
}

void philox_sixteen_blocks(std::uint64_t seed, std::uint64_t offset, std::uint64_t first, PhiloxWordsInLanes& words) {
  if (philox_in_lanes()) return philox_sixteen_blocks_avx512(seed, offset, first, words);
  for (std::int64_t j = 0; j < kPhiloxLanes; ++j) {
    const PhiloxWords block = philox_block(seed, offset, first + static_cast<std::uint64_t>(j));
    for (int w = 0; w < kPhiloxWordsPerBlock; ++w) words[w][j] = block.w[w];
  }
}

void dropout_apply(DType dtype, const void* in, void* out, std::int64_t numel, const DropoutSpec& spec) {
  const std::int64_t blocks = philox_blocks_for(numel), groups = (blocks + kPhiloxLanes - 1) / kPhiloxLanes;
  visit_floating(dtype, "dropout", [&]<typename T, typename C>() {
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const bool lanes = spec.keep.distribution == Distribution::bernoulli && philox_in_lanes();  // for f32
    const std::uint32_t threshold = bernoulli_keep_threshold(spec.keep.a);
    parallel_for(groups, numel, [&](std::int64_t group) {
      const std::int64_t first = group * kPhiloxLanes, last = std::min(blocks, first + kPhiloxLanes);
      if constexpr (std::is_same_v<T, float>) {
        if (lanes && kPhiloxWordsPerBlock * (first + kPhiloxLanes) <= numel)  // sixteen whole blocks
          return dropout_sixteen_blocks(src, dst, spec, threshold, static_cast<std::uint64_t>(first));
      }
      for (std::int64_t block = first; block < last; ++block) dropout_block<T, C>(src, dst, numel, spec, block);
    });
  });
}

}  // namespace frugal::cpu
