// MpiCommunicator: the queue, its worker thread, the descriptor check and the MPI calls of each
// collective (see mpi_communicator.h for the design notes).
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "dist/mpi_runtime.h"

namespace frugal::dist {

namespace {

// What every rank says about the collective it is about to run (Note [Every collective is checked
// first]). Fields that do not apply are -1.
struct Descriptor {
  std::int64_t sequence = 0;  // 1 for the communicator's first collective
  std::int64_t kind = -1;     // CollectiveKind
  std::int64_t dtype = -1;    // DType
  std::int64_t count = -1;    // elements of the input
  std::int64_t root = -1;     // broadcast
  std::int64_t op = -1;       // ReduceOp
};
constexpr int kDescriptorFields = sizeof(Descriptor) / sizeof(std::int64_t);

std::string describe(const Descriptor& d) {  // "all_reduce #17 of 1024 f32", "barrier #3"
  std::ostringstream out;
  out << collective_name(static_cast<CollectiveKind>(d.kind)) << " #" << d.sequence;
  if (d.count >= 0) out << " of " << d.count << " " << static_cast<DType>(d.dtype);
  return out.str();
}

// Why two ranks' descriptors disagree, as rank `first`'s view against rank `other`'s; "" if they agree.
std::string disagreement(const Descriptor& a, int first, const Descriptor& b, int other) {
  std::ostringstream out;
  const std::string name = std::string(collective_name(static_cast<CollectiveKind>(a.kind)));
  const auto rank_has = [&](int rank) { out << "rank " << rank << " "; };
  if (a.sequence != b.sequence) {
    out << "collective #" << a.sequence << " on rank " << first << " meets collective #" << b.sequence << " on rank "
        << other << ": a rank skipped a collective";
  } else if (a.kind != b.kind) {
    out << "collective #" << a.sequence << ": ";
    rank_has(first);
    out << "called " << name << " but ";
    rank_has(other);
    out << "called " << collective_name(static_cast<CollectiveKind>(b.kind));
  } else if (a.count != b.count || a.dtype != b.dtype) {
    out << name << " #" << a.sequence << ": ";
    rank_has(first);
    out << "has " << a.count << " " << static_cast<DType>(a.dtype) << " elements but ";
    rank_has(other);
    out << "has " << b.count;
    if (a.dtype != b.dtype) out << " " << static_cast<DType>(b.dtype);
  } else if (a.root != b.root) {
    out << name << " #" << a.sequence << ": ";
    rank_has(first);
    out << "names root " << a.root << " but ";
    rank_has(other);
    out << "names root " << b.root;
  } else if (a.op != b.op) {
    out << name << " #" << a.sequence << ": ";
    rank_has(first);
    out << "reduces with " << reduce_op_name(static_cast<ReduceOp>(a.op)) << " but ";
    rank_has(other);
    out << "with " << reduce_op_name(static_cast<ReduceOp>(b.op));
  }
  return out.str();
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

// MPI returns errors on this communicator (MPI_ERRORS_RETURN): each becomes a DistributedError.
void mpi_check(int code, const char* call) {
  FRUGAL_CHECK_AS(DistributedError, code == MPI_SUCCESS, call, ": ", mpi_error_text(code));
}

// The MPI type that carries a dtype's elements. The 16-bit floats move as their bits; they are
// reduced widened to f32 (reduced_type), so MPI never adds them.
MPI_Datatype moved_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8:
    case DType::boolean: return MPI_UINT8_T;
  }
  FRUGAL_THROW(DTypeError, "MpiCommunicator: unknown dtype ", static_cast<int>(dtype));
}

bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::average: return MPI_SUM;  // average: the sum, divided afterwards
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  FRUGAL_THROW(ValueError, "MpiCommunicator: unknown reduce op ", static_cast<int>(op));
}

// Sum -> average, for the floating dtypes MPI reduces (f32, f64; the 16-bit ones reduce as f32).
void divide(const Tensor& tensor, int world_size) {
  visit_dtype(tensor.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* data = tensor.data<T>();
      for (std::int64_t i = 0; i < tensor.numel(); ++i) data[i] /= static_cast<T>(world_size);
    } else {
      FRUGAL_THROW(DTypeError, "MpiCommunicator: average divides f32 and f64 only, got ", tensor.dtype());
    }
  });
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

