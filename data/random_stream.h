// RandomStream: the random numbers of one sample in one epoch, a pure function of (seed, epoch,
// index). Random transforms and shuffling samplers draw from it, so what a sample becomes does not
// depend on which loader worker handled it or in what order: Philox (core/philox.h) is counter-based,
// and the counter is built from the three keys rather than from any shared generator state.
//
// Counter layout, on core's philox_block(seed, offset, block): offset = the sample's index; block =
// epoch in the high 32 bits, the stream's own block count in the low 32 (2^32 blocks of 4 words is
// more than any one sample draws). Samplers use the offset kSamplerStream, which no sample index
// reaches (indices are below 2^63), so a shuffle never shares numbers with a transform.
// Not here: random tensors (core/random.h), which draw whole tensors from a Generator.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/philox.h"

namespace frugal::data {

class RandomStream {
 public:
  static constexpr std::uint64_t kSamplerStream = ~std::uint64_t{0};

  RandomStream(std::uint64_t seed, std::int64_t epoch, std::uint64_t index)
      : seed_(seed), index_(index), epoch_bits_(static_cast<std::uint64_t>(epoch) << 32) {
    FRUGAL_CHECK_VALUE(epoch >= 0 && epoch < (std::int64_t{1} << 32), "RandomStream: epoch ", epoch,
                       " is outside [0, 2^32)");
  }

  std::uint32_t next_word() {
    if (used_ == 4) {
      words_ = philox_block(seed_, index_, epoch_bits_ | block_++);
      used_ = 0;
    }
    return words_.w[used_++];
  }
  double uniform() { return uniform_from_word(next_word()); }  // [0, 1) on the 2^-24 grid
  // An integer in [low, high); high - low in [1, 2^32].
  std::int64_t randint(std::int64_t low, std::int64_t high) {
    FRUGAL_CHECK_VALUE(high > low && high - low <= (std::int64_t{1} << 32), "RandomStream::randint: bad range [",
                       low, ", ", high, ")");
    return randint_from_word(next_word(), low, static_cast<std::uint64_t>(high - low));
  }

 private:
  std::uint64_t seed_, index_, epoch_bits_;
  std::uint32_t block_ = 0;
  PhiloxWords words_{};
  int used_ = 4;  // words of words_ already handed out; 4 = draw a new block first
};

}  // namespace frugal::data
