// The progress display of `frugal train`: what one epoch is doing, on one line.
//
// On a terminal: one live line, redrawn in place ('\r', the line, then ESC[K to clear what a longer
// line left) at most kRedrawInterval apart, fitted to the terminal's columns:
//   epoch 1/3 [########......] 250/1000 loss 0.5000 acc 75.00% eta 2:30 mem 3.00 MiB/8.00 MiB peak 5.00 MiB 1234 img/s
// (memory allocated/reserved, then the peak). When the line is too wide, images/s gives way first,
// then the peak, then the bar; the rest is cut at the edge. At the epoch's end the line is drawn one
// last time, finished with '\n', and the caller's summary follows on a line of its own.
// Elsewhere (a log file, a pipe, CI): plain lines with no control character at all, one each time
// the epoch passes another tenth, never closer than kPlainMinInterval apart, and at least every
// kPlainMaxInterval while the epoch lasts; then the summary.
//
// loss and accuracy are what the caller reports: the training loop passes the mean over the epoch so
// far (every sample weighted alike), so the last line of an epoch shows the epoch's mean loss and
// accuracy. Time comes from an injectable clock, so tests can step it.
// Not here: measuring anything (the training loop and the allocator do), choosing the terminal
// (the caller passes isatty's answer and the width).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace frugal::train {

struct StepReport {
  std::int64_t epoch = 1, epochs = 1;                  // 1-based: epoch `epoch` of `epochs`
  std::int64_t step_in_epoch = 0, steps_in_epoch = 0;  // steps done in this epoch (1..n) of n
  std::int64_t global_step = 0;                        // steps done since training began
  double loss = 0;                                     // mean over the epoch so far
  double accuracy = 0;                                 // fraction correct over the epoch so far, in [0, 1]
  double images_per_sec = 0;
  std::size_t allocated = 0, reserved = 0, peak = 0;   // the allocator's bytes
  double elapsed_epoch_seconds = 0;                    // since the epoch's first step began
  double loss_scale = 0;                               // the GradScaler's (--amp f16); 0: none, not shown
  std::int64_t skipped_steps = 0;                      // steps it skipped so far (inf/NaN gradients)
};

class Progress {
 public:
  using Clock = std::function<double()>;  // seconds from any fixed origin
  static constexpr double kRedrawInterval = 0.25;    // a live line redrawn more often only flickers
  static constexpr double kPlainMinInterval = 5.0;   // a log gains nothing from lines closer than this
  static constexpr double kPlainMaxInterval = 60.0;  // a long epoch still shows it is alive
  static constexpr int kPlainLinesPerEpoch = 10;     // a line per tenth of the epoch

  // terminal: redraw in place (isatty(fileno(stdout))); columns: the terminal's width, 80 if unknown.
  // An empty clock is std::chrono::steady_clock.
  Progress(std::ostream& out, bool terminal, int columns = 80, Clock clock = {});

  void step(const StepReport& report);  // draws or prints a line when one is due
  void end_epoch(const StepReport& last, const std::string& summary);  // the epoch's final line, then the summary
  void message(const std::string& line);  // a line of its own, above the live line (which is then redrawn)

 private:
  void draw_live(const StepReport& report);
  bool plain_line_due(const StepReport& report, double now) const;
  void print_plain(const StepReport& report, double now);

  std::ostream& out_;
  bool terminal_;
  int columns_;
  Clock clock_;
  bool live_ = false;         // terminal: a live line is on screen, not yet finished with '\n'
  StepReport latest_{};       // the last step reported, redrawn after a message
  double last_output_ = 0;    // when the live line was drawn or the last plain line printed
  std::int64_t epoch_ = -1;   // the epoch the next fields describe
  int tenths_printed_ = 0;    // plain: tenths of this epoch covered by a line
};

// The line's text for `report`, at most columns - 1 characters (the last column would wrap on some
// terminals); without a bar when columns is 0 (plain lines, no width limit).
std::string format_progress(const StepReport& report, int columns);

// "0:07", "1:05", "1:02:03": minutes and seconds, with hours when there are any; "--:--" for a
// negative or non-finite duration (an ETA not known yet).
std::string format_duration(double seconds);

// The epoch's remaining seconds, from its average step so far; NaN before the first step.
double eta_seconds(const StepReport& report);

}  // namespace frugal::train
