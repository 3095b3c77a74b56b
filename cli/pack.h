// `frugal pack`: reads a dataset (IDX files, CIFAR batches, an image folder) and writes its samples
// into one shard file (data/shard.h), the format training streams. The shard appears whole or not at
// all: an error or Ctrl-C part-way leaves nothing under --out.
// Not here: the formats themselves (data/), looking inside a file (cli/inspect.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cli/subcommand.h"

namespace frugal {
class Error;
namespace data {
class Dataset;
}
}  // namespace frugal

namespace frugal::cli {

// "32x28" -> {32, 28} (height, width); ValueError naming `option` unless both are positive integers.
std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& text, const char* option);

class PackCommand final : public Subcommand {
 public:
  explicit PackCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 packed, 2 bad input (one line "frugal pack: ..." on stderr, naming the file),
  // 128 + the signal when interrupted by SIGINT (130) or SIGTERM (143). Neither of the last two
  // leaves anything under --out.
  int run() const override;

 private:
  int write(const data::Dataset& dataset) const;  // 0, or 128 + the interrupting signal
  int report_bad_input(const Error& error) const;

  std::string from_, out_, images_, labels_, cache_dir_, size_, label_ = "fine";
  std::vector<std::string> inputs_;
};

}  // namespace frugal::cli
