// `frugal bench allreduce`: all-reduce bandwidth per message size over MPI on CPU ranks, beside a
// local memcpy of the same message (how fast this machine moves the bytes without communicating).
// Run it as `mpirun -np N frugal bench allreduce`: every rank measures, rank 0 alone reports. Run as
// one process it has nothing to communicate, says so in a note, and reports the memcpy rows alone.
// Not here: GPUs (MPI moves CPU tensors).
#include "bench/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"

namespace frugal::bench {

namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;
// From a latency-bound 4 KiB message to 64 MiB, the size of large gradient buckets and beyond the caches.
const std::vector<std::int64_t> kSizes = {4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB, 64 * kMiB};
const std::vector<std::int64_t> kQuickSizes = {4 * kKiB, 64 * kKiB};
// Repeats per size: enough bytes to time (about 256 MiB moved per size), at least 5 for a median,
// at most 200 so the small sizes stay quick. The same on every rank, as the collectives must be.
constexpr std::int64_t kBytesPerSize = 256 * kMiB;
constexpr int kMinRepeats = 5;
constexpr int kMaxRepeats = 200;
constexpr int kQuickRepeats = 3;
// Long enough for the largest all-reduce on a loaded machine; a dead rank fails the run in a minute.
constexpr std::chrono::seconds kBenchTimeout{60};

std::string size_name(std::int64_t bytes) {
  return bytes >= kMiB ? std::to_string(bytes / kMiB) + " MiB" : std::to_string(bytes / kKiB) + " KiB";
}

int repeats(std::int64_t bytes, bool quick) {
  if (quick) return kQuickRepeats;
  return static_cast<int>(std::clamp<std::int64_t>(kBytesPerSize / bytes, kMinRepeats, kMaxRepeats));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The slowest rank's time of each repeat (an all-reduce with max), then the median.
double slowest_median(dist::Communicator& comm, std::vector<double> times) {
  const Tensor all = from_vector(times);
  comm.all_reduce(all, dist::ReduceOp::max);
  return median(all.to_vector<double>());
}

std::vector<Result> memcpy_rows(bool quick) {
  std::vector<Result> rows;
  for (std::int64_t bytes : quick ? kQuickSizes : kSizes) {
    const std::vector<char> from(static_cast<std::size_t>(bytes), 1);
    std::vector<char> to(static_cast<std::size_t>(bytes));
    const double seconds = median_seconds([&] { std::memcpy(to.data(), from.data(), to.size()); }, [] {},
                                          repeats(bytes, quick), 0.0);
    rows.push_back({"all_reduce " + size_name(bytes) + " algbw", "memcpy (one local copy)",
                    static_cast<double>(bytes) / seconds / 1e9, "GB/s", true});
  }
  return rows;
}

}  // namespace

std::vector<Result> all_reduce_bandwidth(dist::Communicator& comm, Device device, bool quick) {
  const int n = comm.world_size();
  const std::string impl = std::string(comm.backend()) + " (" + std::to_string(n) + " ranks)";
  std::vector<Result> rows;
  for (std::int64_t bytes : quick ? kQuickSizes : kSizes) {
    const Tensor message = ones({bytes / static_cast<std::int64_t>(sizeof(float))}, {.device = device});
    comm.all_reduce(message, dist::ReduceOp::sum);  // warm-up: first touch, connections set up
    std::vector<double> times;
    for (int i = 0; i < repeats(bytes, quick); ++i) {
      comm.barrier();  // every rank starts together, so a time is the collective's, not a late rank's
      const auto start = std::chrono::steady_clock::now();
      comm.all_reduce(message, dist::ReduceOp::sum);
      times.push_back(seconds_since(start));
    }
    const double algbw = static_cast<double>(bytes) / slowest_median(comm, std::move(times)) / 1e9;
    const std::string name = "all_reduce " + size_name(bytes);
    rows.push_back({name + " algbw", impl, algbw, "GB/s", true});
    rows.push_back({name + " busbw", impl, algbw * 2.0 * (n - 1) / n, "GB/s", true});
  }
  return rows;
}

Report allreduce_benchmark(const Options& options) {
  Report report;
  if (!dist::mpi_launched()) {
    report.notes.push_back("one process: one rank has nothing to communicate, so only a local memcpy of each message "
                           "size is measured; run `mpirun -np N frugal bench allreduce` (N >= 2) for MPI's all-reduce");
    report.results = memcpy_rows(options.quick);
    return report;
  }
  if (!options.device.is_cpu())
    report.notes.push_back("MPI moves CPU tensors: measured on the CPU, not on " + options.device.str());
  dist::MpiCommunicator comm;
  comm.set_timeout(kBenchTimeout);
  const std::vector<Result> mpi = all_reduce_bandwidth(comm, Device::cpu(), options.quick);
  comm.barrier();  // every rank copies at once, as they would beside each other in training
  const std::vector<Result> copies = memcpy_rows(options.quick);
  for (const Result& row : mpi) {  // each size's memcpy row under its algbw row, for the table's ratio
    report.results.push_back(row);
    for (const Result& copy : copies)
      if (copy.case_name == row.case_name) report.results.push_back(copy);
  }
  report.this_rank_reports = comm.rank() == 0;
  return report;
}

}  // namespace frugal::bench
