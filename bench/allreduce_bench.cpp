// `frugal bench allreduce`: all-reduce bandwidth per message size, beside a local memcpy of the same
// message (how fast this machine moves the bytes without communicating), and DDP's overlap: the
// fraction of gradient communication hidden behind backward. Over MPI on CPU ranks; with --device
// cuda, over NCCL between the ranks' GPUs (one GPU per rank). Run it as `mpirun -np N frugal bench
// allreduce`: every rank measures, rank 0 alone reports. Run as one process it has nothing to
// communicate, says so in a note, and reports the memcpy rows alone (and, on a GPU, NCCL's one-rank
// all-reduce, a copy on the device).
#include "bench/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "core/cuda_status.h"
#include "core/random.h"
#include "dist/ddp.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"

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

// DDP's overlap: MobileNetV2 (width 0.5, 32x32 inputs) trains a few steps with gradient buckets of
// 1 MiB (several buckets, so the first ones' all-reduce can run while backward computes the rest;
// with the default 25 MiB its 6.7 MiB of gradients would be one bucket, started at backward's end).
constexpr std::size_t kOverlapBucketBytes = std::size_t{1} << 20;
constexpr std::int64_t kOverlapBatch = 16;
constexpr int kOverlapSteps = 4, kQuickOverlapSteps = 1;

std::vector<Result> ddp_overlap(dist::Communicator& comm, Device device, bool quick) {
  const std::string impl = std::string(comm.backend()) + " (" + std::to_string(comm.world_size()) + " ranks)";
  const auto model = models::make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width_mult = quick ? 0.25 : 0.5});
  model->to(device);
  model->train();
  dist::DistributedDataParallel ddp(*model, comm, {.bucket_cap_bytes = kOverlapBucketBytes,
                                                   .first_bucket_cap_bytes = kOverlapBucketBytes});
  const Tensor images = normal({quick ? 4 : kOverlapBatch, 1, 32, 32}, 0.0, 1.0, {.device = device});
  const Tensor labels = zeros({images.size(0)}, {.dtype = DType::i64, .device = device});
  const int steps = quick ? kQuickOverlapSteps : kOverlapSteps;
  double wait = 0.0, flight = 0.0, compute = 0.0;
  for (int step = 0; step <= steps; ++step) {
    const double wait_before = ddp.wait_seconds(), flight_before = ddp.communication_seconds();
    const auto start = std::chrono::steady_clock::now();
    autograd::backward(functional::cross_entropy((*model)(images), labels));
    ddp.synchronize();
    const double elapsed = seconds_since(start);
    for (const Tensor& p : model->parameters()) autograd::set_grad(p, Tensor());
    if (step == 0) continue;  // the warm-up: first touch of every buffer and connection
    wait += ddp.wait_seconds() - wait_before;
    flight += ddp.communication_seconds() - flight_before;
    compute += elapsed - (ddp.wait_seconds() - wait_before);
  }
  const double hidden = flight > 0 ? std::clamp(1.0 - wait / flight, 0.0, 1.0) : 0.0;
  const std::string name = "ddp mobilenet_v2 " + std::to_string(ddp.buckets().size()) + " buckets";
  return {{name + " overlap", impl, hidden, "fraction of communication hidden", true},
          {name + " communication", impl, flight / steps * 1e3, "ms per step in flight", false},
          {name + " wait", impl, wait / steps * 1e3, "ms per step waited", false},
          {name + " forward+backward", impl, compute / steps * 1e3, "ms per step", false}};
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

// Each all-reduce row followed by the memcpy row of its size, for the table's ratio.
std::vector<Result> beside_copies(const std::vector<Result>& rows, const std::vector<Result>& copies) {
  std::vector<Result> out;
  for (const Result& row : rows) {
    out.push_back(row);
    for (const Result& copy : copies)
      if (copy.case_name == row.case_name && row.case_name.ends_with("algbw")) out.push_back(copy);
  }
  return out;
}

Report allreduce_benchmark(const Options& options) {
  Report report;
  if (!dist::mpi_launched()) {
    report.notes.push_back("one process: one rank has nothing to communicate, so only a local memcpy of each message "
                           "size is measured; run `mpirun -np N frugal bench allreduce` (N >= 2) for MPI's all-reduce");
    report.results = memcpy_rows(options.quick);
    if (options.device.is_cuda()) {  // NCCL with one rank still runs its kernels: a copy on the device
      dist::LocalCommunicator alone;
      const std::unique_ptr<dist::Communicator> nccl = dist::make_nccl_communicator(alone, options.device.index());
      nccl->set_timeout(kBenchTimeout);
      for (const Result& row : all_reduce_bandwidth(*nccl, options.device, options.quick)) report.results.push_back(row);
    }
    return report;
  }
  const std::unique_ptr<dist::Communicator> mpi = dist::make_mpi_communicator();
  dist::Communicator& comm = *mpi;
  comm.set_timeout(kBenchTimeout);
  std::vector<Result> rows = all_reduce_bandwidth(comm, Device::cpu(), options.quick);
  for (const Result& row : ddp_overlap(comm, Device::cpu(), options.quick)) rows.push_back(row);
  if (options.device.is_cuda()) {  // one GPU per rank, NCCL between them, bootstrapped over MPI
    const Device gpu = Device::cuda(dist::device_for_local_rank(dist::mpi_local_rank(), cuda_status().device_count));
    const std::unique_ptr<dist::Communicator> nccl = dist::make_nccl_communicator(comm, gpu.index());
    nccl->set_timeout(kBenchTimeout);
    for (const Result& row : all_reduce_bandwidth(*nccl, gpu, options.quick)) rows.push_back(row);
    for (const Result& row : ddp_overlap(*nccl, gpu, options.quick)) rows.push_back(row);
  }
  comm.barrier();  // every rank copies at once, as they would beside each other in training
  report.results = beside_copies(rows, memcpy_rows(options.quick));
  report.this_rank_reports = comm.rank() == 0;
  return report;
}

}  // namespace frugal::bench
