// Subcommand: what every `frugal` subcommand module (alloc-replay, pack, inspect, ...) is. Its
// constructor adds the subcommand and its options to the CLI11 app; main parses, then runs the one
// that was chosen.
// Not here: parsing or exit-code policy beyond the codes each run() documents.
#pragma once

namespace CLI {
class App;
}

namespace frugal::cli {

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
