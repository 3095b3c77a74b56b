// `frugal bench NAME`: runs one benchmark of bench/ and prints frugal beside its peers, as a table
// or as one JSON object (the schema is in bench/bench.h).
// Not here: the benchmarks themselves or their targets (bench/, docs/benchmarks.md).
#pragma once

#include <string>
#include <vector>

#include "cli/subcommand.h"

namespace frugal::cli {

class BenchCommand final : public Subcommand {
 public:
  explicit BenchCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 measured (or listed), 2 bad input: an unknown benchmark, a --device that is not
  // there, a --peer-python that is not a file or given to another benchmark, a --threads out of range (CLI11's parse error; one line "frugal bench: ..." on stderr).
  int run() const override;

 private:
  std::string name_, device_;
  std::vector<std::string> peer_pythons_;
  int threads_ = 0;  // 0: not given, frugal's current OpenMP thread count stands
  bool json_ = false, quick_ = false, list_ = false;
};

}  // namespace frugal::cli
