// `frugal inspect FILE`: what a data file holds. Reads a frugal shard, an IDX file (plain or .gz), a
// CIFAR-10/100 batch or an image folder; prints the format, record count, sample shape and dtype,
// the class histogram and the first samples, 1-channel images drawn as ASCII art. Of a safetensors
// file it lists each tensor's name, dtype, shape and bytes, the totals (tensors, elements, bytes,
// parameters) and the metadata, from the header alone. --json prints the same as one JSON object.
// Not here: the formats themselves (data/, nn/safetensors.h), converting between them (cli/pack.h).
#pragma once

#include <cstdint>
#include <string>

#include "cli/subcommand.h"

namespace frugal::cli {

class InspectCommand final : public Subcommand {
 public:
  explicit InspectCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 inspected; 1 a .gz file's decompressed copy could not be written (a full disk);
  // 2 bad input (one line "frugal inspect: ..." on stderr, naming the file).
  int run() const override;

 private:
  std::string file_, size_ = "32x32", cache_dir_;
  std::int64_t samples_ = 3;
  bool json_ = false;
};

}  // namespace frugal::cli
