// Communicator: the one interface data parallelism talks to, whatever carries the bytes. Here: the
// interface and LocalCommunicator, a world of one process; MPI (ranks on CPUs) and NCCL (GPUs)
// communicators behind the same interface are planned. Tensors in, tensors out, streams as opaque
// handles: no MPI or NCCL type appears in this header, so trainers and gradient buckets are written
// once and tested against LocalCommunicator.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace frugal::dist {

enum class ReduceOp : std::uint8_t { sum, average, max, min };
std::string_view reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;        // 0 .. world_size() - 1
  virtual int world_size() const = 0;
  virtual std::string_view backend() const = 0;  // "local", "mpi", "nccl"

  // In place, on every rank: `tensor` becomes the reduction of all ranks' tensors. The tensor must be
  // contiguous, with the same shape and dtype on every rank; `average` needs a floating dtype.
  // Device work is ordered on `stream`; host backends ignore it.
  virtual void all_reduce(const Tensor& tensor, ReduceOp op, Stream stream = {}) = 0;
  // In place, on every rank: `tensor` becomes rank `root`'s tensor.
  virtual void broadcast(const Tensor& tensor, int root, Stream stream = {}) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

 protected:
  // The argument checks every backend shares, so each reports bad input the same way.
  void check_all_reduce(const Tensor& tensor, ReduceOp op) const;
  void check_broadcast(const Tensor& tensor, int root) const;
};

// A world of one process: each collective's result is the rank's own tensor, after the same
// argument checks as every other backend. Used when training runs without data parallelism.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view backend() const override { return "local"; }
  void all_reduce(const Tensor& tensor, ReduceOp op, Stream stream = {}) override;
  void broadcast(const Tensor& tensor, int root, Stream stream = {}) override;
  void barrier() override {}
};

}  // namespace frugal::dist
