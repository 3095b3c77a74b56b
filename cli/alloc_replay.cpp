// `frugal alloc-replay` (see alloc_replay.h): options to ReplayOptions, then the figures as a table
// or as JSON. Everything else is memory/alloc_trace.h and, for --training-trace, train/training_trace.h.
#include "cli/alloc_replay.h"

#include <CLI/CLI.hpp>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "memory/alloc_trace.h"
#include "train/training_trace.h"

namespace frugal::cli {

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitOom = 3;
// --training-trace bounds. The trace is recorded by training MobileNetV2 on this machine's CPU, so a
// batch must fit in its memory: 224x224 at batch 32 holds 1.7 GiB at its peak, and the peak grows
// with batch x resolution^2, so the largest batch at the largest resolution holds about 14 GiB.
// Steps past the first five repeat recorded ones (train/training_trace.cpp, Note [Recording the
// training trace]): a step is about 1,300 events, so 1000 steps are 1.3 million of them.
constexpr std::int64_t kMaxSteps = 1000, kMaxBatch = 128, kMinResolution = 32, kMaxResolution = 320;

std::size_t size_or_unlimited(const std::string& text, const char* option) {
  if (text == "none") return kUnlimited;
  try {
    return parse_size(text);
  } catch (const ValueError& error) {
    FRUGAL_THROW(ValueError, option, ": ", error.message());
  }
}

std::string size_text(std::size_t bytes) { return bytes == kUnlimited ? "none" : format_size(bytes); }

void print_result(const std::string& source, const Trace& trace, const ReplayOptions& options,
                  const ReplayResult& r) {
  std::cout << source << ": " << r.events << " of " << trace.events.size() << " events replayed ("
            << (options.direct ? "direct" : "caching") << " allocator, expandable segments "
            << (options.expandable ? "on" : "off") << ", max split " << size_text(options.max_split) << ", limit "
            << size_text(options.limit) << ")\n";
  if (trace.allocate_failures > 0)
    std::cout << "  (" << trace.allocate_failures << " allocate failures in the log were skipped)\n";
  const auto row = [](const char* name, const std::string& value, const std::string& note = "") {
    std::cout << "  " << std::left << std::setw(22) << name << std::right << std::setw(12) << value
              << (note.empty() ? "" : "   " + note) << "\n";
  };
  std::ostringstream ratio;
  if (r.peak_live_bytes > 0)
    ratio << std::fixed << std::setprecision(3)
          << static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(r.peak_live_bytes) << "x peak live";
  row("peak live", format_size(r.peak_live_bytes), "requested bytes alive at once: the ideal");
  row("peak allocated", format_size(r.peak_allocated_bytes), "blocks handed out (rounded)");
  row("peak reserved", format_size(r.peak_reserved_bytes), ratio.str());
  row("backing allocs/frees", std::to_string(r.backing_allocs) + " / " + std::to_string(r.backing_frees));
  row("alloc retries", std::to_string(r.alloc_retries));
  row("OOMs", std::to_string(r.num_ooms));
  row("final allocated", format_size(r.final_allocated_bytes));
  row("final reserved", format_size(r.final_reserved_bytes));
  std::ostringstream time;
  time << std::fixed << std::setprecision(1) << r.ns_per_op << " ns";
  row("time per event", time.str());
  if (r.oom)
    std::cout << "stopped at line " << r.oom->event << ": out of memory asking for " << format_size(r.oom->requested_bytes)
              << "\n  " << r.oom->message << "\n";
}

}  // namespace

AllocReplayCommand::AllocReplayCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("alloc-replay", "Replay an allocation trace on a simulated device and show what "
                                                  "the allocator reserved")) {
  command_->add_option("trace", trace_, "Trace file: frugal's '+ ID BYTES [STREAM] [TAG]' / '- ID' lines, or RMM's CSV log");
  command_->add_option("--limit", limit_, "Capacity of the simulated device, e.g. 512MiB, 2GiB (default none)");
  command_->add_option("--allocator", allocator_, "caching (default) or direct (every request to the device)")
      ->check(CLI::IsMember({"caching", "direct"}));
  command_->add_option("--max-split", max_split_, "Blocks this big or bigger are never split (a size, or none)");
  command_->add_option("--expandable", expandable_, "Expandable segments: on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  command_->add_flag("--json", json_, "Print the figures as one JSON object");
  command_->add_flag("--training-trace", training_trace_,
                     "Replay a MobileNetV2 training trace instead of a file, recorded by training the model on "
                     "the CPU (about 30 s of CPU at the defaults)");
  command_->add_option("--batch", batch_, "Batch size of --training-trace (default 32)")->check(between(1, kMaxBatch));
  command_->add_option("--steps", steps_, "Steps of --training-trace (default 8)")->check(between(1, kMaxSteps));
  command_->add_option("--resolution", resolution_, "Image side of --training-trace (default 224)")
      ->check(between(kMinResolution, kMaxResolution));
}

int AllocReplayCommand::run() const {
  ReplayOptions options;
  Trace trace;
  std::string source = trace_;
  try {
    FRUGAL_CHECK_VALUE(training_trace_ != !trace_.empty(), "name a trace file or --training-trace (one of them)");
    FRUGAL_CHECK_VALUE(training_trace_ || (command_->count("--batch") == 0 && command_->count("--steps") == 0 &&
                                           command_->count("--resolution") == 0),
                       "--batch, --steps and --resolution describe --training-trace");
    options.limit = size_or_unlimited(limit_, "--limit");
    options.max_split = size_or_unlimited(max_split_, "--max-split");
    options.direct = allocator_ == "direct";
    options.expandable = expandable_ == "on";
    if (training_trace_) {
      source = "training-trace";
      trace = parse_trace_text(
          train::record_training_trace({.batch_size = batch_, .steps = steps_, .resolution = resolution_}), source);
    } else {
      trace = read_trace_file(trace_);
    }
  } catch (const ValueError& error) {
    std::cerr << "frugal alloc-replay: " << error.message() << "\n";
    return kExitUsage;
  }
  const ReplayResult result = replay(trace, options);
  if (json_)
    std::cout << to_json(result).dump() << "\n";
  else
    print_result(source, trace, options, result);
  return result.oom ? kExitOom : 0;
}

}  // namespace frugal::cli
