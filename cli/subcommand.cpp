// Subcommand (see subcommand.h).
#include "cli/subcommand.h"

#include <CLI/CLI.hpp>

namespace frugal::cli {

bool Subcommand::parsed() const { return command_->parsed(); }

}  // namespace frugal::cli
