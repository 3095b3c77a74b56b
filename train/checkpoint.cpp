// save_checkpoint, load_checkpoint (see checkpoint.h).
#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/safetensors.h"

namespace frugal::train {

namespace {

constexpr const char* kFormat = "frugal-checkpoint";
constexpr const char* kVersion = "1";
constexpr const char* kParts[] = {"model.", "optimizer.", "scaler.", "schedule."};

void add_part(nn::StateDict& out, const std::string& prefix, const nn::StateDict& part) {
  for (const auto& [name, tensor] : part) out.emplace_back(prefix + name, tensor);
}

std::string position_json(const TrainingPosition& p) {
  // Seeds and offsets are 64-bit: kept as decimal strings, which JSON readers do not round.
  return nlohmann::ordered_json{{"epoch", p.epoch},
                                {"batch", p.batch},
                                {"global_step", p.global_step},
                                {"generator_seed", std::to_string(p.generator.seed)},
                                {"generator_offset", std::to_string(p.generator.offset)},
                                {"loss_sum", p.loss_sum},
                                {"correct", p.correct},
                                {"samples", p.samples}}
      .dump();
}

std::uint64_t parse_u64(const nlohmann::json& j, const char* key) {
  const std::string text = j.at(key).get<std::string>();
  std::size_t used = 0;
  const unsigned long long value = std::stoull(text, &used);
  if (used != text.size()) throw std::invalid_argument(key);
  return value;
}

TrainingPosition parse_position(const std::string& path, const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    TrainingPosition p;
    p.epoch = j.at("epoch").get<std::int64_t>();
    p.batch = j.at("batch").get<std::int64_t>();
    p.global_step = j.at("global_step").get<std::int64_t>();
    p.generator = {parse_u64(j, "generator_seed"), parse_u64(j, "generator_offset")};
    p.loss_sum = j.at("loss_sum").get<double>();
    p.correct = j.at("correct").get<std::int64_t>();
    p.samples = j.at("samples").get<std::int64_t>();
    FRUGAL_CHECK_VALUE(p.epoch >= 0 && p.batch >= 0 && p.global_step >= 0 && p.samples >= 0, path,
                       ": checkpoint position has a negative count: ", text);
    return p;
  } catch (const nlohmann::json::exception& e) {
    FRUGAL_THROW(ValueError, path, ": checkpoint position is damaged (", e.what(), ")");
  } catch (const std::logic_error&) {  // stoull: not a number, out of range
    FRUGAL_THROW(ValueError, path, ": checkpoint position has a bad generator state: ", text);
  }
}

const std::string* find(const nn::Metadata& metadata, const std::string& key) {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  nn::StateDict tensors;
  add_part(tensors, kParts[0], c.model);
  add_part(tensors, kParts[1], c.optimizer);
  add_part(tensors, kParts[2], c.scaler);
  add_part(tensors, kParts[3], c.schedule);
  nn::write_safetensors(path, tensors,
                        {{"format", kFormat}, {"version", kVersion}, {"position", position_json(c.position)},
                         {"run", c.run_identity}});
}

bool is_checkpoint(const std::string& path) {
  const nn::SafetensorsHeader header = nn::read_safetensors_header(path);
  const std::string* format = find(header.metadata, "format");
  return format && *format == kFormat;
}

Checkpoint load_checkpoint(const std::string& path) {
  nn::SafetensorsFile file = nn::read_safetensors(path);
  const std::string* format = find(file.metadata, "format");
  FRUGAL_CHECK_VALUE(format && *format == kFormat, path,
                     ": not a frugal checkpoint (no __metadata__ format \"frugal-checkpoint\"; a plain state dict "
                     "can be given to frugal eval --weights, not to --resume)");
  const std::string* version = find(file.metadata, "version");
  FRUGAL_CHECK_VALUE(version && *version == kVersion, path, ": checkpoint version ", version ? *version : "(none)",
                     ", this frugal reads version ", kVersion);
  const std::string* position = find(file.metadata, "position");
  const std::string* run = find(file.metadata, "run");
  FRUGAL_CHECK_VALUE(position && run, path, ": checkpoint metadata lacks ", position ? "run" : "position");
  Checkpoint c;
  c.position = parse_position(path, *position);
  c.run_identity = *run;
  nn::StateDict* parts[] = {&c.model, &c.optimizer, &c.scaler, &c.schedule};
  for (auto& [name, tensor] : file.tensors) {
    bool placed = false;
    for (std::size_t i = 0; i < std::size(kParts) && !placed; ++i) {
      const std::string prefix = kParts[i];
      if (name.rfind(prefix, 0) == 0) {
        parts[i]->emplace_back(name.substr(prefix.size()), std::move(tensor));
        placed = true;
      }
    }
    FRUGAL_CHECK_VALUE(placed, path, ": checkpoint tensor '", name,
                       "' belongs to no part (model., optimizer., scaler., schedule.)");
  }
  return c;
}

}  // namespace frugal::train
