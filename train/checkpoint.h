// A training checkpoint: everything a run needs to continue exactly where it stopped, in one
// safetensors file (nn/safetensors.h) that any safetensors reader can list.
//   tensors   "model.NAME"      the model's state dict (parameters and buffers)
//             "optimizer.KEY"   Optimizer::state_dict (moments, step counts, lrs)
//             "scaler.KEY"      GradScaler::state_dict (empty unless f16 autocast)
//             "schedule.KEY"    LRScheduler::state_dict
//   metadata  "format": "frugal-checkpoint", "version": "2", "position": the TrainingPosition as
//             JSON, "run": run_identity_json of the options that made it, "data": the DataIdentity
//             of the training split, "crc32": every tensor's CRC-32 by name, "metadata_crc32": the
//             CRC-32 of all of the above (metadata_crc).
//
// Note [What a checkpoint guarantees]
// - Whole or absent: written through AtomicFile (temporary file, fsync, rename, fsync of the folder),
//   so a crash, a full disk or SIGKILL while saving leaves the previous checkpoint in place.
// - Written only if it loads: the bytes are read back from the temporary file with load_checkpoint's
//   own checks before they replace anything; numbers JSON cannot hold (a NaN loss sum) are stored as
//   text that reads back bit for bit.
// - Every byte checked on load: each tensor's against the CRC-32 recorded when it was written, the
//   metadata's against its own, so a flipped bit is an error naming the tensor (or the metadata),
//   never a model that silently trains on garbage, nor a position that silently moves.
// - Finite: the weights and optimizer state of a diverged run are never saved (train/trainer.cpp),
//   and a checkpoint holding a NaN or an infinity is refused by --resume and eval --weights unless
//   --allow-nonfinite (first_nonfinite).
// - Its fields agree with each other: the schedule has taken global_step steps, no optimizer state
//   has taken more, the position's counts are in range (checked on load), and the position is one the
//   run's epochs can reach (checked on resume, which also needs the data: train/trainer.cpp).
// - It names its run and its data: a resume with other flags that change the arithmetic, or on other
//   data (another size or fingerprint), is refused with what differs.
// Not here: when checkpoints are taken (train/trainer.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/random.h"
#include "data/dataset.h"
#include "nn/safetensors.h"
#include "nn/state_dict.h"

namespace frugal::train {

// Where a run stands between two optimizer steps.
struct TrainingPosition {
  std::int64_t epoch = 0;        // the epoch in progress, from 0
  std::int64_t batch = 0;        // loader batches of that epoch already trained on
  std::int64_t global_step = 0;  // optimizer steps since the start of training
  GeneratorState generator{};    // the default generator's state (dropout draws from it)
  // The epoch's running sums, so a resumed epoch reports the same loss and accuracy.
  double loss_sum = 0.0;         // sum over trained samples of their loss
  std::int64_t correct = 0;      // trained samples whose argmax was their label
  std::int64_t samples = 0;
};

// Which data a run trained on: its training split's size and a fingerprint of some of its samples,
// so a resume on other data is caught without reading the whole split.
struct DataIdentity {
  std::int64_t samples = 0;
  std::string fingerprint;  // 8 hex digits: CRC-32 of kFingerprintSamples samples' bytes and labels
  bool operator==(const DataIdentity&) const = default;
};
inline constexpr std::int64_t kFingerprintSamples = 16;  // evenly spaced: first, ..., last
DataIdentity data_identity(const data::Dataset& dataset);

struct Checkpoint {
  nn::StateDict model, optimizer, scaler, schedule;
  TrainingPosition position;
  std::string run_identity;  // run_identity_json (train/options.h)
  DataIdentity data;
};

// Atomic, and only if the file written loads back (Note [What a checkpoint guarantees]): on any
// error nothing new is left under `path` and a previous file there is untouched. ValueError when
// the checkpoint is inconsistent in itself (the schedule's step is not the position's, ...).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// FileError if it cannot be read; ValueError of one line naming `path` if it is not a frugal
// checkpoint (a plain state dict, say), a tensor's bytes do not match their CRC-32, its metadata is
// damaged, or its fields disagree with each other.
Checkpoint load_checkpoint(const std::string& path);
// The CRC-32 a checkpoint records over its metadata ("metadata_crc32": format, version, position,
// run, data and the tensors' CRC table); ValueError naming `source` when one of them is missing. For
// a tool (or a test) that edits a checkpoint's metadata on purpose and must record it anew.
std::string metadata_crc(const nn::Metadata& metadata, const std::string& source);
// The same checks on a whole file held in memory (the fuzz target's entry point); `source` names it.
Checkpoint parse_checkpoint(std::span<const std::uint8_t> bytes, const std::string& source);

// The name of the first floating tensor of `dict` (then of `more`) holding a NaN or an infinity; ""
// when all are finite.
std::string first_nonfinite(const nn::StateDict& dict, const nn::StateDict& more = {});
// Whether the safetensors file at `path` says it is a frugal checkpoint (reads only the header).
bool is_checkpoint(const std::string& path);

}  // namespace frugal::train
