// TrainOptions' names, checks and run identity (see options.h).
#include "train/options.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "models/registry.h"

namespace frugal::train {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "adamw8bit") return OptimizerKind::adamw8bit;
  if (name == "adafactor") return OptimizerKind::adafactor;
  FRUGAL_THROW(ValueError, "unknown optimizer '", name, "' (sgd, adamw, adamw8bit or adafactor)");
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "cosine") return ScheduleKind::cosine;
  if (name == "onecycle") return ScheduleKind::onecycle;
  FRUGAL_THROW(ValueError, "unknown schedule '", name, "' (constant, cosine or onecycle)");
}

std::string optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::adamw8bit: return "adamw8bit";
    case OptimizerKind::adafactor: return "adafactor";
  }
  return "";
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::cosine: return "cosine";
    case ScheduleKind::onecycle: return "onecycle";
  }
  return "";
}

void validate(const TrainOptions& o) {
  FRUGAL_CHECK_VALUE(o.epochs >= 1, "--epochs must be at least 1, got ", o.epochs);
  FRUGAL_CHECK_VALUE(!o.steps || *o.steps >= 1, "--steps must be at least 1, got ", o.steps.value_or(0));
  FRUGAL_CHECK_VALUE(o.batch_size >= 1, "--batch-size must be at least 1, got ", o.batch_size);
  FRUGAL_CHECK_VALUE(o.accum >= 1, "--accum must be at least 1, got ", o.accum);
  FRUGAL_CHECK_VALUE(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number, got ", o.lr);
  FRUGAL_CHECK_VALUE(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  FRUGAL_CHECK_VALUE(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "--wd must be >= 0, got ", o.weight_decay);
  FRUGAL_CHECK_VALUE(o.warmup >= 0 && o.warmup < 1, "--warmup is a fraction of all steps in [0, 1), got ", o.warmup);
  FRUGAL_CHECK_VALUE(o.label_smoothing >= 0 && o.label_smoothing <= 1, "--label-smoothing must be in [0, 1], got ",
                     o.label_smoothing);
  FRUGAL_CHECK_VALUE(o.image_size >= 8 && o.image_size <= 4096, "--image-size must be in [8, 4096], got ", o.image_size);
  FRUGAL_CHECK_VALUE(o.workers >= 0 && o.workers <= 64, "--workers must be in [0, 64], got ", o.workers);
  FRUGAL_CHECK_VALUE(!o.width || (*o.width > 0 && *o.width <= 4), "--width must be in (0, 4], got ", o.width.value_or(0));
  FRUGAL_CHECK_VALUE(!o.dropout || (*o.dropout >= 0 && *o.dropout < 1), "--dropout must be in [0, 1), got ",
                     o.dropout.value_or(0));
  FRUGAL_CHECK_VALUE(!o.num_classes || *o.num_classes >= 2, "--num-classes must be at least 2, got ",
                     o.num_classes.value_or(0));
  FRUGAL_CHECK_VALUE(!o.amp || *o.amp == DType::f16 || *o.amp == DType::bf16, "--amp must be f16 or bf16");
  FRUGAL_CHECK_VALUE(o.save_every >= 0, "--save-every must be >= 0, got ", o.save_every);
  // Each of these needs every gradient complete before any update (nn/optimizer_in_backward.h).
  if (o.optimizer_in_backward) {
    FRUGAL_CHECK_VALUE(o.accum == 1, "--optimizer-in-backward updates each weight inside backward, but with --accum ",
                       o.accum, " a gradient is complete only in the last micro-batch: use one or the other");
    FRUGAL_CHECK_VALUE(o.amp != DType::f16, "--optimizer-in-backward cannot run with --amp f16: its loss scaler checks "
                       "every gradient for overflow before any update (--amp bf16 needs no scaler)");
    FRUGAL_CHECK_VALUE(!o.ddp, "--optimizer-in-backward cannot run with --ddp: each gradient must be averaged over the "
                       "ranks before its update");
  }
  // The offloaded optimizer steps every parameter itself, after backward, on the whole parameters.
  if (o.offload_optimizer) {
    FRUGAL_CHECK_VALUE(!o.optimizer_in_backward, "--offload optimizer and --optimizer-in-backward are two places for "
                       "one update (the host after backward, the device inside it): use one or the other");
    FRUGAL_CHECK_VALUE(o.zero == 0, "--offload optimizer keeps whole parameters' state on the host; --zero ", o.zero,
                       " shards it over the ranks: use one or the other");
  }
  // Offloading moves feature maps whole; compressed ones are already a fraction of that, on the device.
  FRUGAL_CHECK_VALUE(!o.offload_activations || o.saving.compress == nn::SavedCompression::none,
                     "--offload activations moves saved feature maps to host memory whole; --compress-activations ",
                     nn::saved_compression_name(o.saving.compress), " keeps them smaller on the device: use one or the other");
  // ZeRO hands each rank's optimizer flat slices of the parameters; AdamW8bit's blocks and
  // Adafactor's rows and columns are shapes of whole parameters.
  FRUGAL_CHECK_VALUE(o.zero >= 0 && o.zero <= 3, "--zero must be 1, 2 or 3, got ", o.zero);
  FRUGAL_CHECK_VALUE(o.zero == 0 || o.optimizer == OptimizerKind::sgd || o.optimizer == OptimizerKind::adamw,
                     "--zero ", o.zero, " shards sgd's and adamw's state only, not --optimizer ", optimizer_name(o.optimizer));
  // ZeRO-2 and -3 free each gradient bucket once it is reduced: gradients cannot live in the buckets.
  FRUGAL_CHECK_VALUE(o.zero < 2 || !o.bucket_views, "--bucket-views keeps every gradient in its bucket; --zero ", o.zero,
                     " frees the buckets once reduced: use one or the other");
  FRUGAL_CHECK_VALUE(o.save_every == 0 || !o.save.empty(), "--save-every needs --save FILE");
  // --checkpoint-activations means every block; with a --checkpoint-blocks naming fewer, one of the
  // two is a mistake, and which one cannot be guessed.
  FRUGAL_CHECK_VALUE(!o.checkpoint_activations || o.checkpoint_blocks.empty() || o.checkpoint_blocks.is_all(),
                     "--checkpoint-activations checkpoints every block, but --checkpoint-blocks ",
                     o.checkpoint_blocks.str(), " names some: give one of the two");
  if (!o.checkpoint_blocks.empty()) models::check_checkpoint_blocks(o.model, o.checkpoint_blocks);
  FRUGAL_CHECK_VALUE(o.ranks >= 1 && o.ranks <= 65536, "the number of ranks must be in [1, 65536], got ", o.ranks);
  FRUGAL_CHECK_VALUE(o.ddp || o.ranks == 1, o.ranks, " ranks need --ddp");
  FRUGAL_CHECK_VALUE(o.ddp || (o.zero == 0 && !o.bucket_views), "--zero and --bucket-views need --ddp");
  FRUGAL_CHECK_VALUE(o.bucket_cap_bytes >= 1024, "--bucket-cap must be at least 1 KiB, got ", o.bucket_cap_bytes, " bytes");
  FRUGAL_CHECK_VALUE(std::isfinite(o.ddp_timeout) && o.ddp_timeout > 0, "--ddp-timeout must be a positive number of "
                     "seconds, got ", o.ddp_timeout);
}

// Keys are the flags' names, so a difference reads as the flag to change; the two that no one flag
// sets (ddp-ranks, activation-saving) identity_difference words as the flags that set them.
std::string run_identity_json(const TrainOptions& o) {
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["width"] = o.width ? nlohmann::ordered_json(*o.width) : nlohmann::ordered_json("default");
  j["dropout"] = o.dropout ? nlohmann::ordered_json(*o.dropout) : nlohmann::ordered_json("default");
  j["cifar-stem"] = o.cifar_stem;
  j["num-classes"] = o.num_classes ? nlohmann::ordered_json(*o.num_classes) : nlohmann::ordered_json("dataset");
  j["image-size"] = o.image_size;
  j["augment"] = o.augment;
  j["epochs"] = o.epochs;
  j["batch-size"] = o.batch_size;
  j["accum"] = o.accum;
  j["optimizer"] = optimizer_name(o.optimizer);
  j["lr"] = o.lr;
  j["momentum"] = o.momentum;
  j["wd"] = o.weight_decay;
  j["schedule"] = schedule_name(o.schedule);
  j["warmup"] = o.warmup;
  j["label-smoothing"] = o.label_smoothing;
  j["seed"] = o.seed;
  j["amp"] = o.amp ? dtype_name(*o.amp) : "off";
  // The ranks share each step's samples: another number of ranks is another batch. One rank is the
  // run without data parallelism, which has no key, so older checkpoints still match.
  if (o.ranks > 1) j["ddp-ranks"] = o.ranks;
  // Saving less changes the numbers by rounding (x-hat, compression); the standard graph has no key,
  // so older checkpoints still match.
  if (!o.saving.standard()) j["activation-saving"] = o.saving.str();
  return j.dump();
}

namespace {

// The two run identity keys that are not a flag's name: the number of ranks, which mpirun starts for
// a --ddp run, and the activation saving, which up to three flags set.
bool names_a_flag(const std::string& key) { return key != "ddp-ranks" && key != "activation-saving"; }

// How `key` = `value` reads on frugal train's command line: "--lr 0.5", "--ddp on 2 ranks",
// "--bn-from-output --compress-activations bf16" (for the saving "bn-from-output+bf16",
// ActivationSaving::str: its bn-from-output and bit-masks parts are flags, the compression is a value).
std::string as_flags(const std::string& key, const nlohmann::ordered_json& value) {
  if (key == "ddp-ranks") return "--ddp on " + value.dump() + " ranks";
  if (key == "activation-saving" && value.is_string()) {
    std::string flags;
    std::istringstream parts(value.get<std::string>());
    for (std::string part; std::getline(parts, part, '+');)
      flags += (flags.empty() ? "--" : " --") +
               (part == "bn-from-output" || part == "bit-masks" ? part : "compress-activations " + part);
    return flags;
  }
  return "--" + key + " " + value.dump();
}

}  // namespace

std::string identity_key_flags(const std::string& key) {
  if (key == "ddp-ranks") return "--ddp (ranks)";
  if (key == "activation-saving") return "--bn-from-output, --bit-masks, --compress-activations";
  return "--" + key;
}

std::string identity_difference(const std::string& ours, const std::string& theirs, const std::string& them) {
  const auto a = nlohmann::ordered_json::parse(ours);
  nlohmann::ordered_json b;
  try {
    b = nlohmann::ordered_json::parse(theirs);
  } catch (const nlohmann::json::exception&) {
    return them + "'s run options are not valid JSON";
  }
  for (const auto& [key, value] : a.items()) {
    if (!b.contains(key)) return as_flags(key, value) + " but " + them + " has none";
    if (b[key] != value)
      return as_flags(key, value) + " but " + them + " has " + (names_a_flag(key) ? b[key].dump() : as_flags(key, b[key]));
  }
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return them + " has " + as_flags(key, value) + ", this run has none";
  return "";
}

}  // namespace frugal::train
