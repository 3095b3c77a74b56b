// Subcommand (see subcommand.h).
#include "cli/subcommand.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"

namespace frugal::cli {

CLI::Validator between(std::int64_t low, std::int64_t high) {
  return CLI::Validator(
      [low, high](std::string& text) {
        std::int64_t value = 0;
        const bool parsed = CLI::detail::lexical_cast(text, value);
        if (parsed && value >= low && value <= high) return std::string();
        return "must be between " + std::to_string(low) + " and " + std::to_string(high) + ", got " + text;
      },
      "INT in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
}

CLI::Validator not_empty() {
  return CLI::Validator([](std::string& text) { return text.empty() ? std::string("must not be empty") : std::string(); },
                        "");
}

int report_error(const std::string& command, const Error& error) {
  constexpr int kExitError = 1, kExitUsage = 2;
  const bool bad_input = dynamic_cast<const WriteError*>(&error) == nullptr &&
                         (dynamic_cast<const ValueError*>(&error) || dynamic_cast<const ShapeError*>(&error) ||
                          dynamic_cast<const DTypeError*>(&error) || dynamic_cast<const IndexError*>(&error) ||
                          dynamic_cast<const FileError*>(&error));
  // One line, written at once: ranks under mpirun share a terminal or a log, and an error cut into
  // several writes can interleave with another rank's.
  std::string line = "frugal " + command + ": " + (bad_input ? "" : "error: ") + error.message();
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += '\n';
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size())).flush();
  return bad_input ? kExitUsage : kExitError;
}

std::vector<NamedPath> data_inputs(const std::vector<std::string>& sources, const std::string& test_data) {
  std::vector<NamedPath> inputs;
  for (const std::string& source : sources)
    inputs.push_back({!test_data.empty() && (source == test_data || source.starts_with(test_data + "/")) ? "--test-data"
                                                                                                       : "--data",
                      source});
  return inputs;
}

bool Subcommand::parsed() const { return command_->parsed(); }

}  // namespace frugal::cli
