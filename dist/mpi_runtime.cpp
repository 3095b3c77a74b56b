// MPI's process-wide state (see mpi_runtime.h).
#include "dist/mpi_runtime.h"

#include <mpi.h>
#include <signal.h>  // sigaction
#include <unistd.h>  // write

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The text the SIGTERM handler prints (Note [What a rank says when mpirun ends it]): a seqlock, so the
// handler reads it without a lock (an odd version: being written, so it is not trusted).
constexpr std::size_t kInFlightText = 160;  // "reduce_scatter #123456 of 2147483647 bf16" and room to spare
char g_in_flight[kInFlightText] = {};
std::atomic<unsigned> g_in_flight_version{0};
static_assert(std::atomic<unsigned>::is_always_lock_free, "the SIGTERM handler reads the version");

void append(char* line, std::size_t& used, std::size_t capacity, const char* text) {
  for (; *text != '\0' && used + 1 < capacity; ++text) line[used++] = *text;
}

void append_number(char* line, std::size_t& used, std::size_t capacity, int value) {
  char digits[12];  // an int's digits, last first
  std::size_t count = 0;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && count < sizeof(digits));
  while (count > 0 && used + 1 < capacity) line[used++] = digits[--count];
}

// Async-signal-safe: fixed buffers, no allocation, write(2), then the default action.
void on_sigterm(int signal_number) {
  char line[512];
  std::size_t used = 0;
  append(line, used, sizeof(line), "frugal rank ");
  append_number(line, used, sizeof(line), runtime().rank);
  append(line, used, sizeof(line), ": ended by mpirun (SIGTERM) while ");
  char in_flight[kInFlightText];
  const unsigned before = g_in_flight_version.load();
  std::memcpy(in_flight, g_in_flight, kInFlightText);
  in_flight[kInFlightText - 1] = '\0';
  if (before % 2 != 0 || g_in_flight_version.load() != before) {  // caught between two collectives
    append(line, used, sizeof(line), "a collective was starting or ending");
  } else if (in_flight[0] != '\0') {
    append(line, used, sizeof(line), in_flight);
    append(line, used, sizeof(line), " was in flight");
  } else {
    append(line, used, sizeof(line), "no collective was in flight");
  }
  append(line, used, sizeof(line), ": another rank ended first (mpirun's message names it)\n");
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, used);
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

void install_sigterm_note() {
  struct sigaction current = {};
  ::sigaction(SIGTERM, nullptr, &current);
  if (current.sa_handler != SIG_DFL) return;  // someone else's handler: theirs stands
  struct sigaction note = {};
  note.sa_handler = on_sigterm;
  sigemptyset(&note.sa_mask);
  ::sigaction(SIGTERM, &note, nullptr);
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
  if (mpi_launched()) install_sigterm_note();
}

}  // namespace

bool mpi_built() { return true; }

void mpi_init() {
  Runtime& state = runtime();
  std::call_once(state.once, initialise, state);
}

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

void mpi_note_in_flight(const char* description) noexcept {
  static std::mutex writers;  // several communicators' workers; the handler never takes it
  const std::lock_guard lock(writers);
  g_in_flight_version.fetch_add(1);  // odd: being written
  std::strncpy(g_in_flight, description, kInFlightText - 1);
  g_in_flight_version.fetch_add(1);
}

}  // namespace frugal::dist
