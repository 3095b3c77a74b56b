// Subcommand (see subcommand.h).
#include "cli/subcommand.h"

#include <CLI/CLI.hpp>
#include <string>

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

bool Subcommand::parsed() const { return command_->parsed(); }

}  // namespace frugal::cli
