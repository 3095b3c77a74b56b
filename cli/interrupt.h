// The signals that ask a program to stop - a closed terminal (SIGHUP), Ctrl-C (SIGINT), Ctrl-\ (SIGQUIT),
// kill (SIGTERM) - turned into a request a long-running command polls, so it can stop
// at a point of its choosing (pack: between records; train: between optimizer steps, after saving a
// checkpoint) and report. Its exit code is then 128 + the signal, as a shell reports a command a
// signal stopped: 130 for Ctrl-C, 143 for SIGTERM. A second Ctrl-C (or Ctrl-\\) ends the process at
// once, with the same code: nothing is half-written, since every output is an AtomicFile.
// Not here: SIGKILL, which nobody can catch; the commands write their files atomically for it.
#pragma once

namespace frugal::cli {

// While alive, the stop signals record themselves instead of ending the process.
// restart_system_calls: false makes a read blocked in the kernel return early (EINTR), so a command
// that only reads stops at once (pack); true lets the reads of worker threads finish normally, for a
// command that stops at a boundary of its own and must not see its I/O fail (train).
// catch_sigterm: false leaves SIGTERM as it was: under mpirun (train --ddp) a SIGTERM is mpirun ending
// the job because another rank died, and dist/mpi_runtime.h's handler names the collective in flight.
class InterruptScope {
 public:
  explicit InterruptScope(bool restart_system_calls, bool catch_sigterm = true);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct Saved;
  Saved* saved_;  // the handlers to restore
};

int interrupted_signal();     // the stop signal received inside the current scope, 0 while none has
int interrupted_exit_code();  // 128 + interrupted_signal()

}  // namespace frugal::cli
