// Sample 12: data parallelism. The same global batch trained by one process and by N ranks, each
// rank holding the whole model and computing on 1/N of every batch (dist/ddp.h):
//   1. The one-process baseline: train::train on a global batch of 64, a few AdamW steps.
//   2. The same run on N ranks under mpirun, plain DDP and then ZeRO-1: the sample starts itself as
//      `mpirun -np N <this program> --rank-run plain|zero1 <folder>`; every rank trains with
//      TrainOptions::ddp on a batch of 64 / N, and rank 0 writes every rank's measured peaks and
//      communication times, with a checkpoint of the final model, into the folder.
//   3. The comparison: activations per rank are about 1/N of the single process's, parameters and
//      gradients are replicated (every rank holds them whole), the optimizer state is replicated by
//      plain DDP and split N ways by ZeRO-1; how much of the gradient communication backward hid;
//      and whether all three runs end with the same parameters.
// The cnn (models/cnn.h): it has no BatchNorm, so N ranks compute exactly the gradient of one process
// on the whole batch and the parameters can be compared value for value (BatchNorm would normalise
// each rank's share by its own statistics, a different function). On the CPU by default, started
// alone; it needs Debian's dataset-fashion-mnist and OpenMPI's mpirun (it says so and exits 0 when
// either is missing).
// Checked (samples/checks.h; the sample exits 1 when one is false): each rank's activations about
// 1/N of one process's, the parameters replicated, the optimizer state replicated by plain DDP and
// about 1/N under ZeRO-1, and every run's final parameters within kTolerance of the one process's.
// Not here: the collectives (dist/), the training loop (train/trainer.h), `frugal train --ddp`.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda_status.h"
#include "core/error.h"
#include "data/idx.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"
#include "kernels/cpu_runtime.h"
#include "train/trainer.h"
#include "samples/checks.h"
#include "samples/rank_runs.h"

using namespace frugal;
namespace fs = std::filesystem;
using samples::RunReport;
using samples::tag;

constexpr const char* kSample = "12_data_parallel";

