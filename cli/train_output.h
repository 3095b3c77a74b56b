// What `frugal train` and `frugal eval` print and write: the end-of-run summary, the JSON documents,
// the bridge from the trainer's step reports to the progress display.
// Not here: the progress display itself (train/progress.h), the training (train/trainer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "train/batch_finder.h"
#include "train/planner.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace frugal::cli {

int terminal_columns();  // of the terminal on stdout; 80 when it cannot tell

train::StepReport step_report(const train::StepInfo& step);
// "epoch 1/1: loss 0.4321, train accuracy 84.12%, test accuracy 87.03% (loss 0.3611), 312 images/s"
std::string epoch_summary(const train::EpochInfo& epoch);
// Test accuracy, wall time, images/s, peak allocated and reserved, and peak bytes by tag; with --ddp
// each rank's peaks and communication time.
void print_summary(std::ostream& out, const train::TrainResult& result);
// "planned peak    12.00 MiB allocated (1.0000x measured/planned)": the planner held to account.
void print_planned_peak(std::ostream& out, const train::TrainResult& result, const train::MemoryPlan& plan);

// The --json document of a run: model, parameters, device, batch_size, steps, epochs, images_per_sec,
// final_loss, test_accuracy (null without a test split), test_loss, peak_allocated_bytes,
// peak_reserved_bytes, peak_bytes_by_tag {tag: bytes}, wall_seconds, seed, interrupted, checkpoint,
// leak (null, or the leak check's report: train/leak_check.h to_json), ranks (1 without --ddp), per_rank
// ([] without --ddp; else [{rank, peak_allocated_bytes, peak_reserved_bytes, peak_bytes_by_tag,
// communication_wait_seconds, communication_seconds}] in rank order).
nlohmann::ordered_json result_json(const train::TrainResult& result);
// accuracy, loss, samples, and per_class [{class, correct, total, accuracy}].
nlohmann::ordered_json eval_json(const train::EvalResult& result);
// {"budget_bytes", "budget_source", "usable_bytes", "cap", "cap_reason", "planned_batch", "planner_error",
//  "tried": [{"batch_size", "accum", "how": "planned"|"trial", "fits", "needed_bytes"}], "batch_size", "accum"}
// (needed_bytes: planned, the device the plan needs; a trial, the peak its two steps reserved)
nlohmann::ordered_json batch_search_json(const train::BatchChoice& choice);
// The document written atomically (core/mapped_file.h AtomicFile): a failure leaves no file.
void write_json_file(const std::string& path, const nlohmann::ordered_json& document);

}  // namespace frugal::cli
