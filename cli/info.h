// `frugal info`: what this build is and what it can run on.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/subcommand.h"

namespace frugal::cli {

class InfoCommand final : public Subcommand {
 public:
  explicit InfoCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  int run() const override;             // always 0: every fact is gathered, reasons included

 private:
  bool json_ = false;
};

nlohmann::json collect_info();                  // every fact, as JSON
void print_info(const nlohmann::json& info);    // the same facts for people
int cpu_threads();                               // threads the CPU kernels use

}  // namespace frugal::cli
