// MpiCommunicator when ranks disagree or stall: a mismatch fails every rank with the same message
// and leaves the job able to finish; a collective that makes progress while the caller computes.
//
// The cases marked doctest::skip() are failure scenarios for tests/mpi_check.sh, which runs them
// with --no-skip under mpirun and checks the exit code, the message and the time: a rank that dies
// or never arrives cannot end cleanly, so each scenario reports the error as main() would and ends
// the job with mpi_abort.
#include <doctest/doctest.h>

#include <csignal>
#include <functional>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "tests/mpi/mpi_fixtures.h"

using namespace frugal;
using namespace frugal::dist;
using namespace std::chrono_literals;

namespace {
// The failing rank reports as `frugal` would, then ends every rank (what main() does).
[[noreturn]] void report_and_abort(const Error& e, int rank) {
  std::cerr << "rank " << rank << ": DistributedError: " << e.message() << "\n";
  mpi_abort(3);
}

// Scenarios give up after this long; tests/mpi_check.sh bounds the whole run with a margin above it.
constexpr auto kScenarioTimeout = 2s;
}  // namespace

TEST_CASE("MpiCommunicator: sizes that disagree fail the collective on every rank, then every later one") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  comm.all_reduce(zeros({8}), ReduceOp::sum);  // collective #1 agrees
  const std::int64_t mine = comm.rank() == 1 ? 512 : 1024;
  const WorkHandle work = comm.all_reduce_async(zeros({mine}), ReduceOp::sum);
  CHECK_THROWS_WITH_AS(work->wait(), doctest::Contains("all_reduce #2: rank 0 has 1024 f32 elements but rank 1 has 512"),
                       DistributedError);
  CHECK(work->completed());
  CHECK_THROWS_WITH_AS(work->wait(), doctest::Contains("rank 1 has 512"), DistributedError);  // again on every call
  // Broken: a later collective fails at once with the first error, on every rank.
  CHECK_THROWS_WITH_AS(comm.broadcast(zeros({4}), 0), doctest::Contains("all_reduce #2: rank 0 has 1024"),
                       DistributedError);
}

TEST_CASE("MpiCommunicator: different collectives, dtypes, roots and ops are named") {
  // Rank 1 calls something else than every other rank; each communicator is broken after, so one each.
  const auto expect = [](const std::function<WorkHandle(MpiCommunicator&, bool)>& call, const char* message) {
    MpiCommunicator comm;
    comm.set_timeout(test::kTestTimeout);
    CHECK_THROWS_WITH_AS(call(comm, comm.rank() == 1)->wait(), doctest::Contains(message), DistributedError);
  };
  expect([](MpiCommunicator& c, bool one) { return one ? c.barrier_async() : c.all_reduce_async(zeros({4}), ReduceOp::max); },
         "collective #1: rank 0 called all_reduce but rank 1 called barrier");
  expect([](MpiCommunicator& c, bool one) { return c.all_gather_async(zeros({4}, {.dtype = one ? DType::f16 : DType::f32}),
                                                                     zeros({4 * c.world_size()}, {.dtype = one ? DType::f16 : DType::f32})); },
         "all_gather #1: rank 0 has 4 f32 elements but rank 1 has 4 f16");
  expect([](MpiCommunicator& c, bool one) { return c.broadcast_async(zeros({4}), one ? 1 : 0); },
         "broadcast #1: rank 0 names root 0 but rank 1 names root 1");
  expect([](MpiCommunicator& c, bool one) { return c.all_reduce_async(zeros({4}), one ? ReduceOp::min : ReduceOp::sum); },
         "all_reduce #1: rank 0 reduces with sum but rank 1 with min");
}

TEST_CASE("MpiCommunicator: a collective makes progress while the caller computes") {
  MpiCommunicator comm;
  comm.set_timeout(test::kTestTimeout);
  comm.barrier();
  // The other ranks arrive late, so the collective cannot have finished when the call returns.
  constexpr auto kLate = 300ms;
  if (comm.rank() != 0) std::this_thread::sleep_for(kLate);
  const Tensor big = full({1 << 20}, 1.0);  // 4 MiB
  const auto start = std::chrono::steady_clock::now();
  const WorkHandle work = comm.all_reduce_async(big, ReduceOp::sum);
  if (comm.rank() == 0) {
    CHECK(std::chrono::steady_clock::now() - start < kLate);  // queued, not run, by the call
    CHECK_FALSE(work->completed());
  }
  // The caller computes and never calls into MPI: the worker thread alone finishes the collective.
  double busy = 0;
  const auto deadline = start + test::kTestTimeout;
  while (!work->completed() && std::chrono::steady_clock::now() < deadline)
    for (int i = 0; i < 10000; ++i) busy += 1e-9 * i;
  CHECK_MESSAGE(work->completed(), "still in flight after computing ", busy);
  work->wait();
  CHECK(big.to_vector<float>() == std::vector<float>(1 << 20, static_cast<float>(comm.world_size())));
}

TEST_CASE("scenario rank_dies: rank 1 is killed in the middle of training" * doctest::skip()) {
  MpiCommunicator comm;
  comm.set_timeout(kScenarioTimeout);
  const Tensor gradients = full({1024}, 1.0);
  try {
    for (int step = 0; step < 100; ++step) {
      if (step == 5 && comm.rank() == 1) std::raise(SIGKILL);
      comm.all_reduce(gradients, ReduceOp::average);
    }
  } catch (const DistributedError& e) {
    report_and_abort(e, comm.rank());
  }
  FAIL("the collectives went on without rank 1");
}

TEST_CASE("scenario rank_stalls: rank 1 never calls the last collective" * doctest::skip()) {
  // As in a program: the error leaves the communicator's scope, whose destructor must not wait for the
  // worker stuck in MPI, and is reported by the caller.
  try {
    MpiCommunicator comm;
    comm.set_timeout(kScenarioTimeout);
    comm.all_reduce(full({1024}, 1.0), ReduceOp::sum);
    if (comm.rank() == 1) std::this_thread::sleep_for(60s);  // busy elsewhere; mpi_abort of rank 0 ends it
    comm.all_reduce(full({1024}, 1.0), ReduceOp::sum);
  } catch (const DistributedError& e) {
    report_and_abort(e, mpi_rank());
  }
  FAIL("the collective completed without rank 1");
}
