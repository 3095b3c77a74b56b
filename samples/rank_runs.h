// Data-parallel runs for the samples that compare them (12, 20): a sample started alone runs itself
// again under mpirun (`mpirun -np N <this program> --rank-run MODE FOLDER`), every rank trains, and
// rank 0 writes what each rank measured into a folder the sample made; the sample then reads it
// back. Shared so that both samples launch, report and compare alike.
//   find_mpirun     mpirun from PATH, or "" (the sample then says what is missing and exits 0)
//   ResultFolder    a fresh temporary folder, removed with everything in it at the end
//   launch_ranks    runs the mpirun job and waits; an Error naming the mode when it fails
//   RunReport       the final loss and every rank's peaks, written by rank 0, read by the sample
//   max_difference  the largest difference between two checkpoints' models
//   rank_runs_main  main(): the lesson alone, one rank under mpirun, or a usage error
// Not here: what a sample trains or judges.
#pragma once

#include <spawn.h>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "dist/mpi_runtime.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

extern char** environ;

namespace frugal::samples {

namespace fs = std::filesystem;

inline std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  const std::string folders = path ? path : "";
  for (std::size_t start = 0; start <= folders.size();) {
    const std::size_t end = std::min(folders.find(':', start), folders.size());
    const fs::path candidate = fs::path(folders.substr(start, end - start)) / "mpirun";
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

class ResultFolder {
 public:
  explicit ResultFolder(const std::string& sample) {
    // mkdtemp's template: it replaces the six trailing X with characters that make the name new.
    std::string pattern = (fs::temp_directory_path() / ("frugal-" + sample + "-XXXXXX")).string();
    FRUGAL_CHECK(::mkdtemp(pattern.data()) != nullptr, sample, ": cannot create a folder in ",
                 fs::temp_directory_path().string(), ": ", std::strerror(errno));
    path_ = pattern;
  }
  ~ResultFolder() {
    std::error_code ignored;  // a folder left in /tmp is no reason to fail the lesson
    fs::remove_all(path_, ignored);
  }
  ResultFolder(const ResultFolder&) = delete;
  ResultFolder& operator=(const ResultFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs `mpirun -np ranks --oversubscribe <this program> --rank-run mode folder` and waits for it.
inline void launch_ranks(const std::string& sample, const std::string& mpirun, int ranks, const std::string& mode,
                         const fs::path& folder) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string np = std::to_string(ranks), dir = folder.string();
  std::vector<std::string> args = {mpirun, "-np", np, "--oversubscribe", self, "--rank-run", mode, dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // OpenMPI's mpirun refuses to start as root unless both variables say it is meant (containers and
  // CI run as root); they change nothing else, so they are added only for root.
  std::vector<std::string> variables;
  for (char** e = environ; *e != nullptr; ++e) variables.emplace_back(*e);
  if (::geteuid() == 0) {
    variables.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    variables.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  std::vector<char*> envp;
  for (std::string& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);

  std::fflush(stdout);  // what this process printed comes before what the ranks print
  pid_t pid = 0;
  const int failed = ::posix_spawn(&pid, mpirun.c_str(), nullptr, nullptr, argv.data(), envp.data());
  FRUGAL_CHECK(failed == 0, sample, ": cannot start ", mpirun, ": ", std::strerror(failed));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) FRUGAL_CHECK(errno == EINTR, sample, ": waitpid: ", std::strerror(errno));
  FRUGAL_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, sample, ": the ", mode, " run on ", ranks, " ranks failed (",
               WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : "killed by a signal", ")");
}

// What a run measured, one entry per rank (a single process is a world of one).
struct RunReport {
  double final_loss = 0.0;
  std::vector<train::RankReport> ranks;
};

// The one-process run's report: its own peaks, and no communication.
inline RunReport single_report(const train::TrainResult& result) {
  train::RankReport r;
  r.peak_allocated_bytes = result.peak_allocated_bytes;
  r.peak_reserved_bytes = result.peak_reserved_bytes;
  r.peak_bytes_by_tag = result.peak_bytes_by_tag;
  return {result.final_loss, {r}};
}

// Text, one line per rank: peaks and seconds, then the peak bytes of each MemoryTag in enum order.
inline void write_report(const fs::path& path, const RunReport& report) {
  std::ostringstream out;
  out.precision(17);
  out << report.final_loss << " " << report.ranks.size() << "\n";
  for (const train::RankReport& r : report.ranks) {
    out << r.rank << " " << r.peak_allocated_bytes << " " << r.communication_wait_seconds << " " << r.communication_seconds;
    for (std::size_t bytes : r.peak_bytes_by_tag) out << " " << bytes;
    out << "\n";
  }
  write_file_atomically(path.string(), out.str());  // core/mapped_file.h: the reader never sees half
}

inline RunReport read_report(const std::string& sample, const fs::path& path) {
  std::ifstream in(path);
  RunReport report;
  std::size_t ranks = 0;
  FRUGAL_CHECK(in >> report.final_loss >> ranks, sample, ": ", path.string(), " is missing or damaged");
  report.ranks.resize(ranks);
  for (train::RankReport& r : report.ranks) {
    in >> r.rank >> r.peak_allocated_bytes >> r.communication_wait_seconds >> r.communication_seconds;
    for (std::size_t& bytes : r.peak_bytes_by_tag) in >> bytes;
  }
  FRUGAL_CHECK(!in.fail(), sample, ": ", path.string(), " is damaged");
  return report;
}

inline std::size_t tag(const train::RankReport& r, MemoryTag t) { return r.peak_bytes_by_tag[static_cast<int>(t)]; }

// The largest absolute difference between the models of two checkpoints (same names and shapes).
inline double max_difference(const std::string& sample, const fs::path& a, const fs::path& b) {
  const nn::StateDict x = train::load_checkpoint(a.string()).model, y = train::load_checkpoint(b.string()).model;
  FRUGAL_CHECK(x.size() == y.size(), sample, ": ", a.string(), " and ", b.string(), " hold different models");
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::vector<double> u = x[i].second.to_vector<double>(), v = y[i].second.to_vector<double>();
    FRUGAL_CHECK(x[i].first == y[i].first && u.size() == v.size(), sample, ": ", x[i].first, " differs in name or size");
    for (std::size_t k = 0; k < u.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
  }
  return worst;
}

// The main() of a sample that runs itself under mpirun: with no arguments it runs `lesson` (an
// Error is printed, exit 1); started by mpirun as `--rank-run MODE FOLDER` it runs `rank_run`;
// anything else is a usage error (exit 2). `modes` names the modes in the usage line.
inline int rank_runs_main(int argc, char** argv, const char* sample, const char* modes,
                          const std::function<int(const std::string& mode, const fs::path& folder)>& rank_run,
                          const std::function<int()>& lesson) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] != "--rank-run" || args.size() != 3 || !dist::mpi_launched())) {
    std::fprintf(stderr, "%s: takes no arguments (--rank-run %s FOLDER is how it starts itself under mpirun)\n", sample,
                 modes);
    return 2;
  }
  if (!args.empty()) return rank_run(args[1], args[2]);
  try {
    return lesson();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace frugal::samples