int mpi_count(std::int64_t numel) { return static_cast<int>(numel); }  // checked <= INT_MAX before queueing

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

}  // namespace

// One queued collective: its descriptor and the MPI calls that run once the ranks agree.
struct QueuedCollective {
  Descriptor descriptor;
  std::function<void(MPI_Comm)> run;
  std::shared_ptr<class MpiWork> work;
};

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int world_size = 1;
  std::mutex mutex;  // guards everything below, and every MpiWork's outcome
  std::condition_variable changed;
  std::deque<QueuedCollective> queue;
  std::int64_t sequence = 0;
  bool stopping = false;     // the destructor asked the worker to finish the queue and end
  bool worker_done = false;  // the worker has ended
  bool stalled = false;      // a collective timed out or MPI failed: the worker may be blocked for good
  std::string first_error;   // "" while the communicator works
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiCommunicator::State> state, std::string name, std::chrono::milliseconds timeout)
      : state_(std::move(state)), name_(std::move(name)), timeout_(timeout) {}

  bool completed() override {
    const std::lock_guard lock(state_->mutex);
    return done_ || !state_->first_error.empty();
  }

  void wait() override {
    std::unique_lock lock(state_->mutex);
    const bool settled =
        state_->changed.wait_for(lock, timeout_, [&] { return done_ || !state_->first_error.empty(); });
    if (!settled) fail_stalled();
    if (done_ && error_.empty()) return;
    FRUGAL_THROW(DistributedError, done_ ? error_ : state_->first_error);
  }

  // The worker's report, under state_->mutex.
  void finish(std::string error) {
    done_ = true;
    error_ = std::move(error);
  }

 private:
  void fail_stalled() {  // under state_->mutex
    std::ostringstream message;
    message << name_ << " did not complete within " << seconds_text(timeout_) << " on rank " << state_->rank
            << ": a rank died or the ranks called different collectives";
    state_->first_error = message.str();
    state_->stalled = true;  // the destructor will not wait for the worker
    state_->changed.notify_all();
  }

  std::shared_ptr<MpiCommunicator::State> state_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
  std::string error_;
};

