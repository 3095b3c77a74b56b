// InterruptScope (see interrupt.h).
#include "cli/interrupt.h"

#include <csignal>
#include <iterator>

namespace frugal::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_stop_signal(int signal) { g_signal = signal; }

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
