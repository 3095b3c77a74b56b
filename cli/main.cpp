// The `frugal` command: parses arguments and hands each subcommand to its module.
// Exit codes: 0 success, 1 a frugal error while running (message on stderr), 2 bad arguments.
// Later issues add subcommands (train, ...) here: a Subcommand module (cli/subcommand.h) each.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <iomanip>
#include <iostream>
#include <map>

#include "bench/bench.h"
#include "cli/alloc_replay.h"
#include "cli/info.h"
#include "cli/inspect.h"
#include "cli/pack.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "frugal/build_info.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

int run_bench(const std::string& name, const std::string& device_text, bool json, bool quick) {
  using namespace frugal;
  const auto& benchmarks = bench::all_benchmarks();
  auto found = std::find_if(benchmarks.begin(), benchmarks.end(), [&](const auto& b) { return b.name == name; });
  if (found == benchmarks.end()) {
    std::string known;
    for (const auto& b : benchmarks) known += (known.empty() ? "" : ", ") + b.name;
    std::cerr << "frugal bench: unknown benchmark '" << name << "' (known: " << known << ")\n";
    return kExitUsage;
  }
  bench::Options options;
  options.quick = quick;
  options.device = device_text.empty() ? (cuda_available() ? Device::cuda(0) : Device::cpu()) : Device::parse(device_text);
  const std::vector<bench::Result> results = found->run(options);
  std::string device = options.device.str();
  if (options.device.is_cuda()) device += " (" + cuda_device_info(options.device.index()).name + ")";
  if (json) {
    nlohmann::ordered_json report = {{"bench", name}, {"device", device}, {"threads", cli::cpu_threads()}};
    report["results"] = nlohmann::ordered_json::array();
    for (const auto& r : results)
      report["results"].push_back({{"case", r.case_name}, {"impl", r.impl}, {"value", r.value}, {"unit", r.unit},
                                   {"higher_is_better", r.higher_is_better}});
    std::cout << report.dump() << "\n";
    return 0;
  }
  std::cout << "benchmark " << name << " on " << device << ", " << cli::cpu_threads() << " CPU threads\n";
  // Each row after a case's first also says how it compares with that first impl (frugal's own),
  // when both are in the same unit.
  std::size_t case_width = 0;
  for (const auto& r : results) case_width = std::max(case_width, r.case_name.size() + 2);
  std::map<std::string, const bench::Result*> first_of_case;
  for (const auto& r : results) {
    const bench::Result*& first = first_of_case[r.case_name];
    std::cout << "  " << std::left << std::setw(static_cast<int>(case_width)) << r.case_name << std::setw(24) << r.impl << std::right
              << std::setw(12) << std::fixed << std::setprecision(2) << r.value << " " << std::left << std::setw(8)
              << r.unit << std::right << (r.higher_is_better ? "" : " (lower is better)");
    if (first && first->value > 0 && first->unit == r.unit)
      std::cout << "  " << std::setprecision(2) << r.value / first->value << "x " << first->impl;
    else
      first = &r;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"frugal: a deep-learning framework that shows where every byte of GPU memory goes", "frugal"};
  app.set_version_flag("--version", FRUGAL_VERSION_STRING);
  // At most one subcommand; "none" is reported after parsing, so that an unknown flag is named first.
  app.require_subcommand(0, 1);

  bool info_json = false;
  auto* info = app.add_subcommand("info", "Print version, build options, CUDA status, devices and library versions");
  info->add_flag("--json", info_json, "Print the same facts as one JSON object");

  std::string bench_name, bench_device;
  bool bench_json = false, bench_quick = false;
  auto* bench = app.add_subcommand("bench", "Run a benchmark: frugal and its peers measured in the same run");
  bench->add_option("name", bench_name, "Benchmark to run (frugal bench --list shows them)");
  bench->add_option("--device", bench_device, "cpu or cuda:N (default: cuda:0 when usable, else cpu)");
  bench->add_flag("--json", bench_json, "Print one JSON object: {bench, device, threads, results: [...]}");
  bench->add_flag("--quick", bench_quick, "Tiny sizes and few repeats: checks the harness, numbers mean nothing");
  bool bench_list = false;
  bench->add_flag("--list", bench_list, "List the benchmarks");

  frugal::cli::AllocReplayCommand alloc_replay(app);
  frugal::cli::PackCommand pack(app);
  frugal::cli::InspectCommand inspect(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "frugal: " << e.what() << " (see 'frugal --help')\n";
    return kExitUsage;
  }

  if (app.get_subcommands().empty()) {
    std::cerr << "frugal: name a subcommand: info, bench, alloc-replay, pack or inspect (see 'frugal --help')\n";
    return kExitUsage;
  }

  try {
    if (info->parsed()) {
      const nlohmann::json facts = frugal::cli::collect_info();
      if (info_json)
        std::cout << facts.dump(2) << "\n";
      else
        frugal::cli::print_info(facts);
      return 0;
    }
    if (bench->parsed()) {
      if (bench_list) {
        for (const auto& b : frugal::bench::all_benchmarks()) std::cout << b.name << ": " << b.description << "\n";
        return 0;
      }
      if (bench_name.empty()) {
        std::cerr << "frugal bench: name a benchmark (frugal bench --list shows them)\n";
        return kExitUsage;
      }
      return run_bench(bench_name, bench_device, bench_json, bench_quick);
    }
    const frugal::cli::Subcommand* modules[] = {&alloc_replay, &pack, &inspect};
    for (const frugal::cli::Subcommand* command : modules)
      if (command->parsed()) return command->run();
  } catch (const frugal::ValueError& e) {  // bad values that only the library could judge, e.g. --device cuda:x
    std::cerr << "frugal: " << e.message() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "frugal: error: " << e.what() << "\n";
    return kExitError;
  }
  return 0;
}
