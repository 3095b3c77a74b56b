// MPI's process-wide state (see mpi_runtime.h).
#include "dist/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace frugal::dist {

namespace {

struct Runtime {
  std::once_flag once;
  bool initialised_here = false;  // we called MPI_Init_thread, so we finalise
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::atomic<bool> broken{false};
};

Runtime& runtime() {
  static Runtime state;  // never destroyed before the atexit handler runs: registered after it is built
  return state;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

// At exit: MPI_Finalize waits for every rank to reach it. After a collective failed or stalled some
// rank may never get there, so a broken job skips it; mpirun then reports that this process ended
// without finalising, which is the truth.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !runtime().broken.load()) MPI_Finalize();
}

void initialise(Runtime& state) {
  int already = 0;
  MPI_Initialized(&already);
  int provided = MPI_THREAD_SINGLE;
  if (already) {
    MPI_Query_thread(&provided);
  } else {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    state.initialised_here = true;
    std::atexit(finalize_at_exit);
  }
  FRUGAL_CHECK_AS(DistributedError, provided >= MPI_THREAD_MULTIPLE, "MPI provides ", thread_level_name(provided),
                  ", but frugal's communicators call MPI from a worker thread each and need MPI_THREAD_MULTIPLE");
  MPI_Comm_rank(MPI_COMM_WORLD, &state.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state.world_size);
  MPI_Comm node = MPI_COMM_NULL;  // the ranks that share this node's memory
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &state.local_rank);
  MPI_Comm_free(&node);
}

}  // namespace

void mpi_init() {
  Runtime& state = runtime();
  std::call_once(state.once, initialise, state);
}

bool mpi_launched() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr; }

int mpi_rank() {
  mpi_init();
  return runtime().rank;
}

int mpi_world_size() {
  mpi_init();
  return runtime().world_size;
}

int mpi_local_rank() {
  mpi_init();
  return runtime().local_rank;
}

void mpi_abort(int exit_code) noexcept {
  std::fflush(nullptr);  // what this rank printed before it goes
  int initialised = 0;
  int finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (initialised && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is the path without MPI
}

void mpi_mark_broken() noexcept { runtime().broken.store(true); }

}  // namespace frugal::dist
