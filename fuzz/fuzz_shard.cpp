// libFuzzer target: arbitrary bytes as a frugal shard (data/shard.h). Shard::parse, and reading
// every record's sample and label (as ShardDataset::get does from a file), must work or throw a
// frugal::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/shard.h"

using namespace frugal::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const Shard shard = Shard::parse({data, size}, "fuzz input");
    const ShardInfo& info = shard.info();
    if (shard.size() == 0) return 0;  // a header alone may claim samples larger than the input
    std::vector<std::uint8_t> sample(static_cast<std::size_t>(info.sample_bytes));  // <= size: one record fits
    for (std::int64_t i = 0; i < shard.size(); ++i) {  // size() * record_size <= size: parse checked it
      try {
        (void)shard.read(i, sample.data());
      } catch (const frugal::Error&) {
        // a label out of range: the next records are still checked
      }
    }
  } catch (const frugal::Error&) {
    // bad input, reported as it should be
  }
  return 0;
}
