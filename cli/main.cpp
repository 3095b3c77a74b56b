// The `frugal` command: parses arguments and hands each subcommand to its module.
// Exit codes: 0 success, 1 a frugal error while running (message on stderr), 2 bad arguments.
// Every subcommand is a Subcommand module (cli/subcommand.h): main only parses, runs the one chosen
// and turns what escapes it into an exit code.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/alloc_replay.h"
#include "cli/bench.h"
#include "cli/eval.h"
#include "cli/plan.h"
#include "cli/info.h"
#include "cli/inspect.h"
#include "cli/pack.h"
#include "cli/run_step.h"
#include "cli/train.h"
#include "core/error.h"
#include "frugal/build_info.h"
#include "kernels/cpu_runtime.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  CLI::App app{"frugal: a deep-learning framework that shows where every byte of GPU memory goes", "frugal"};
  app.set_version_flag("--version", FRUGAL_VERSION_STRING);
  // At most one subcommand; "none" is reported after parsing, so that an unknown flag is named first.
  app.require_subcommand(0, 1);

  // Each module adds its subcommand and options to the app (which parses into the modules' members,
  // so they are not const); their order is the order of --help.
  frugal::cli::InfoCommand info(app);
  frugal::cli::TrainCommand train(app);
  frugal::cli::EvalCommand eval(app);
  frugal::cli::PlanCommand plan(app);
  frugal::cli::BenchCommand bench(app);
  frugal::cli::AllocReplayCommand alloc_replay(app);
  frugal::cli::PackCommand pack(app);
  frugal::cli::InspectCommand inspect(app);
  frugal::cli::RunStepCommand run_step(app);
  const frugal::cli::Subcommand* const modules[] = {&info, &train, &eval, &plan, &bench, &alloc_replay, &pack, &inspect, &run_step};

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "frugal: " << e.what() << " (see 'frugal --help')\n";
    return kExitUsage;
  }

  if (app.get_subcommands().empty()) {
    std::cerr << "frugal: name a subcommand: info, train, eval, plan, bench, alloc-replay, pack, inspect or run-step (see 'frugal --help')\n";
    return kExitUsage;
  }

  try {
    for (const frugal::cli::Subcommand* command : modules)
      if (command->parsed()) return command->run();
  } catch (const frugal::ValueError& e) {  // bad values that only the library could judge
    std::cerr << "frugal: " << e.message() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "frugal: error: " << e.what() << "\n";
    return kExitError;
  }
  return 0;
}
