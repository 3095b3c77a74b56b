// The NCCL communicator (see nccl_communicator.h). Compiled only with CUDA. Not yet run on a GPU with
// more than one rank; the GPU suite runs it with one.
//
// One collective: check the arguments; gather every rank's description over the bootstrap
// communicator and compare (a mismatch fails on every rank before anything is queued); record an
// event on the caller's stream and make the communication stream wait for it (so NCCL reads the
// tensor only after the kernels that wrote it); queue the NCCL call on the communication stream;
// record a `done` event there; tell the allocator the tensor is used on that stream (record_stream),
// so memory freed by the caller meanwhile is not handed out before NCCL is done with it.
// wait() is the watchdog: it polls `done` and NCCL's asynchronous error until the timeout, aborts
// the NCCL communicator on failure (which ends the kernels stuck waiting for a dead peer) and throws
// DistributedError naming the collective; on success it orders the caller's stream after `done`.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "core/stream.h"
#include "dist/nccl_check.h"
#include "dist/nccl_communicator.h"

namespace frugal::dist::cuda {

namespace {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: break;
  }
  FRUGAL_THROW(DTypeError, "the NCCL communicator has no ", dtype, " collectives");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::average: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  FRUGAL_THROW(ValueError, "unknown reduce op ", static_cast<int>(op));
}

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

// Polling interval of the watchdog: short next to a collective of a large bucket (milliseconds),
// long enough not to busy a CPU core.
constexpr auto kPollInterval = std::chrono::microseconds(50);

class NcclWork final : public Work {
 public:
  NcclWork(ncclComm_t comm, cudaEvent_t done, cudaStream_t caller, std::string name, std::chrono::milliseconds timeout,
           std::shared_ptr<std::string> broken)
      : comm_(comm), done_(done), caller_(caller), name_(std::move(name)), timeout_(timeout),
        broken_(std::move(broken)), started_(std::chrono::steady_clock::now()) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  bool completed() override { return !error_.empty() || cudaEventQuery(done_) == cudaSuccess; }

