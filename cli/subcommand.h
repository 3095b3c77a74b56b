// Subcommand: what every `frugal` subcommand module (alloc-replay, pack, inspect, ...) is. Its
// constructor adds the subcommand and its options to the CLI11 app; main parses, then runs the one
// that was chosen.
// Not here: parsing or exit-code policy beyond the codes each run() documents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/output_paths.h"

namespace frugal {
class Error;
}

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace frugal::cli {

// A CLI11 check that an integer option lies in [low, high]; its message is one short line,
// "--batch: must be between 1 and 65536, got 0", where CLI11's own ranges print a 300-digit double.
CLI::Validator between(std::int64_t low, std::int64_t high);
// A CLI11 check that an option's value is not "" (a path that names nothing).
CLI::Validator not_empty();

// Prints a frugal error that ended subcommand `command` as one line on stderr and returns the exit
// code: 2 for bad input ("frugal NAME: message": a ValueError, ShapeError, DTypeError, IndexError, or
// a FileError reading an input), 1 for a failure while running ("frugal NAME: error: message": a
// WriteError such as a full disk, a library error, anything else).
int report_error(const std::string& command, const Error& error);

// The files a run's data is read from (data/open_dataset.h DatasetSplits::sources) as the inputs an
// output may not replace (core/output_paths.h), each named by the flag that gave it: --test-data
// for those under `test_data`, --data for the rest.
std::vector<NamedPath> data_inputs(const std::vector<std::string>& sources, const std::string& test_data);

class Subcommand {
 public:
  virtual ~Subcommand() = default;
  Subcommand(const Subcommand&) = delete;
  Subcommand& operator=(const Subcommand&) = delete;

  bool parsed() const;           // this subcommand was chosen
  virtual int run() const = 0;  // the process's exit code

 protected:
  explicit Subcommand(CLI::App* command) : command_(command) {}

  CLI::App* command_;  // owned by the app
};

}  // namespace frugal::cli
