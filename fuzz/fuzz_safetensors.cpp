// libFuzzer target: arbitrary bytes as a safetensors file (nn/safetensors.h). parse_safetensors must
// check the header and copy every tensor out, or throw a frugal::Error. A file it accepts is written
// again (encode_safetensors, which must not throw for it) and must read back the same: names, dtypes,
// shapes, bytes and metadata.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nn/safetensors.h"

using namespace frugal::nn;

namespace {
bool same_tensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name, x] = a.tensors[i];
    const auto& [other_name, y] = b.tensors[i];
    if (name != other_name || x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
    if (x.nbytes() > 0 && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  SafetensorsFile file;
  try {
    file = parse_safetensors({data, size}, "fuzz input");
  } catch (const frugal::Error&) {
    return 0;  // bad input, reported as it should be
  }
  const SafetensorsFile again = parse_safetensors(encode_safetensors(file.tensors, file.metadata), "written again");
  if (!same_tensors(file, again)) {
    std::fprintf(stderr, "fuzz_safetensors: a file read, written and read again changed\n");
    std::abort();
  }
  return 0;
}