  void wait() override {
    while (error_.empty()) {
      const cudaError_t state = cudaEventQuery(done_);
      if (state == cudaSuccess) {
        FRUGAL_CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
        return;
      }
      if (state != cudaErrorNotReady) fail(detail::str("CUDA reports ", cudaGetErrorString(state)));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) fail(detail::str("NCCL reports ", ncclGetErrorString(async)));
      else if (std::chrono::steady_clock::now() - started_ > timeout_)
        fail(detail::str("did not complete within ", timeout_.count(), " ms: a rank died or the ranks called different "
                         "collectives"));
      else std::this_thread::sleep_for(kPollInterval);
    }
    FRUGAL_THROW(DistributedError, error_);
  }

 private:
  // Aborting ends NCCL's kernels on this device, so the stream the caller waits on drains; the
  // communicator is unusable afterwards and says why at its next collective.
  void fail(const std::string& why) {
    error_ = name_ + ": " + why;
    ncclCommAbort(comm_);
    *broken_ = error_;
  }

  ncclComm_t comm_;
  cudaEvent_t done_;
  cudaStream_t caller_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<std::string> broken_;
  std::chrono::steady_clock::time_point started_;
  std::string error_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device_index) : bootstrap_(bootstrap), device_index_(device_index) {
    frugal::cuda::set_current_device(device_index);
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) FRUGAL_NCCL_CHECK(ncclGetUniqueId(&id));
    const Tensor bytes = empty({static_cast<std::int64_t>(sizeof id)}, {.dtype = DType::u8});
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    bootstrap.broadcast(bytes, 0);  // rank 0's id reaches every rank through MPI
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    FRUGAL_NCCL_CHECK(ncclCommInitRank(&comm_, bootstrap.world_size(), id, bootstrap.rank()));
    stream_ = frugal::cuda::create_side_stream(device_index);
  }
  ~NcclCommunicator() override {
    if (broken_->empty()) ncclCommDestroy(comm_);  // an aborted communicator is already gone
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return bootstrap_.rank(); }
  int world_size() const override { return bootstrap_.world_size(); }
  std::string_view backend() const override { return "nccl"; }

  WorkHandle all_reduce_async(const Tensor& tensor, ReduceOp op, Stream stream) override {
    check_all_reduce(tensor, op);
    return run({.kind = CollectiveKind::all_reduce, .dtype = tensor.dtype(), .count = tensor.numel(), .op = op},
               {tensor}, stream, [&] {
                 return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor), nccl_dtype(tensor.dtype()),
                                      nccl_op(op), comm_, comm_stream());
               });
  }

  WorkHandle broadcast_async(const Tensor& tensor, int root, Stream stream) override {
    check_broadcast(tensor, root);
    return run({.kind = CollectiveKind::broadcast, .dtype = tensor.dtype(), .count = tensor.numel(), .root = root},
               {tensor}, stream, [&] {
                 return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count(tensor), nccl_dtype(tensor.dtype()),
                                      root, comm_, comm_stream());
               });
  }

  WorkHandle reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream stream) override {
    check_reduce_scatter(input, output, op);
    return run({.kind = CollectiveKind::reduce_scatter, .dtype = input.dtype(), .count = input.numel(), .op = op},
               {input, output}, stream, [&] {
                 return ncclReduceScatter(input.data_ptr(), output.data_ptr(), count(output),
                                          nccl_dtype(input.dtype()), nccl_op(op), comm_, comm_stream());
               });
  }

  WorkHandle all_gather_async(const Tensor& input, const Tensor& output, Stream stream) override {
    check_all_gather(input, output);
    return run({.kind = CollectiveKind::all_gather, .dtype = input.dtype(), .count = input.numel()}, {input, output},
               stream, [&] {
                 return ncclAllGather(input.data_ptr(), output.data_ptr(), count(input), nccl_dtype(input.dtype()),
                                      comm_, comm_stream());
               });
  }

  // NCCL has no barrier: the host-side barrier of the bootstrap communicator is one, once this
  // rank's queued collectives are done.
  WorkHandle barrier_async() override {
    throw_if_broken();
    FRUGAL_CUDA_CHECK(cudaStreamSynchronize(comm_stream()));
    return bootstrap_.barrier_async();
  }

 private:
  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }
  cudaStream_t comm_stream() const { return cuda_stream(stream_); }

  void throw_if_broken() const {
    FRUGAL_CHECK_AS(DistributedError, broken_->empty(), "the NCCL communicator failed earlier: ", *broken_);
  }

  template <typename Call>
  WorkHandle run(CollectiveDescriptor d, std::initializer_list<Tensor> tensors, Stream caller, Call&& call) {
    throw_if_broken();
    for (const Tensor& t : tensors)
      FRUGAL_CHECK_DEVICE(t.device() == Device::cuda(device_index_), describe(d), ": the tensor is on ", t.device(),
                          ", the NCCL communicator on cuda:", device_index_);
    d.sequence = sequence_++;
    agree_across_ranks(d);
    frugal::cuda::set_current_device(device_index_);
    cudaEvent_t ready = nullptr, done = nullptr;
    FRUGAL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    FRUGAL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    FRUGAL_CUDA_CHECK(cudaEventRecord(ready, cuda_stream(caller)));
    FRUGAL_CUDA_CHECK(cudaStreamWaitEvent(comm_stream(), ready, 0));
    cudaEventDestroy(ready);  // destroying a recorded event is safe: the wait already holds it
    FRUGAL_NCCL_CHECK(call());
    FRUGAL_CUDA_CHECK(cudaEventRecord(done, comm_stream()));
    for (const Tensor& t : tensors) frugal::record_stream(t, stream_);
    return std::make_shared<NcclWork>(comm_, done, cuda_stream(caller), describe(d), timeout(), broken_);
  }

  // Every rank's description of this collective, gathered over the bootstrap communicator.
  void agree_across_ranks(const CollectiveDescriptor& d) {
    const auto words = encode(d);
    const Tensor mine = from_vector(std::vector<std::int64_t>(words.begin(), words.end()));
    const Tensor all = empty({world_size() * kDescriptorWords}, {.dtype = DType::i64});
    bootstrap_.all_gather(mine, all);
    std::vector<CollectiveDescriptor> by_rank;
    for (int r = 0; r < world_size(); ++r) by_rank.push_back(decode(all.data<std::int64_t>() + r * kDescriptorWords));
    const std::string mismatch = descriptor_mismatch(by_rank);
    FRUGAL_CHECK_AS(DistributedError, mismatch.empty(), mismatch);
  }

  Communicator& bootstrap_;
  int device_index_;
  ncclComm_t comm_ = nullptr;
  Stream stream_;
  std::int64_t sequence_ = 0;
  std::shared_ptr<std::string> broken_ = std::make_shared<std::string>();  // the first failure, shared with its Work
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index) {
  return std::make_unique<NcclCommunicator>(bootstrap, device_index);
}

}  // namespace frugal::dist::cuda
