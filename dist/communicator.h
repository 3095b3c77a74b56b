// Communicator: the one interface data parallelism talks to, whatever carries the bytes. Here: the
// interface, its handles for collectives in flight, and LocalCommunicator, a world of one process.
// The MPI (ranks on CPUs, dist/mpi_communicator.h) and NCCL (GPUs, dist/nccl_communicator.h)
// communicators implement it. Tensors in, tensors out, streams as opaque handles: no MPI or NCCL type
// appears in this header, so trainers and gradient buckets are written once and tested against any
// backend.
//
// Every collective is asynchronous: the *_async form starts it and returns a Work handle; wait() on
// it before reading the result. The plain forms start and wait. Every rank must call the same
// collectives in the same order with the same sizes; a backend that finds otherwise, or whose
// collective does not complete within timeout(), fails the handle with a DistributedError naming
// the collective, so a dead or disagreeing rank never hangs the others silently.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace frugal::dist {

enum class ReduceOp : std::uint8_t { sum, average, max, min };
std::string_view reduce_op_name(ReduceOp op);

enum class CollectiveKind : std::uint8_t { all_reduce, broadcast, reduce_scatter, all_gather, barrier };
std::string_view collective_name(CollectiveKind kind);  // "all_reduce", ...

// What every rank must agree on for one collective, compared across ranks before it runs (a backend
// gathers every rank's descriptor, encoded as kDescriptorWords i64 words).
struct CollectiveDescriptor {
  std::int64_t sequence = 0;  // collectives this communicator started before this one
  CollectiveKind kind = CollectiveKind::barrier;
  DType dtype = DType::f32;
  std::int64_t count = 0;     // elements of the tensor (all_reduce, broadcast) or of the input
  int root = 0;               // broadcast only
  ReduceOp op = ReduceOp::sum;
};
inline constexpr int kDescriptorWords = 6;
std::array<std::int64_t, kDescriptorWords> encode(const CollectiveDescriptor& d);
CollectiveDescriptor decode(const std::int64_t* words);
// "all_reduce #17 of 1024 f32 (average)": how messages name a collective.
std::string describe(const CollectiveDescriptor& d);
// The first way the ranks' descriptors (in rank order) disagree, as "all_reduce #17: rank 0 has 1024
// f32 elements but rank 1 has 512"; "" when they agree.
std::string descriptor_mismatch(const std::vector<CollectiveDescriptor>& by_rank);

// A collective in flight. For host backends wait() returns when the result is in the tensors. For
// device backends wait() orders the stream given to the collective after it (the host does not
// block), so kernels queued there afterwards see the result; synchronize that stream to read it
// on the host.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool completed() = 0;  // without blocking: has it finished (or failed)?
  virtual void wait() = 0;       // DistributedError when it failed or timed out; then again on every call
};
using WorkHandle = std::shared_ptr<Work>;

// A Work already finished when it was made: what a world of one returns.
class CompletedWork final : public Work {
 public:
  bool completed() override { return true; }
  void wait() override {}
};

class Communicator {
 public:
  // How long a collective may take before the watchdog fails it. Long enough for a slow rank to
  // load its first batch or write a checkpoint while the others wait at the next collective.
  static constexpr std::chrono::seconds kDefaultTimeout{300};

  virtual ~Communicator() = default;
  virtual int rank() const = 0;        // 0 .. world_size() - 1
  virtual int world_size() const = 0;
  virtual std::string_view backend() const = 0;  // "local", "mpi", "nccl"

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout);  // ValueError unless > 0

  // In place: `tensor` becomes the reduction of all ranks' tensors (average: the sum over the world
  // size). Same shape and dtype on every rank; `average` needs a floating dtype.
  virtual WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream stream = {}) = 0;
  // In place: `tensor` becomes rank `root`'s tensor.
  virtual WorkHandle broadcast_async(const Tensor& tensor, int root, Stream stream = {}) = 0;
  // `input` holds world_size() equal chunks; `output` (one chunk's numel, same dtype) becomes the
  // reduction over ranks of chunk rank() of everyone's input.
  virtual WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream = {}) = 0;
  // `output` (world_size() times input's numel, same dtype) becomes every rank's input, in rank order.
  virtual WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream stream = {}) = 0;
  // Completes once every rank has started it.
  virtual WorkHandle barrier_async() = 0;

  void all_reduce(const Tensor& tensor, ReduceOp op, Stream stream = {}) { all_reduce_async(tensor, op, stream)->wait(); }
  void broadcast(const Tensor& tensor, int root, Stream stream = {}) { broadcast_async(tensor, root, stream)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream = {}) {
    reduce_scatter_async(input, output, op, stream)->wait();
  }
  void all_gather(const Tensor& input, const Tensor& output, Stream stream = {}) {
    all_gather_async(input, output, stream)->wait();
  }
  void barrier() { barrier_async()->wait(); }

 protected:
  // The argument checks every backend shares, so each reports bad input the same way (ValueError,
  // DTypeError, ShapeError, IndexError), before anything is sent.
  void check_all_reduce(const Tensor& tensor, ReduceOp op) const;
  void check_broadcast(const Tensor& tensor, int root) const;
  void check_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) const;
  void check_all_gather(const Tensor& input, const Tensor& output) const;

 private:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// A world of one process: each collective's result is the rank's own data, after the same argument
// checks as every other backend. Used when training runs without data parallelism.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend() const override { return "local"; }
  WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream stream = {}) override;
  WorkHandle broadcast_async(const Tensor& tensor, int root, Stream stream = {}) override;
  WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream = {}) override;
  WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream stream = {}) override;
  WorkHandle barrier_async() override { return std::make_shared<CompletedWork>(); }
};

}  // namespace frugal::dist
