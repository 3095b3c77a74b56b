// MpiCommunicator: the Communicator of CPU ranks, one process per rank under mpirun, over MPI.
//
// Note [A worker thread per communicator]
// OpenMPI 4.1 has no progress thread for its point-to-point layer ("OMPI progress: no" in
// ompi_info): a nonblocking MPI_Iallreduce advances only while some thread is inside an MPI call, so
// a backward pass that computes between MPI_Test calls would not overlap with it. Each communicator
// therefore owns one worker thread that runs the queued collectives in order with blocking MPI calls
// (as PyTorch's ProcessGroupMPI does); the *_async calls queue and return at once, and the caller's
// thread computes meanwhile. Order is the order of the calls, the same on every rank.
//
// Note [Every collective is checked first]
// Before each collective the ranks exchange a descriptor (sequence number, collective, dtype,
// element count, root, op) with one small MPI_Allgather and compare. Every rank sees the same
// descriptors, so when they differ every rank fails the same collective with the same message
// ("all_reduce #17: rank 0 has 1024 f32 elements but rank 1 has 512") instead of running MPI with
// sizes that disagree (undefined behaviour, or a hang). A barrier is that exchange alone. It costs
// one small extra round trip per collective, which gradient buckets of megabytes amortise.
//
// Note [Watchdog and a broken communicator]
// wait() waits at most timeout(); past it, or when MPI returns an error (the communicator uses
// MPI_ERRORS_RETURN, so a failure MPI detects is an error code, not an abort inside MPI), the handle
// fails with a DistributedError naming the collective, and the communicator is broken: every
// collective queued behind it and every later one fails at once with that first error (a mismatch
// breaks it too, though MPI itself is left clean). Blocking MPI calls cannot be cancelled, so a
// stalled worker stays blocked: the destructor waits up to timeout() for the queue to drain, not at
// all after a stall, and then abandons the thread (detached) and the MPI communicator (never freed),
// so it never hangs. After an abandoned worker or an MPI error, mpi_runtime skips MPI_Finalize at
// exit (it would wait for the missing rank). main() reports the error and calls mpi_abort() to end
// every rank.
//
// Dtypes: f32, f64, i32, i64, u8 move and reduce as themselves; f16 and bf16 are widened to f32,
// reduced in f32 and rounded once (MPI has no 16-bit float sum); bool moves (broadcast, all_gather)
// but does not reduce. average is the sum divided by the world size, on every rank.
//
// Not here: GPU tensors (DeviceError: the NCCL communicator moves those); MPI's start and end
// (dist/mpi_runtime.h).
#pragma once

#include <memory>
#include <thread>

#include "dist/communicator.h"

namespace frugal::dist {

// A new MpiCommunicator over the world, as a Communicator: what the trainer and the benchmarks call,
// so that a build without MPI (FRUGAL_MPI=OFF, dist/mpi_absent.cpp) links and says why it cannot.
std::unique_ptr<Communicator> make_mpi_communicator();

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();  // initialises MPI when needed, duplicates MPI_COMM_WORLD; collective over the world
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "mpi"; }

  WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream stream = {}) override;
  WorkHandle broadcast_async(const Tensor& tensor, int root, Stream stream = {}) override;
  WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream = {}) override;
  WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream stream = {}) override;
  WorkHandle barrier_async() override;

  struct State;  // the queue, the worker and the first error, shared with the handles (mpi_communicator.cpp)

 private:
  int rank_ = 0;
  int world_size_ = 1;
  std::shared_ptr<State> state_;
  std::thread worker_;  // runs the queue (Note [A worker thread per communicator])
};

}  // namespace frugal::dist