namespace {

constexpr std::int64_t kGlobalBatch = 64;  // samples per optimizer step, in every run
constexpr int kRanks = 2;                  // 2 cores here; --oversubscribe lets mpirun start more
constexpr std::int64_t kSteps = 8;         // enough steps for AdamW's state and several gradient averages
constexpr std::uint64_t kSeed = 12;
// The cnn's gradients are 0.36 MiB: under DDP's default 25 MiB cap they would make one bucket, sent
// only when backward has finished, so nothing could overlap. 64 KiB buckets make several (the
// largest weight, 288 KiB, gets one of its own), the first sent while backward still computes.
constexpr std::size_t kBucketCap = std::size_t{64} << 10;
// The ranks sum their shares of the batch, and the gradients are averaged, in another order than one
// process sums the whole batch: the gradients differ by float rounding. AdamW divides each step by
// the gradient's running size, so where a gradient is near zero its rounding can move the step by a
// fraction of the learning rate, and over many steps far more (docs/distributed.md: 6e-2 after 20
// steps at 1e-2; tests/train_check.sh's ddp_matches_single compares with SGD for that reason). At
// this lesson's lr of 2e-3 for 8 steps the runs agree to 1e-6; 1e-4 leaves room for another
// machine's rounding and still fails on gradients summed instead of averaged.
constexpr double kTolerance = 1e-4;
// How far a rank's share of a tag's bytes may be from the share it claims (1/kRanks or 1): the
// memory is the same on every run, but not every byte divides exactly (a ZeRO-1 chunk of a bucket
// padded to a multiple of the ranks, the allocator's rounding of each tensor).
constexpr double kShareSlack = 0.05;

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The run every process trains, differing only in how many ranks share each batch.
train::TrainOptions lesson_options(int ranks, Device device) {
  train::TrainOptions o;
  o.model = "cnn";
  o.steps = kSteps;
  o.batch_size = kGlobalBatch / ranks;  // per rank, as in PyTorch's DDP
  o.seed = kSeed;
  // The schedule spans the whole epoch (938 steps): its 1% warm-up would keep all 8 steps' learning
  // rate near zero, and runs that barely move would agree without proving much. A constant lr from
  // step 1 instead, a fifth of the default 1e-2: without warm-up, 1e-2 makes the first steps' loss
  // rise before it falls.
  o.warmup = 0.0;
  o.schedule = train::ScheduleKind::constant;
  o.lr = 2e-3;
  o.evaluate = false;
  o.leak_check = false;
  o.workers = 0;  // the ranks already share the 2 cores; loader threads would only contend
  o.bucket_cap_bytes = kBucketCap;
  o.device = device;
  return o;
}

// One GPU per rank when there are enough GPUs for all of them (cuda:local_rank, as `frugal train
// --ddp` does); otherwise every run stays on the CPU, the baseline too, so their memory compares.
// One GPU is not enough: NCCL refuses two ranks on the same device.
Device lesson_device(int local_rank) {
  const int gpus = cuda_status().device_count;
  if (!cuda_available() || gpus < kRanks) return Device::cpu();
  return Device::cuda(dist::device_for_local_rank(local_rank, gpus));
}

// ---- Under mpirun: one rank of a data-parallel run ----

// Every rank trains; rank 0 writes the report and (through TrainOptions::save) the final model.
int rank_run(const std::string& mode, const fs::path& folder) {
  int rank = -1;  // unknown until MPI has started
  try {
    FRUGAL_CHECK_VALUE(mode == "plain" || mode == "zero1", "--rank-run takes plain or zero1, got '", mode, "'");
    const int ranks = dist::mpi_world_size();
    rank = dist::mpi_rank();
    FRUGAL_CHECK_VALUE(kGlobalBatch % ranks == 0, "the global batch of ", kGlobalBatch, " does not split over ", ranks, " ranks");
    train::TrainOptions o = lesson_options(ranks, lesson_device(dist::mpi_local_rank()));
    o.ddp = true;
    o.ranks = ranks;
    o.zero = mode == "zero1" ? 1 : 0;
    o.save = (folder / (mode + ".safetensors")).string();
    const train::TrainResult result = train::train(o);
    if (result.root) samples::write_report(folder / (mode + ".txt"), {result.final_loss, result.per_rank});
    return 0;
  } catch (const Error& e) {
    // The other ranks may be waiting for this one in a collective: end them all.
    std::fprintf(stderr, "12_data_parallel rank %d: %s\n", rank, e.what());
    dist::mpi_abort(1);
  }
}

// ---- Started alone: the baseline, the two mpirun jobs, the comparison ----

void print_row(const std::string& label, const train::RankReport& r, bool communicates) {
  std::printf("   %-20s %8.2f %8.2f %8.2f %8.2f %8.2f", label.c_str(), mib(r.peak_allocated_bytes), mib(tag(r, MemoryTag::activation)),
              mib(tag(r, MemoryTag::param)), mib(tag(r, MemoryTag::grad)), mib(tag(r, MemoryTag::optimizer)));
  if (communicates)
    std::printf(" %8.3f %8.3f %7.0f%%\n", r.communication_wait_seconds, r.communication_seconds,
                100.0 * (1.0 - r.communication_wait_seconds / std::max(r.communication_seconds, 1e-12)));
  else
    std::printf(" %8s %8s %8s\n", "-", "-", "-");
}

void print_table(const RunReport& single, const RunReport& plain, const RunReport& zero1) {
  std::printf("3. Per process, MiB (peak during the run) and seconds of gradient communication\n");
  std::printf("   %-20s %8s %8s %8s %8s %8s %8s %8s %8s\n", "", "peak", "activ.", "param", "grad", "optim.", "wait", "inflight",
              "overlap");
  print_row("1 process, batch " + std::to_string(kGlobalBatch), single.ranks[0], false);
  for (const auto& [name, run] : {std::pair{"DDP", &plain}, std::pair{"ZeRO-1", &zero1}})
    for (const train::RankReport& r : run->ranks)
      print_row(std::string(name) + " rank " + std::to_string(r.rank) + ", " + std::to_string(kGlobalBatch / kRanks), r, true);
  std::printf("   wait: seconds a rank sat blocked for its gradients' collectives; in flight: seconds any collective\n"
              "   was under way. overlap = 1 - wait / in flight, the share of communication hidden behind backward,\n"
              "   which goes on computing earlier layers' gradients while later layers' buckets travel. Here the\n"
              "   ranks, MPI's threads and the other runs share the same CPU cores, so these seconds vary from run\n"
              "   to run; the memory does not.\n\n");
}

// One number per rank of `run`, value(rank's report), as "0.50 0.50".
template <class Value>
std::string per_rank(const RunReport& run, Value value) {
  std::string text;
  for (const train::RankReport& r : run.ranks) {
    char number[32];
    std::snprintf(number, sizeof number, "%s%.2f", text.empty() ? "" : " ", value(r));
    text += number;
  }
  return text;
}

void print_ratios(const RunReport& single, const RunReport& plain, const RunReport& zero1, samples::Checks& checks) {
  const train::RankReport& one = single.ranks[0];
  const auto ratio = [](std::size_t part, std::size_t whole) {
    return static_cast<double>(part) / static_cast<double>(std::max<std::size_t>(whole, 1));
  };
  std::printf("4. Each rank against the one process (rank 0, rank 1, ...; 1/%d = %.2f)\n", kRanks, 1.0 / kRanks);
  std::printf("   %-12s %-12s %s\n", "", "DDP", "ZeRO-1");
  const auto peak = [&](const train::RankReport& r) { return ratio(r.peak_allocated_bytes, one.peak_allocated_bytes); };
  std::printf("   %-12s %-12s %s\n", "peak", per_rank(plain, peak).c_str(), per_rank(zero1, peak).c_str());
  for (const MemoryTag t : {MemoryTag::activation, MemoryTag::param, MemoryTag::grad, MemoryTag::optimizer}) {
    const auto of_tag = [&](const train::RankReport& r) { return ratio(tag(r, t), tag(one, t)); };
    std::printf("   %-12s %-12s %s\n", std::string(memory_tag_name(t)).c_str(), per_rank(plain, of_tag).c_str(),
                per_rank(zero1, of_tag).c_str());
  }
  // What the lesson claims per tag and run: divided by the ranks, or replicated. grad is both at once.
  const double divided = 1.0 / kRanks, replicated = 1.0;
  const std::tuple<const char*, const RunReport*, MemoryTag, double> claims[] = {
      {"DDP", &plain, MemoryTag::activation, divided},   {"ZeRO-1", &zero1, MemoryTag::activation, divided},
      {"DDP", &plain, MemoryTag::param, replicated},     {"ZeRO-1", &zero1, MemoryTag::param, replicated},
      {"DDP", &plain, MemoryTag::optimizer, replicated}, {"ZeRO-1", &zero1, MemoryTag::optimizer, divided}};
  for (const auto& [name, run, t, share] : claims)
    for (const train::RankReport& r : run->ranks) {
      const std::string part = share == replicated ? "all" : "1/" + std::to_string(kRanks);
      checks.expect(std::abs(ratio(tag(r, t), tag(one, t)) - share) <= kShareSlack,
                    std::string(name) + " rank " + std::to_string(r.rank) + " holds " + part + " of one process's " +
                        std::string(memory_tag_name(t)) + " bytes");
    }
  // What backward holds beyond its per-sample part: the replicated gradients and DDP's buckets.
  const auto beyond = [&](const train::RankReport& r) { return mib(tag(r, MemoryTag::grad)) - mib(tag(one, MemoryTag::grad)) / kRanks; };
  std::printf("   grad beyond 1/%d of one process's, MiB: DDP %s, ZeRO-1 %s (the parameters' gradients: %.2f MiB)\n\n", kRanks,
              per_rank(plain, beyond).c_str(), per_rank(zero1, beyond).c_str(), mib(tag(one, MemoryTag::param)));
  std::printf("   activation: what the forward keeps for backward, one set per sample. Each rank computes on %lld\n"
              "     of the %lld samples, so it keeps about 1/%d of them: the memory data parallelism divides.\n"
              "   param: replicated. Every rank holds the whole model.\n"
              "   grad: everything backward allocates. Most of it is the gradient flowing back through the\n"
              "     activations, per sample like them, so it shrinks too; on top sit the parameters' gradients,\n"
              "     replicated, and DDP's buckets, a second copy of them that the collectives average\n"
              "     (--bucket-views makes each .grad a view into its bucket instead). ZeRO-1 also keeps the\n"
              "     averaged 1/%d of each bucket that the reduce-scatter gives its rank.\n"
              "   optimizer: AdamW's two moments per parameter. Plain DDP replicates them; ZeRO-1 keeps on each\n"
              "     rank only the moments of its 1/%d of the parameters, updates that part, then all-gathers the\n"
              "     parameters. It saves what grows with the model, not with the batch.\n\n",
              static_cast<long long>(kGlobalBatch / kRanks), static_cast<long long>(kGlobalBatch), kRanks, kRanks, kRanks);
}

// Whether plain DDP and ZeRO-1 ended where the one process did, within kTolerance.
void print_agreement(const fs::path& folder, const RunReport& single, const RunReport& plain, const RunReport& zero1,
                     samples::Checks& checks) {
  std::printf("5. Do the runs end with the same model? (largest |difference| of any parameter, tolerance %.0e)\n", kTolerance);
  for (const auto& [name, mode, run] : {std::tuple{"DDP", "plain", &plain}, std::tuple{"ZeRO-1", "zero1", &zero1}}) {
    const double difference = samples::max_difference(kSample, folder / (std::string(mode) + ".safetensors"), folder / "single.safetensors");
    std::printf("   %-7s vs 1 process: %.2e, mean training loss %.6f vs %.6f: %s\n", name, difference, run->final_loss, single.final_loss,
                difference <= kTolerance ? "the same model, to float rounding" : "DIFFERENT beyond float rounding");
    checks.expect(difference <= kTolerance, std::string(name) + " ends with one process's parameters, to float rounding");
  }
  std::printf("   Each step the %d ranks see the %lld samples one process sees (each takes one in %d of the shuffled\n"
              "   order), and the averaged gradient is that of the whole batch: the same step, summed in another order.\n",
              kRanks, static_cast<long long>(kGlobalBatch), kRanks);
}

int lesson() {
  std::printf("Sample 12: data parallelism, one process against %d ranks on the same batch of %lld\n\n", kRanks,
              static_cast<long long>(kGlobalBatch));
  if (!fs::exists(std::string(data::kFashionMnistFolder) + "/train-images-idx3-ubyte.gz")) {
    std::printf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): nothing to train on.\n");
    return 0;
  }
  const Device device = lesson_device(0);
  std::printf("The cnn (no BatchNorm) on Fashion-MNIST, AdamW, %lld steps, on %s%s\n\n", static_cast<long long>(kSteps),
              device.str().c_str(), device.is_cuda() ? " and one GPU per rank" : ": every rank on the CPU as well");
  const samples::ResultFolder folder(kSample);

