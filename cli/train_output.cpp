// Summaries and JSON of `frugal train` and `frugal eval` (see train_output.h).
#include "cli/train_output.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/mapped_file.h"

namespace frugal::cli {

namespace {

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * fraction);
  return text;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace

int terminal_columns() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col >= 40) return size.ws_col;
  return 80;
}

train::StepReport step_report(const train::StepInfo& s) {
  train::StepReport r;
  r.epoch = s.epoch + 1;  // the display counts from 1
  r.epochs = s.epochs;
  r.step_in_epoch = s.step_in_epoch;
  r.steps_in_epoch = s.steps_in_epoch;
  r.global_step = s.global_step;
  r.loss = s.loss;
  r.accuracy = s.accuracy;
  r.images_per_sec = s.images_per_sec;
  r.allocated = s.allocated;
  r.reserved = s.reserved;
  r.peak = s.peak_allocated;
  r.elapsed_epoch_seconds = s.epoch_seconds;
  r.loss_scale = s.loss_scale;
  r.skipped_steps = s.skipped_steps;
  return r;
}

std::string epoch_summary(const train::EpochInfo& e) {
  std::string line = "epoch " + std::to_string(e.last.epoch + 1) + "/" + std::to_string(e.last.epochs) + ": loss " +
                     fixed(e.last.loss, 4) + ", train accuracy " + percent(e.last.accuracy);
  if (e.test) line += ", test accuracy " + percent(e.test->accuracy) + " (loss " + fixed(e.test->loss, 4) + ")";
  line += ", " + fixed(e.last.images_per_sec, 0) + " images/s, " + fixed(e.last.epoch_seconds, 1) + " s";
  return line;
}

namespace {
std::size_t tag_peak(const train::RankReport& r, MemoryTag tag) { return r.peak_bytes_by_tag[static_cast<std::size_t>(tag)]; }

// With --ddp: each rank's peaks (activations about 1/N of one process on the whole batch; parameters,
// gradients and, without ZeRO-1, optimizer state replicated) and how long it waited on communication.
void print_ranks(std::ostream& out, const train::TrainResult& r) {
  if (r.per_rank.empty()) return;
  out << "ranks           " << r.ranks << " (batch " << r.batch_size << " per rank, "
      << r.batch_size * r.ranks * r.accum << " samples per step)\n";
  out << "rank   peak allocated   activation        param         grad    optimizer   comm wait / in flight\n";
  for (const train::RankReport& rank : r.per_rank) {
    char line[200];
    std::snprintf(line, sizeof line, "%4d %16s %12s %12s %12s %12s   %.2f s / %.2f s\n", rank.rank,
                  format_size(rank.peak_allocated_bytes).c_str(), format_size(tag_peak(rank, MemoryTag::activation)).c_str(),
                  format_size(tag_peak(rank, MemoryTag::param)).c_str(), format_size(tag_peak(rank, MemoryTag::grad)).c_str(),
                  format_size(tag_peak(rank, MemoryTag::optimizer)).c_str(), rank.communication_wait_seconds,
                  rank.communication_seconds);
    out << line;
  }
}

nlohmann::ordered_json by_tag_json(const std::array<std::size_t, kNumMemoryTags>& bytes) {
  nlohmann::ordered_json by_tag = nlohmann::ordered_json::object();
  for (int t = 0; t < kNumMemoryTags; ++t)
    by_tag[std::string(memory_tag_name(static_cast<MemoryTag>(t)))] = bytes[static_cast<std::size_t>(t)];
  return by_tag;
}

nlohmann::ordered_json ranks_json(const train::TrainResult& r) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const train::RankReport& rank : r.per_rank)
    ranks.push_back({{"rank", rank.rank},
                     {"peak_allocated_bytes", rank.peak_allocated_bytes},
                     {"peak_reserved_bytes", rank.peak_reserved_bytes},
                     {"peak_bytes_by_tag", by_tag_json(rank.peak_bytes_by_tag)},
                     {"communication_wait_seconds", rank.communication_wait_seconds},
                     {"communication_seconds", rank.communication_seconds}});
  return ranks;
}
}  // namespace

