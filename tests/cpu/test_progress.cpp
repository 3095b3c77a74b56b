// The progress display of `frugal train` (train/progress.h), driven by a fake clock into a string:
// the live line on a terminal (redrawn in place, rate-limited, fitted to the width, finished with a
// newline), plain lines elsewhere (no control characters, a predictable count), and the formats.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/progress.h"

using frugal::train::format_duration;
using frugal::train::format_progress;
using frugal::train::Progress;
using frugal::train::StepReport;

namespace {

constexpr std::int64_t kSteps = 1000;

// Step `step` of a kSteps-step epoch 1 of 3, taken `seconds_per_step` after the one before.
StepReport report_at(std::int64_t step, double seconds_per_step) {
  StepReport r;
  r.epoch = 1;
  r.epochs = 3;
  r.step_in_epoch = step;
  r.steps_in_epoch = kSteps;
  r.global_step = step;
  r.loss = 0.5;
  r.accuracy = 0.75;
  r.images_per_sec = 1234;
  r.allocated = 3 << 20;
  r.reserved = 8 << 20;
  r.peak = 5 << 20;
  r.elapsed_epoch_seconds = static_cast<double>(step) * seconds_per_step;
  return r;
}

// Runs one epoch of kSteps steps through `progress`, the clock moving seconds_per_step a step;
// returns the clock times at which something was written.
std::vector<double> run_epoch(Progress& progress, const std::ostringstream& out, double& now, double seconds_per_step) {
  std::vector<double> writes;
  for (std::int64_t step = 1; step <= kSteps; ++step) {
    now += seconds_per_step;
    const std::size_t before = out.str().size();
    progress.step(report_at(step, seconds_per_step));
    if (out.str().size() != before) writes.push_back(now);
  }
  progress.end_epoch(report_at(kSteps, seconds_per_step), "epoch 1/3 done: loss 0.5000, accuracy 75.00%");
  return writes;
}

std::size_t count(const std::string& text, char c) {
  std::size_t n = 0;
  for (char x : text) n += x == c;
  return n;
}

// The live lines drawn: the text between each '\r' and the ESC[K after it.
std::vector<std::string> live_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (std::size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    const std::size_t end = text.find("\x1b[K", at);
    if (end != at + 1) lines.push_back(text.substr(at + 1, end - at - 1));  // not the clearing before a message
  }
  return lines;
}

}  // namespace

TEST_CASE("progress: on a terminal, one line redrawn in place at most four times a second") {
  std::ostringstream out;
  double now = 0;
  Progress progress(out, /*terminal=*/true, 120, [&now] { return now; });
  const std::vector<double> writes = run_epoch(progress, out, now, 0.01);  // 1000 steps in 10 s
  for (std::size_t i = 1; i < writes.size(); ++i) CHECK(writes[i] - writes[i - 1] >= Progress::kRedrawInterval - 1e-9);
  CHECK(writes.size() >= 39);  // 10 s at 4 a second, and the first step
  CHECK(writes.size() <= 41);
  const std::string text = out.str();
  CHECK(count(text, '\r') == writes.size() + 1);  // and the final draw at the epoch's end
  CHECK(count(text, '\n') == 2);                  // the finished line and the summary
  const std::vector<std::string> lines = live_lines(text);
  const std::string& last = lines.back();
  CHECK(last == "epoch 1/3 [##################] 1000/1000 loss 0.5000 acc 75.00% eta 0:00 "
                "mem 3.00 MiB/8.00 MiB peak 5.00 MiB 1234 img/s");
  CHECK(text.ends_with(last + "\x1b[K\nepoch 1/3 done: loss 0.5000, accuracy 75.00%\n"));
  for (const std::string& line : lines) CHECK(line.size() <= 119);
}

TEST_CASE("progress: with loss scaling, the scale and the skipped steps stand beside the loss") {
  StepReport r = report_at(250, 0.2);
  r.loss_scale = 1024;
  r.skipped_steps = 3;
  CHECK(format_progress(r, 0) == "epoch 1/3 250/1000 loss 0.5000 acc 75.00% scale 1024 skipped 3 eta 2:30 "
                                 "mem 3.00 MiB/8.00 MiB peak 5.00 MiB 1234 img/s");
  r.loss_scale = 0;  // no scaler: nothing shown
  CHECK(format_progress(r, 0).find("scale") == std::string::npos);
}

