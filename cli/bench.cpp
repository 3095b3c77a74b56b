// BenchCommand (see bench.h): picks the benchmark and the device, runs it, prints the results.
#include "cli/bench.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "bench/bench.h"
#include "cli/info.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "dist/mpi_runtime.h"

namespace frugal::cli {

namespace {

constexpr int kExitUsage = 2;
// More threads than any machine frugal runs on has cores: a larger --threads is a typo, not a request.
constexpr int kMaxThreads = 1024;

void print_json(const std::string& name, const std::string& device, int threads, const bench::Report& report) {
  nlohmann::ordered_json out = {{"bench", name}, {"device", device}, {"threads", threads}};
  out["results"] = nlohmann::ordered_json::array();
  for (const auto& r : report.results)
    out["results"].push_back({{"case", r.case_name}, {"impl", r.impl}, {"value", r.value}, {"unit", r.unit},
                              {"higher_is_better", r.higher_is_better}});
  if (!report.notes.empty()) out["notes"] = report.notes;
  std::cout << out.dump() << "\n";
}

// Each row after a case's first also says how it compares with that first impl (frugal's own), when
// both are in the same unit.
void print_table(const std::string& name, const std::string& device, int threads,
                 const std::vector<bench::Result>& results) {
  std::cout << "benchmark " << name << " on " << device << ", " << threads << " CPU threads\n";
  std::size_t case_width = 0;
  for (const auto& r : results) case_width = std::max(case_width, r.case_name.size() + 2);
  std::map<std::string, const bench::Result*> first_of_case;
  for (const auto& r : results) {
    const bench::Result*& first = first_of_case[r.case_name];
    std::cout << "  " << std::left << std::setw(static_cast<int>(case_width)) << r.case_name << std::setw(24) << r.impl
              << std::right << std::setw(12) << std::fixed << std::setprecision(2) << r.value << " " << std::left
              << std::setw(8) << r.unit << std::right << (r.higher_is_better ? "" : " (lower is better)");
    if (first && first->value > 0 && first->unit == r.unit)
      std::cout << "  " << std::setprecision(2) << r.value / first->value << "x " << first->impl;
    else
      first = &r;
    std::cout << "\n";
  }
}

}  // namespace

BenchCommand::BenchCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("bench", "Run a benchmark: frugal and its peers measured in the same run")) {
  command_->add_option("name", name_, "Benchmark to run (frugal bench --list shows them)");
  command_->add_option("--device", device_, "cpu or cuda:N (default: cuda:0 when usable, else cpu)");
  command_->add_flag("--json", json_, "Print one JSON object: {bench, device, threads, results: [...], notes (when any)}");
  command_
      ->add_option("--threads", threads_, "CPU threads for frugal and for a peer process (default: the current count)")
      ->check(between(1, kMaxThreads));
  command_
      ->add_option("--peer-python", peer_pythons_,
                   "bench train: a Python whose torch is a peer (repeatable; default: scripts/peers.sh's "
                   "environment and /usr/bin/python3, those present)")
      ->check(CLI::ExistingFile);
  command_->add_flag("--quick", quick_, "Tiny sizes and few repeats: checks the harness, numbers mean nothing");
  command_->add_flag("--list", list_, "List the benchmarks");
}

int BenchCommand::run() const {
  const auto& benchmarks = bench::all_benchmarks();
  if (list_) {
    for (const auto& b : benchmarks) std::cout << b.name << ": " << b.description << "\n";
    return 0;
  }
  if (name_.empty()) {
    std::cerr << "frugal bench: name a benchmark (frugal bench --list shows them)\n";
    return kExitUsage;
  }
  const auto found = std::find_if(benchmarks.begin(), benchmarks.end(), [&](const auto& b) { return b.name == name_; });
  if (found == benchmarks.end()) {
    std::string known;
    for (const auto& b : benchmarks) known += (known.empty() ? "" : ", ") + b.name;
    std::cerr << "frugal bench: unknown benchmark '" << name_ << "' (known: " << known << ")\n";
    return kExitUsage;
  }
  if (!peer_pythons_.empty() && name_ != "train") {
    std::cerr << "frugal bench: --peer-python is for `frugal bench train` only\n";
    return kExitUsage;
  }
  bench::Options options;
  options.quick = quick_;
  options.peer_pythons = peer_pythons_;
  if (threads_ > 0) omp_set_num_threads(threads_);
  options.threads = cpu_threads();
  try {  // a device that is not there is bad input, said before anything runs
    options.device = device_.empty() ? (cuda_available() ? Device::cuda(0) : Device::cpu()) : Device::parse(device_);
    check_device_usable(options.device);
  } catch (const Error& e) {
    std::cerr << "frugal bench: --device " << device_ << ": " << e.message() << "\n";
    return kExitUsage;
  }
  bench::Report report;
  try {
    report = found->run(options);
  } catch (const Error& e) {
    // Under mpirun the other ranks may wait in a collective for this one: every rank ends now.
    const int code = report_error("bench " + name_, e);
    if (dist::mpi_launched()) dist::mpi_abort(code);
    return code;
  }
  if (!report.this_rank_reports) return 0;  // a rank of `mpirun frugal bench`: rank 0 reports
  for (const std::string& note : report.notes) std::cerr << "frugal bench " << name_ << ": " << note << "\n";
  std::string device = options.device.str();
  if (options.device.is_cuda()) device += " (" + cuda_device_info(options.device.index()).name + ")";
  if (json_)
    print_json(name_, device, options.threads, report);
  else
    print_table(name_, device, options.threads, report.results);
  return 0;
}

}  // namespace frugal::cli