  std::printf("1. One process, batch %lld\n", static_cast<long long>(kGlobalBatch));
  train::TrainOptions o = lesson_options(1, device);
  o.save = (folder.path() / "single.safetensors").string();
  const train::TrainResult result = train::train(o);
  const RunReport single = samples::single_report(result);
  std::printf("   %lld steps in %.1f s, mean training loss %.4f, %lld parameters\n\n", static_cast<long long>(result.steps),
              result.wall_seconds, result.final_loss, static_cast<long long>(result.parameters));

  if (!dist::mpi_built()) {
    std::printf("this build has no MPI (FRUGAL_MPI=OFF): the data-parallel runs need OpenMPI (libopenmpi-dev).\n");
    return 0;
  }
  const std::string mpirun = samples::find_mpirun();
  if (mpirun.empty()) {
    std::printf("mpirun is not on PATH (apt-get install openmpi-bin): the data-parallel runs need it.\n");
    return 0;
  }
  std::printf("2. %d ranks of batch %lld: %s -np %d --oversubscribe <this program> --rank-run plain|zero1 <folder>\n", kRanks,
              static_cast<long long>(kGlobalBatch / kRanks), mpirun.c_str(), kRanks);
  for (const char* mode : {"plain", "zero1"}) {
    const auto start = std::chrono::steady_clock::now();
    samples::launch_ranks(kSample, mpirun, kRanks, mode, folder.path());
    std::printf("   %-5s: %.1f s, MPI's start and end included\n", mode,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("\n");
  const RunReport plain = samples::read_report(kSample, folder.path() / "plain.txt");
  const RunReport zero1 = samples::read_report(kSample, folder.path() / "zero1.txt");
  print_table(single, plain, zero1);
  samples::Checks checks;
  print_ratios(single, plain, zero1, checks);
  print_agreement(folder.path(), single, plain, zero1, checks);
  return checks.exit_code("12_data_parallel");
}

}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  return samples::rank_runs_main(argc, argv, kSample, "plain|zero1", rank_run, lesson);
}
