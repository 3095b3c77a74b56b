// `frugal info`: what this build is and what it can run on.
#pragma once

#include <nlohmann/json.hpp>

namespace frugal::cli {

nlohmann::json collect_info();                  // every fact, as JSON
void print_info(const nlohmann::json& info);    // the same facts for people
int cpu_threads();                               // threads the CPU kernels use

}  // namespace frugal::cli
