// libFuzzer target: arbitrary bytes as an IDX file (data/idx.h). IdxArray::parse, every element
// through at(), and for a 3-D u8 array every IdxDataset sample must work or throw a frugal::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/idx.h"

using namespace frugal::data;

namespace {
// A valid labels file of `count` zeros, to pair with fuzzed images.
std::vector<std::uint8_t> zero_labels(std::int64_t count) {
  const auto n = static_cast<std::uint32_t>(count);
  std::vector<std::uint8_t> bytes = {0, 0, 0x08, 1, std::uint8_t(n >> 24), std::uint8_t(n >> 16), std::uint8_t(n >> 8),
                                     std::uint8_t(n)};
  bytes.resize(bytes.size() + static_cast<std::size_t>(count), 0);
  return bytes;
}

volatile double sink;  // the values read go here, so the reads cannot be optimised away
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const IdxArray array = IdxArray::parse({data, size}, "fuzz input");
    double sum = 0;
    for (std::int64_t i = 0; i < array.numel(); ++i) sum += array.at(i);  // numel() <= size: parse checked it
    if (array.type() == IdxType::u8 && array.dims().size() == 3) {
      const std::vector<std::uint8_t> labels = zero_labels(array.dims()[0]);
      const IdxDataset dataset(array, IdxArray::parse(labels, "labels"));
      for (std::int64_t i = 0; i < dataset.size(); ++i) sum += static_cast<double>(dataset.get(i).input.numel());
    }
    sink = sum;
  } catch (const frugal::Error&) {
    // bad input, reported as it should be
  }
  return 0;
}
