// `frugal pack`: reads a dataset (IDX files, CIFAR batches, an image folder) and writes its samples
// into one shard file (data/shard.h), the format training streams. The shard appears whole or not at
// all: an error, a signal, even SIGKILL part-way leaves nothing under --out and no temporary file
// (core/mapped_file.h, Note [Temporary files that cannot outlive their writer]). --out may name a
// new file or replace a regular file that is not one of the inputs; anything else is refused first.
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

// "32x28" -> {32, 28} (height, width); ValueError naming `option` unless both are positive integers
// whose product is at most data::kMaxImagePixels (an image of 8192x8192).
std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& text, const char* option);

class PackCommand final : public Subcommand {
 public:
  explicit PackCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 packed; 1 the shard (or a decompressed copy) could not be written, e.g. a full
  // disk (one line naming that file); 2 bad input (one line "frugal pack: ..." on stderr, naming the
  // file); 128 + the signal when stopped by SIGHUP (129), SIGINT (130), SIGQUIT (131) or SIGTERM
  // (143). None but 0 leaves anything under --out.
  int run() const override;

 private:
  int write(const data::Dataset& dataset) const;  // 0, or 128 + the interrupting signal
  int report(const Error& error, int exit_code) const;

  std::string from_, out_, images_, labels_, cache_dir_, size_, label_ = "fine";
  std::vector<std::string> inputs_;
};

}  // namespace frugal::cli
