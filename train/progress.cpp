// train/progress.h: the line's fields, fitted to the width; when a line is due in each mode.
#include "train/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace frugal::train {

namespace {

constexpr int kMinBar = 10;  // a narrower bar shows little the step counts do not
constexpr int kMaxBar = 30;  // a wider one takes the room of numbers
constexpr std::size_t kAlwaysShown = 6;  // epoch, step, loss, accuracy, ETA, memory; peak and speed when they fit
constexpr const char* kClearToEnd = "\x1b[K";  // ANSI EL: erase from the cursor to the end of the line

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string join(const std::vector<std::string>& parts, std::size_t begin, std::size_t end) {
  std::string line;
  for (std::size_t i = begin; i < end; ++i) line += (line.empty() ? "" : " ") + parts[i];
  return line;
}

std::string bar(const StepReport& report, int width) {
  const double done = report.steps_in_epoch > 0
                          ? std::clamp(static_cast<double>(report.step_in_epoch) / static_cast<double>(report.steps_in_epoch), 0.0, 1.0)
                          : 0.0;
  const auto filled = static_cast<std::size_t>(std::lround(done * width));
  std::string text = "[";  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string(...)
  text.append(filled, '#').append(static_cast<std::size_t>(width) - filled, '.') += ']';
  return text;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_duration(double seconds) {
  constexpr double kLongest = 1e9;  // about 31 years: anything longer is no estimate (and overflows nothing)
  if (!(seconds >= 0 && seconds < kLongest)) return "--:--";
  const long long total = std::llround(seconds);
  char text[32];
  if (total >= 3600) std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, total % 3600 / 60, total % 60);
  else std::snprintf(text, sizeof text, "%lld:%02lld", total / 60, total % 60);
  return text;
}

double eta_seconds(const StepReport& report) {
  if (report.step_in_epoch <= 0) return std::numeric_limits<double>::quiet_NaN();
  const double per_step = report.elapsed_epoch_seconds / static_cast<double>(report.step_in_epoch);
  return per_step * static_cast<double>(std::max<std::int64_t>(report.steps_in_epoch - report.step_in_epoch, 0));
}

std::string format_progress(const StepReport& report, int columns) {
  // In the order shown; those past kAlwaysShown are given up, last first, when the line is too wide.
  std::vector<std::string> parts = {
      "epoch " + std::to_string(report.epoch) + "/" + std::to_string(report.epochs),
      std::to_string(report.step_in_epoch) + "/" + std::to_string(report.steps_in_epoch),
      printf_string("loss %.4f", report.loss),
      printf_string("acc %.2f%%", 100 * report.accuracy),
      "eta " + format_duration(eta_seconds(report)),
      "mem " + format_size(report.allocated) + "/" + format_size(report.reserved),
      "peak " + format_size(report.peak),
      printf_string("%.0f img/s", report.images_per_sec),
  };
  if (report.loss_scale > 0)  // loss scaling: a skipped step trained nothing, so it is shown beside the loss
    parts.insert(parts.begin() + 4,
                 printf_string("scale %g", report.loss_scale) + " skipped " + std::to_string(report.skipped_steps));
  if (columns <= 0) return join(parts, 0, parts.size());
  const int limit = columns - 1;
  // The bar goes after the epoch and takes the room left, when there is room for a useful one.
  for (std::size_t shown = parts.size(); shown >= kAlwaysShown; --shown) {
    const std::string rest = join(parts, 1, shown);
    const int room = limit - static_cast<int>(parts[0].size() + rest.size()) - 4;  // two spaces, two brackets
    if (room >= kMinBar) return parts[0] + " " + bar(report, std::min(room, kMaxBar)) + " " + rest;
  }
  return join(parts, 0, kAlwaysShown).substr(0, static_cast<std::size_t>(std::max(limit, 0)));
}

Progress::Progress(std::ostream& out, bool terminal, int columns, Clock clock)
    : out_(out), terminal_(terminal), columns_(columns), clock_(clock ? std::move(clock) : Clock(steady_seconds)) {
  FRUGAL_CHECK_VALUE(columns > 0, "Progress: columns must be positive, got ", columns);
}

void Progress::step(const StepReport& report) {
  const double now = clock_();
  latest_ = report;
  const bool new_epoch = report.epoch != epoch_;
  if (new_epoch) {
    epoch_ = report.epoch;
    tenths_printed_ = 0;
    last_output_ = now;
  }
  if (terminal_) {
    if (new_epoch || !live_ || now - last_output_ >= kRedrawInterval) {
      draw_live(report);
      last_output_ = now;
    }
  } else if (plain_line_due(report, now)) {
    print_plain(report, now);
  }
}

void Progress::end_epoch(const StepReport& last, const std::string& summary) {
  if (terminal_) {
    draw_live(last);
    out_ << '\n';
    live_ = false;
  } else {
    out_ << format_progress(last, 0) << '\n';
  }
  if (!summary.empty()) out_ << summary << '\n';
  out_ << std::flush;
  epoch_ = -1;
}

void Progress::message(const std::string& line) {
  if (!terminal_ || !live_) {
    out_ << line << '\n' << std::flush;
    return;
  }
  out_ << '\r' << kClearToEnd << line << '\n';
  draw_live(latest_);
}

void Progress::draw_live(const StepReport& report) {
  out_ << '\r' << format_progress(report, columns_) << kClearToEnd << std::flush;
  live_ = true;
}

bool Progress::plain_line_due(const StepReport& report, double now) const {
  if (report.steps_in_epoch <= 0 || report.step_in_epoch >= report.steps_in_epoch) return false;  // end_epoch prints the last
  const double since = now - last_output_;
  const auto tenths = static_cast<int>(report.step_in_epoch * kPlainLinesPerEpoch / report.steps_in_epoch);
  return since >= kPlainMaxInterval || (tenths > tenths_printed_ && since >= kPlainMinInterval);
}

void Progress::print_plain(const StepReport& report, double now) {
  out_ << format_progress(report, 0) << '\n' << std::flush;
  tenths_printed_ = static_cast<int>(report.step_in_epoch * kPlainLinesPerEpoch / report.steps_in_epoch);
  last_output_ = now;
}

}  // namespace frugal::train