namespace {

// Every rank's descriptor, compared with rank 0's: why the first rank that disagrees does (the same
// text on every rank), or "" when all agree. A DistributedError when MPI fails.
std::string world_disagreement(const MpiCommunicator::State& state, const Descriptor& mine) {
  std::vector<Descriptor> all(static_cast<std::size_t>(state.world_size));
  mpi_check(MPI_Allgather(&mine, kDescriptorFields, MPI_INT64_T, all.data(), kDescriptorFields, MPI_INT64_T, state.comm),
            "MPI_Allgather of the collective's descriptor");
  for (int r = 1; r < state.world_size; ++r) {
    std::string why = disagreement(all[0], 0, all[static_cast<std::size_t>(r)], r);
    if (!why.empty()) return why;
  }
  return "";
}

struct Outcome {
  std::string error;        // "" on success
  bool mpi_failed = false;  // MPI itself failed: ranks may be left inside the collective
};

// One collective: the descriptor check, then its MPI calls.
Outcome run_collective(const MpiCommunicator::State& state, const QueuedCollective& collective) {
  const std::string failed = describe(collective.descriptor) + " failed on rank " + std::to_string(state.rank) + ": ";
  try {
    std::string why = world_disagreement(state, collective.descriptor);
    if (!why.empty()) return {std::move(why), false};
    collective.run(state.comm);
    return {};
  } catch (const Error& e) {
    return {failed + e.message(), true};
  } catch (const std::exception& e) {  // out of memory for a widened copy: nothing escapes the thread
    return {failed + e.what(), true};
  }
}

// The worker: runs the queue in order until the destructor stops it (Note [A worker thread per
// communicator]).
void run_worker(const std::shared_ptr<MpiCommunicator::State>& state) {
  for (;;) {
    QueuedCollective next;
    {
      std::unique_lock lock(state->mutex);
      state->changed.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
      if (state->queue.empty()) break;
      next = std::move(state->queue.front());
      state->queue.pop_front();
      if (!state->first_error.empty()) {  // broken: fail at once with the first error
        next.work->finish(state->first_error);
        state->changed.notify_all();
        continue;
      }
    }
    mpi_note_in_flight(describe(next.descriptor).c_str());  // for the SIGTERM line of mpi_runtime.h
    const auto [error, mpi_failed] = run_collective(*state, next);
    mpi_note_in_flight("");
    // The tensors the collective captured are released before the caller learns it is done, so a
    // caller that then measures memory (the trainer's leak check) does not see them still held.
    next.run = nullptr;
    const std::lock_guard lock(state->mutex);
    next.work->finish(error);
    if (!error.empty() && state->first_error.empty()) state->first_error = error;
    if (mpi_failed) {  // an MPI error may leave ranks inside a collective: the job cannot finish cleanly
      state->stalled = true;
      mpi_mark_broken();
    }
    state->changed.notify_all();
  }
  const std::lock_guard lock(state->mutex);
  state->worker_done = true;
  state->changed.notify_all();
}

void check_cpu(const Tensor& tensor, const char* collective) {
  FRUGAL_CHECK_DEVICE(tensor.device().is_cpu(), "MpiCommunicator ", collective, ": the tensor is on ", tensor.device(),
                      "; MPI moves CPU tensors only",
                      tensor.device().is_cuda() ? " (CUDA tensors go through the NCCL communicator, NcclCommunicator)"
                                                : "");
}

void check_count(std::int64_t numel, const char* collective) {
  FRUGAL_CHECK_VALUE(numel <= INT_MAX, "MpiCommunicator ", collective, ": ", numel,
                     " elements exceed MPI's int count (", INT_MAX, "); split the tensor");
}

void check_reduced_dtype(DType dtype, const char* collective) {
  FRUGAL_CHECK_DTYPE(dtype != DType::boolean, "MpiCommunicator ", collective, ": bool tensors move but do not reduce");
}

// Numbers the collective and queues it for the worker; on a broken communicator it fails at once.
WorkHandle enqueue(const std::shared_ptr<MpiCommunicator::State>& state, std::chrono::milliseconds timeout,
                   Descriptor descriptor, std::function<void(MPI_Comm)> run) {
  const std::lock_guard lock(state->mutex);
  descriptor.sequence = ++state->sequence;
  auto work = std::make_shared<MpiWork>(state, describe(descriptor), timeout);
  if (!state->first_error.empty()) {
    work->finish(state->first_error);
    return work;
  }
  state->queue.push_back({descriptor, std::move(run), work});
  state->changed.notify_all();
  return work;
}

}  // namespace

MpiCommunicator::MpiCommunicator() : state_(std::make_shared<State>()) {
  mpi_init();
  MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm);  // our own tag space: no message of another library can match ours
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state_->comm, &rank_);
  MPI_Comm_size(state_->comm, &world_size_);
  state_->rank = rank_;
  state_->world_size = world_size_;
  worker_ = std::thread(run_worker, state_);
}

MpiCommunicator::~MpiCommunicator() {
  std::unique_lock lock(state_->mutex);
  state_->stopping = true;
  state_->changed.notify_all();
  // A stalled worker may never return from MPI: do not wait for it (Note [Watchdog and a broken communicator]).
  const auto patience = state_->stalled ? std::chrono::milliseconds(0) : timeout();
  const bool ended = state_->changed.wait_for(lock, patience, [&] { return state_->worker_done; });
  if (!ended) {
    state_->stalled = true;
    mpi_mark_broken();
    lock.unlock();
    worker_.detach();  // it owns a reference to the state, which outlives it
    return;
  }
  lock.unlock();
  worker_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&state_->comm);
}


WorkHandle MpiCommunicator::all_reduce_async(const Tensor& tensor, ReduceOp op, Stream) {
  check_all_reduce(tensor, op);
  check_cpu(tensor, "all_reduce");
  check_count(tensor.numel(), "all_reduce");
  check_reduced_dtype(tensor.dtype(), "all_reduce");
  const int world = world_size_;
  return enqueue(state_, timeout(), {.kind = static_cast<std::int64_t>(CollectiveKind::all_reduce),
                  .dtype = static_cast<std::int64_t>(tensor.dtype()),
                  .count = tensor.numel(),
                  .op = static_cast<std::int64_t>(op)},
                 [tensor, op, world](MPI_Comm comm) {
                   const Tensor reduced = is_half(tensor.dtype()) ? tensor.to(DType::f32) : tensor;
                   mpi_check(MPI_Allreduce(MPI_IN_PLACE, reduced.data_ptr(), mpi_count(reduced.numel()),
                                           moved_type(reduced.dtype()), mpi_op(op), comm),
                             "MPI_Allreduce");
                   if (op == ReduceOp::average) divide(reduced, world);
                   if (!reduced.is_same(tensor)) Tensor(tensor).copy_(reduced);  // a handle to the same elements
                 });
}

