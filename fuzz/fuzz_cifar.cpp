// libFuzzer target: arbitrary bytes as a CIFAR-10 and as a CIFAR-100 batch (data/cifar.h).
// CifarBatch::parse, and every record's label and pixels, must work or throw a frugal::Error.
#include <cstddef>
#include <cstdint>

#include "data/cifar.h"

using namespace frugal::data;

namespace {
volatile std::uint32_t sink;  // the bytes read go here, so the reads cannot be optimised away
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (const CifarKind kind : {CifarKind::cifar10, CifarKind::cifar100_fine, CifarKind::cifar100_coarse}) {
    try {
      const CifarBatch batch = CifarBatch::parse({data, size}, "fuzz input", kind);
      for (std::int64_t i = 0; i < batch.size(); ++i) {
        const std::uint8_t* pixels = batch.pixels(i);
        std::uint32_t sum = 0;  // every pixel byte read: ASan checks each is in bounds
        for (std::size_t j = 0; j < kCifarPixelBytes; ++j) sum += pixels[j];
        sink = sum;
        try {
          (void)batch.label(i);
        } catch (const frugal::Error&) {
          // a label out of range: the next records are still checked
        }
      }
    } catch (const frugal::Error&) {
      // bad input, reported as it should be
    }
  }
  return 0;
}
