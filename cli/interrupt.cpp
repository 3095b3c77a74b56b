// InterruptScope (see interrupt.h).
#include "cli/interrupt.h"

#include <csignal>
#include <iterator>

#include <unistd.h>

namespace frugal::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;

// The first stop signal asks for a stop at the command's next boundary; a second Ctrl-C means "now"
// (a user pressing Ctrl-C again does not want to wait for the step or the evaluation to end): the
// process ends at once, 128 + the signal, as the shell reports a command the signal killed. Nothing
// is left half-written: AtomicFile's bytes are in a file with no name until they are complete
// (core/mapped_file.h). Only async-signal-safe calls here: write and _exit.
void on_stop_signal(int signal) {
  // Only a key pressed again (Ctrl-C, Ctrl-\) means "now": a closed terminal sends SIGHUP twice (the
  // kernel, then the shell), and a SIGTERM may be repeated by a supervisor; those still save first.
  if (g_signal != 0 && (signal == SIGINT || signal == SIGQUIT)) {
    constexpr char kNow[] = "\nfrugal: a second stop signal: ending at once\n";
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, kNow, sizeof kNow - 1);
    ::_exit(128 + signal);
  }
  g_signal = signal;
}

constexpr int kStopSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM};

}  // namespace

struct InterruptScope::Saved {
  struct sigaction previous[std::size(kStopSignals)] {};
  bool sigterm_caught = true;
};

InterruptScope::InterruptScope(bool restart_system_calls, bool catch_sigterm) : saved_(new Saved) {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = restart_system_calls ? SA_RESTART : 0;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    if (catch_sigterm || kStopSignals[i] != SIGTERM) sigaction(kStopSignals[i], &action, &saved_->previous[i]);
  saved_->sigterm_caught = catch_sigterm;
}

InterruptScope::~InterruptScope() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    if (saved_->sigterm_caught || kStopSignals[i] != SIGTERM) sigaction(kStopSignals[i], &saved_->previous[i], nullptr);
  delete saved_;
}

int interrupted_signal() { return g_signal; }
int interrupted_exit_code() { return 128 + g_signal; }

}  // namespace frugal::cli