WorkHandle MpiCommunicator::broadcast_async(const Tensor& tensor, int root, Stream) {
  check_broadcast(tensor, root);
  check_cpu(tensor, "broadcast");
  check_count(tensor.numel(), "broadcast");
  return enqueue(state_, timeout(), {.kind = static_cast<std::int64_t>(CollectiveKind::broadcast),
                  .dtype = static_cast<std::int64_t>(tensor.dtype()),
                  .count = tensor.numel(),
                  .root = root},
                 [tensor, root](MPI_Comm comm) {
                   mpi_check(MPI_Bcast(tensor.data_ptr(), mpi_count(tensor.numel()), moved_type(tensor.dtype()), root, comm),
                             "MPI_Bcast");
                 });
}

WorkHandle MpiCommunicator::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op, Stream) {
  check_reduce_scatter(input, output, op);
  check_cpu(input, "reduce_scatter");
  check_count(input.numel(), "reduce_scatter");
  check_reduced_dtype(input.dtype(), "reduce_scatter");
  const int world = world_size_;
  return enqueue(state_, timeout(), {.kind = static_cast<std::int64_t>(CollectiveKind::reduce_scatter),
                  .dtype = static_cast<std::int64_t>(input.dtype()),
                  .count = input.numel(),
                  .op = static_cast<std::int64_t>(op)},
                 [input, output, op, world](MPI_Comm comm) {
                   // MPI reads and writes separate buffers: 16-bit floats and an output inside the
                   // input are reduced into a fresh one, then copied.
                   const bool widen = is_half(input.dtype());
                   const Tensor send = widen ? input.to(DType::f32) : input;
                   const Tensor receive =
                       widen || overlaps(input, output) ? empty(output.shape(), {.dtype = send.dtype()}) : output;
                   mpi_check(MPI_Reduce_scatter_block(send.data_ptr(), receive.data_ptr(), mpi_count(receive.numel()),
                                                      moved_type(send.dtype()), mpi_op(op), comm),
                             "MPI_Reduce_scatter_block");
                   if (op == ReduceOp::average) divide(receive, world);
                   if (!receive.is_same(output)) Tensor(output).copy_(receive);
                 });
}

WorkHandle MpiCommunicator::all_gather_async(const Tensor& input, const Tensor& output, Stream) {
  check_all_gather(input, output);
  check_cpu(input, "all_gather");
  check_count(output.numel(), "all_gather");
  const int rank = rank_;
  return enqueue(state_, timeout(), {.kind = static_cast<std::int64_t>(CollectiveKind::all_gather),
                  .dtype = static_cast<std::int64_t>(input.dtype()),
                  .count = input.numel()},
                 [input, output, rank](MPI_Comm comm) {
                   // The input already in its place in the output (PyTorch's in-place form) is MPI_IN_PLACE;
                   // an input elsewhere inside the output is copied out first, as MPI needs apart buffers.
                   const auto* own_chunk = static_cast<const char*>(output.data_ptr()) + rank * input.nbytes();
                   const bool in_place = input.data_ptr() == own_chunk;
                   const Tensor send = !in_place && overlaps(input, output) ? input.clone() : input;
                   const MPI_Datatype type = moved_type(input.dtype());
                   const int count = mpi_count(input.numel());
                   mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : send.data_ptr(), count, type, output.data_ptr(),
                                           count, type, comm),
                             "MPI_Allgather");
                 });
}

WorkHandle MpiCommunicator::barrier_async() {
  // The descriptor exchange is itself an all-gather over every rank: it completes once all have started it.
  return enqueue(state_, timeout(), {.kind = static_cast<std::int64_t>(CollectiveKind::barrier)}, [](MPI_Comm) {});
}

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace frugal::dist
