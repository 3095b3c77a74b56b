// MirrorCommunicator: a world of N ranks in which every other rank holds exactly what this one
// holds, simulated in one process. A sum is this rank's tensor times N, an average or a max is the
// tensor itself, a gather is N copies of it, rank 0's broadcast changes nothing.
// What it is for: the memory planner (train/planner.h) builds DistributedDataParallel over it on the
// meta device to see an N-rank run's buckets and ZeRO-1 shards from one process, without ranks; and
// tests use it for a world of N whose results are known. It is rank 0 and moves no bytes between
// processes, so it cannot train anything in parallel.
// Not here: real ranks (dist/mpi_communicator.h, dist/nccl_communicator.h).
#pragma once

#include "dist/communicator.h"

namespace frugal::dist {

class MirrorCommunicator final : public Communicator {
 public:
  explicit MirrorCommunicator(int world_size);  // ValueError unless >= 1
  int rank() const override { return 0; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "mirror"; }
  WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream stream = {}) override;
  WorkHandle broadcast_async(const Tensor& tensor, int root, Stream stream = {}) override;
  WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream = {}) override;
  WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream stream = {}) override;
  WorkHandle barrier_async() override { return std::make_shared<CompletedWork>(); }

 private:
  int world_size_;
};

}  // namespace frugal::dist
