// MPI's process-wide state: initialised once, on first use, and finalised at exit; which rank this
// process is, among how many, and on which node. Started with `mpirun -np N frugal ...`, each of the
// N processes is one rank; started alone, the process is a world of one (MPI's singleton start).
//
// Thread level: MPI_THREAD_MULTIPLE. Each MpiCommunicator runs its collectives on a worker thread of
// its own (dist/mpi_communicator.h), so several threads call MPI at once; mpi_init() refuses an MPI
// that provides less.
//
// Note [What a rank says when mpirun ends it]
// When a rank dies (killed, crashed), OpenMPI's mpirun prints "mpirun noticed that process rank 1
// ... exited on signal 9" and ends every other rank itself: SIGTERM, then SIGKILL a second later.
// That comes long before a watchdog timeout, so the survivors never reach their DistributedError.
// Started by mpirun, mpi_init() therefore installs a SIGTERM handler (where the disposition is still
// the default) that writes one line naming the collective in flight, "frugal rank 0: ended by
// mpirun (SIGTERM) while all_reduce #6 of 1024 f32 was in flight: ...", and then dies of SIGTERM as
// before. (`mpirun --enable-recovery` leaves the survivors alone, so the watchdog fails them with a
// DistributedError, but OpenMPI 4.1's mpirun then exits 0 even after MPI_Abort: not recommended.)
//
// Not here: collectives (dist/mpi_communicator.h). No MPI type appears in this header.
#pragma once

namespace frugal::dist {

// Whether this build has MPI (FRUGAL_MPI, on where OpenMPI was found): without it every function
// below treats the process as a world of one and mpi_init() throws LibraryError saying what is missing
// (dist/mpi_absent.cpp).
bool mpi_built();

// Initialises MPI if nobody has (idempotent, thread-safe) and arranges MPI_Finalize at exit. A
// DistributedError when MPI cannot give MPI_THREAD_MULTIPLE.
void mpi_init();

// Was this process started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE or a PMI launcher's PMI_SIZE
// in the environment)? Reads the environment only; does not initialise MPI.
bool mpi_launched();

// These initialise MPI first when needed. The local rank numbers the ranks on this node (the ranks
// that share memory), 0 .. ranks on the node - 1: which GPU a rank takes.
int mpi_rank();
int mpi_world_size();
int mpi_local_rank();

// Ends every rank of the job with `exit_code` (MPI_Abort on the world): what main() calls after
// printing an error, so that ranks waiting for this one in a collective end too instead of hanging.
// Without MPI initialised it ends this process alone.
[[noreturn]] void mpi_abort(int exit_code) noexcept;

// A communicator calls this when one of its collectives failed or stalled: from then on the job
// cannot finish cleanly, and MPI_Finalize at exit (which waits for every rank) is skipped.
void mpi_mark_broken() noexcept;

// The collective a communicator's worker is running, for the SIGTERM line ("" when none). Kept in a
// fixed buffer that the signal handler can read safely; with several communicators, the latest.
void mpi_note_in_flight(const char* description) noexcept;

}  // namespace frugal::dist
