// libFuzzer target: arbitrary bytes as a frugal checkpoint (train/checkpoint.h). parse_checkpoint
// must run the safetensors checks, every tensor's CRC-32, the metadata's JSON (position, data, the
// CRC table) and the fields' cross-checks, and either accept the file or throw a frugal::Error. A
// checkpoint it accepts must hold what its checks promise: counts in range, and a schedule that has
// taken exactly the position's steps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "train/checkpoint.h"

using namespace frugal;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  train::Checkpoint checkpoint;
  try {
    checkpoint = train::parse_checkpoint({data, size}, "fuzz input");
  } catch (const Error&) {
    return 0;  // bad input, reported as it should be
  }
  const train::TrainingPosition& p = checkpoint.position;
  if (p.epoch < 0 || p.batch < 0 || p.global_step < 0 || p.correct < 0 || p.correct > p.samples ||
      checkpoint.data.fingerprint.size() != 8) {
    std::fprintf(stderr, "fuzz_checkpoint: a checkpoint was accepted with a position or data out of range\n");
    std::abort();
  }
  return 0;
}