void print_summary(std::ostream& out, const train::TrainResult& r) {
  out << "\n" << r.model << " (" << r.parameters << " parameters) on " << r.device << ", batch " << r.batch_size
      << (r.accum > 1 ? " x " + std::to_string(r.accum) + " accumulated" : "") << ", " << r.steps << " steps" << (r.stopped_early ? " (stopped early)" : "") << "\n";
  if (r.test) out << "test accuracy   " << percent(r.test->accuracy) << " (" << r.test->samples << " images)\n";
  if (r.steps_taken > 0)
    out << "final loss      " << fixed(r.final_loss, 4) << " (training, mean of this run's samples in its last epoch)\n";
  else
    out << "final loss      none (this run took no step)\n";
  if (r.loss_scale)
    out << "loss scaling    scale " << *r.loss_scale << ", " << r.skipped_steps << " of " << r.steps_taken
        << " steps skipped (inf or NaN gradients)\n";
  out << "wall time       " << fixed(r.wall_seconds, 1) << " s, " << fixed(r.images_per_sec, 1)
      << " training images/s\n";
  out << "peak memory     " << format_size(r.peak_allocated_bytes) << " allocated, " << format_size(r.peak_reserved_bytes)
      << " reserved\n";
  out << "peak by tag    ";
  for (int t = 0; t < kNumMemoryTags; ++t)
    out << " " << memory_tag_name(static_cast<MemoryTag>(t)) << " "
        << format_size(r.peak_bytes_by_tag[static_cast<std::size_t>(t)]) << (t + 1 < kNumMemoryTags ? "," : "\n");
  if (r.peak_pinned_host_bytes > 0)
    out << "pinned host     " << format_size(r.peak_pinned_host_bytes)
        << " allocated at the peak (outside the device: what is offloaded, the loader's staging)\n";
  if (!r.checkpoint.empty()) out << "checkpoint      " << r.checkpoint << "\n";
  print_ranks(out, r);
  out << std::flush;
}

void print_planned_peak(std::ostream& out, const train::TrainResult& r, const train::MemoryPlan& plan) {
  out << "planned peak    " << format_size(static_cast<std::size_t>(plan.peak_bytes)) << " allocated ("
      << fixed(static_cast<double>(r.peak_allocated_bytes) / static_cast<double>(plan.peak_bytes), 4) << "x measured/planned)\n"
      << std::flush;
}

nlohmann::ordered_json batch_search_json(const train::BatchChoice& c) {
  nlohmann::ordered_json tried = nlohmann::ordered_json::array();
  for (const train::BatchTrial& t : c.tried)
    tried.push_back({{"batch_size", t.batch_size},
                     {"accum", t.accum},
                     {"how", t.planned ? "planned" : "trial"},
                     {"fits", t.fits},
                     {"needed_bytes", t.needed_bytes}});
  return {{"budget_bytes", c.budget_bytes},
          {"budget_source", c.budget_source},
          {"usable_bytes", c.usable_bytes},
          {"cap", c.cap},
          {"cap_reason", c.cap_reason},
          {"planned_batch", c.planned_batch},
          {"planner_error", c.planner_error},
          {"tried", tried},
          {"batch_size", c.batch_size},
          {"accum", c.accum}};
}

nlohmann::ordered_json result_json(const train::TrainResult& r) {
  const nlohmann::ordered_json by_tag = by_tag_json(r.peak_bytes_by_tag);
  return {{"model", r.model},
          {"parameters", r.parameters},
          {"device", r.device},
          {"batch_size", r.batch_size},
          {"accum", r.accum},
          {"steps", r.steps},
          {"steps_taken", r.steps_taken},
          {"epochs", r.epochs},
          {"images_per_sec", r.images_per_sec},
          {"final_loss", r.steps_taken > 0 ? nlohmann::ordered_json(r.final_loss) : nlohmann::ordered_json(nullptr)},
          {"grad_scaler", r.loss_scale ? nlohmann::ordered_json{{"scale", *r.loss_scale}, {"skipped_steps", r.skipped_steps}}
                                       : nlohmann::ordered_json(nullptr)},
          {"test_accuracy", r.test ? nlohmann::ordered_json(r.test->accuracy) : nlohmann::ordered_json(nullptr)},
          {"test_loss", r.test ? nlohmann::ordered_json(r.test->loss) : nlohmann::ordered_json(nullptr)},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"peak_reserved_bytes", r.peak_reserved_bytes},
          {"peak_pinned_host_bytes", r.peak_pinned_host_bytes},
          {"peak_bytes_by_tag", by_tag},
          {"wall_seconds", r.wall_seconds},
          {"seed", r.seed},
          {"interrupted", r.interrupted},
          {"checkpoint", r.checkpoint},
          {"leak", r.leak ? nlohmann::ordered_json(train::to_json(*r.leak)) : nlohmann::ordered_json(nullptr)},
          {"ranks", r.ranks},
          {"per_rank", ranks_json(r)}};
}

nlohmann::ordered_json eval_json(const train::EvalResult& r) {
  nlohmann::ordered_json classes = nlohmann::ordered_json::array();
  for (std::size_t c = 0; c < r.class_total.size(); ++c) {
    const double total = static_cast<double>(r.class_total[c]);
    classes.push_back({{"class", c},
                       {"correct", r.class_correct[c]},
                       {"total", r.class_total[c]},
                       {"accuracy", total > 0 ? nlohmann::ordered_json(static_cast<double>(r.class_correct[c]) / total)
                                              : nlohmann::ordered_json(nullptr)}});
  }
  return {{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}, {"per_class", classes}};
}

void write_json_file(const std::string& path, const nlohmann::ordered_json& document) {
  const std::string text = document.dump(2) + "\n";
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace frugal::cli
