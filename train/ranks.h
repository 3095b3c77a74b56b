// How the ranks of a --ddp run (docs/distributed.md) keep together: the communicators (MPI between
// the ranks mpirun started, which also carries the run's small host-side agreements; NCCL over it
// for CUDA tensors), the check that every rank was started with the same flags, the step totals and
// stop decisions every rank must share, and the per-rank report gathered at the end.
// Without --ddp every function here is the one-process identity (no communicator: nothing to do).
// Not here: the gradient buckets (dist/ddp.h), the loop (train/trainer.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "train/options.h"
#include "train/step.h"
#include "train/trainer.h"

namespace frugal::train {

// The communicators of a --ddp run; both null without one. Gradients go through `gradients()`.
struct Communicators {
  std::unique_ptr<dist::Communicator> host, device;
  dist::Communicator& gradients() const { return device ? *device : *host; }
  bool distributed() const { return host != nullptr; }
  int rank() const { return host ? host->rank() : 0; }
  int world_size() const { return host ? host->world_size() : 1; }
};

// MPI initialised, its communicator made with --ddp-timeout, and NCCL's over it on a CUDA device.
// ValueError when mpirun started another number of ranks than the run was set up for.
Communicators open_communicators(const TrainOptions& options);

// What every rank of a --ddp run must share before its first step: the options that shape the step
// (run_identity_json), and those that decide when the ranks meet in a collective (stopping, saving
// ZeRO-1's consolidated state, the buckets).
std::string rank_agreement_json(const TrainOptions& options);

// Every rank compares `mine` (a JSON object keyed by flag names) with rank 0's before any collective
// that depends on it: a rank started with another --batch-size would otherwise train (its step
// silently another batch) or hang at the epoch's end. On a mismatch every rank throws the same
// RanksDisagreeError, naming the first rank that differs and the flag.
void check_ranks_agree(dist::Communicator& host, const std::string& mine);

// Every rank's step totals added (a 3-element host all-reduce), so each holds the whole run's loss,
// accuracy and sample count; `mine` unchanged without --ddp.
StepTotals all_ranks(const Communicators& comms, const StepTotals& mine);

// Whether `mine` holds on any rank (with --ddp, a 1-element all-reduce every rank must enter).
bool any_rank(const Communicators& comms, bool mine);

// This rank's peaks and communication times (from `ddp`), as every rank's (gathered over MPI); empty
// without --ddp.
std::vector<RankReport> rank_reports(const Communicators& comms, const dist::DistributedDataParallel* ddp,
                                     const TrainResult& result);

}  // namespace frugal::train