TEST_CASE("progress: the live line fits the terminal: images/s, then the peak, then the bar give way") {
  const StepReport r = report_at(250, 0.2);  // a quarter done after 50 s: 150 s to go
  CHECK(format_progress(r, 200) == "epoch 1/3 [########......................] 250/1000 loss 0.5000 acc 75.00% eta 2:30 "
                                   "mem 3.00 MiB/8.00 MiB peak 5.00 MiB 1234 img/s");
  CHECK(format_progress(r, 100) == "epoch 1/3 [###.......] 250/1000 loss 0.5000 acc 75.00% eta 2:30 "
                                   "mem 3.00 MiB/8.00 MiB peak 5.00 MiB");
  CHECK(format_progress(r, 90) == "epoch 1/3 [####..........] 250/1000 loss 0.5000 acc 75.00% eta 2:30 mem 3.00 MiB/8.00 MiB");
  CHECK(format_progress(r, 80) == "epoch 1/3 250/1000 loss 0.5000 acc 75.00% eta 2:30 mem 3.00 MiB/8.00 MiB");
  CHECK(format_progress(r, 40) == "epoch 1/3 250/1000 loss 0.5000 acc 75.0");
  // Plain lines have no width and no bar.
  CHECK(format_progress(r, 0) == "epoch 1/3 250/1000 loss 0.5000 acc 75.00% eta 2:30 mem 3.00 MiB/8.00 MiB "
                                 "peak 5.00 MiB 1234 img/s");
  for (int columns : {20, 60, 79, 80, 81, 110, 140}) CHECK(format_progress(r, columns).size() <= static_cast<std::size_t>(columns - 1));
}

TEST_CASE("progress: plain lines carry no control character, one per tenth of the epoch and at most one per 5 s") {
  struct Case {
    double seconds_per_step;
    std::size_t lines;  // the step lines, then the final line and the summary
  };
  const Case cases[] = {
      {0.1, 9 + 2},     // a tenth takes 10 s: steps 100, 200, ..., 900
      {0.02, 3 + 2},    // a tenth takes 2 s: only every 5 s, at steps 250, 500, 750 (never the last: end_epoch prints it)
      {0.001, 0 + 2},   // a 1 s epoch: the final line and the summary only
      // A tenth takes 100 s: a line at least every 60 s too (steps 61, 100, 160, 200, ..., 900, 960).
      {1.0, 19 + 2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.seconds_per_step);
    std::ostringstream out;
    double now = 0;
    Progress progress(out, /*terminal=*/false, 80, [&now] { return now; });
    const std::vector<double> writes = run_epoch(progress, out, now, c.seconds_per_step);
    const std::string text = out.str();
    CHECK(count(text, '\n') == c.lines);
    for (char x : text) CHECK((x == '\n' || (x >= ' ' && x < 127)));
    for (std::size_t i = 1; i < writes.size(); ++i) {
      CHECK(writes[i] - writes[i - 1] >= Progress::kPlainMinInterval - 1e-9);
      CHECK(writes[i] - writes[i - 1] <= Progress::kPlainMaxInterval + 1e-9);
    }
  }
}

TEST_CASE("progress: a message goes above the live line, which is cleared first and drawn again") {
  std::ostringstream out;
  double now = 0;
  Progress progress(out, /*terminal=*/true, 200, [&now] { return now; });
  progress.step(report_at(1, 0.1));
  const std::string live = format_progress(report_at(1, 0.1), 200);
  progress.message("checkpoint saved to run/epoch-1.safetensors");
  CHECK(out.str() == "\r" + live + "\x1b[K" + "\r\x1b[Kcheckpoint saved to run/epoch-1.safetensors\n" + "\r" + live + "\x1b[K");

  // Not on a terminal, or with no live line: just the line.
  std::ostringstream plain;
  Progress log(plain, /*terminal=*/false, 80, [&now] { return now; });
  log.step(report_at(1, 0.1));
  log.message("checkpoint saved");
  CHECK(plain.str() == "checkpoint saved\n");
}

TEST_CASE("progress: a new epoch draws at once, and bad widths are refused") {
  std::ostringstream out;
  double now = 0;
  Progress progress(out, /*terminal=*/true, 120, [&now] { return now; });
  progress.step(report_at(1, 0.1));
  progress.end_epoch(report_at(1, 0.1), "");
  StepReport next = report_at(1, 0.1);
  next.epoch = 2;
  progress.step(next);  // the same instant: not rate-limited, since the last line was finished
  CHECK(out.str().ends_with(format_progress(next, 120) + "\x1b[K"));
  CHECK(count(out.str(), '\n') == 1);  // an empty summary prints nothing
  CHECK_THROWS_AS(Progress(out, true, 0), frugal::ValueError);
}

TEST_CASE("progress: durations and the ETA") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(7) == "0:07");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(65) == "1:05");
  CHECK(format_duration(3599) == "59:59");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(100 * 3600) == "100:00:00");
  CHECK(format_duration(-1) == "--:--");
  CHECK(format_duration(std::numeric_limits<double>::quiet_NaN()) == "--:--");
  CHECK(format_duration(std::numeric_limits<double>::infinity()) == "--:--");
  CHECK(frugal::train::eta_seconds(report_at(250, 0.2)) == doctest::Approx(150));
  CHECK(frugal::train::eta_seconds(report_at(1000, 0.2)) == 0);
  CHECK(std::isnan(frugal::train::eta_seconds(report_at(0, 0.2))));
  CHECK(format_progress(report_at(0, 0.2), 0).find("eta --:--") != std::string::npos);
}
