// save_checkpoint, load_checkpoint (see checkpoint.h). Loading is one pipeline for a file and for
// bytes in memory: the safetensors checks, the format and version, every tensor's CRC-32, the
// metadata, then the fields against each other. Saving builds the metadata, writes, and loads the
// written bytes back through that same pipeline before they replace anything.
#include "train/checkpoint.h"

#include <zlib.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/reduce.h"
#include "nn/safetensors.h"

namespace frugal::train {

namespace {

constexpr const char* kFormat = "frugal-checkpoint";
constexpr const char* kVersion = "2";  // 2: CRC-32 per tensor, the data's identity, loss_sum as text
constexpr const char* kParts[] = {"model.", "optimizer.", "scaler.", "schedule."};

// The metadata keys a checkpoint writes, in order; "metadata_crc32" follows them: the CRC-32 of
// their values, each ended by a NUL byte, so a flipped bit in the position (a count, the
// generator's state) is caught as surely as one in a tensor.
constexpr const char* kMetadataKeys[] = {"format", "version", "position", "run", "data", "crc32"};

void add_part(nn::StateDict& out, const std::string& prefix, const nn::StateDict& part) {
  for (const auto& [name, tensor] : part) out.emplace_back(prefix + name, tensor);
}

std::string hex32(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08" PRIx32, value);
  return text;
}

std::uint32_t crc32_of(std::uint32_t crc, const void* bytes, std::size_t count) {
  const auto* next = static_cast<const Bytef*>(bytes);
  while (count > 0) {  // zlib takes a 32-bit length
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(count, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, next, chunk));
    next += chunk, count -= chunk;
  }
  return crc;
}

// CRC-32 of a tensor's bytes as safetensors stores them: C order, little-endian (this machine's).
std::string tensor_crc(const Tensor& tensor) {
  const Tensor bytes = tensor.to(Device::cpu()).contiguous();
  return hex32(crc32_of(0, bytes.data_ptr(), bytes.nbytes()));
}

// A double as text that reads back bit for bit, NaN and infinities included (JSON has no NaN: a
// number would be written as null and the checkpoint would not load).
std::string exact_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

double parse_exact(const std::string& text, const char* key) {
  if (text == "nan") return std::nan("");
  if (text == "inf") return HUGE_VAL;
  if (text == "-inf") return -HUGE_VAL;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) throw std::invalid_argument(key);
  return value;
}

// A JSON library error as a message shows it: what was wrong, without "[json.exception...] ".
std::string json_error(const nlohmann::json::exception& e) {
  const std::string_view what = e.what();
  const auto end = what.find("] ");
  return printable(end == std::string_view::npos ? what : what.substr(end + 2), 120);
}

// A count held in a double, as a count: 4611686018427387904, not 4.61169e+18.
std::string count_text(double value) {
  return std::isfinite(value) && std::abs(value) < 9e18 ? std::to_string(static_cast<std::int64_t>(value))
                                                         : exact_text(value);
}

std::string position_json(const TrainingPosition& p) {
  // Seeds and offsets are 64-bit: kept as decimal strings, which JSON readers do not round.
  return nlohmann::ordered_json{{"epoch", p.epoch},
                                {"batch", p.batch},
                                {"global_step", p.global_step},
                                {"generator_seed", std::to_string(p.generator.seed)},
                                {"generator_offset", std::to_string(p.generator.offset)},
                                {"loss_sum", exact_text(p.loss_sum)},
                                {"correct", p.correct},
                                {"samples", p.samples}}
      .dump();
}

std::uint64_t parse_u64(const nlohmann::json& j, const char* key) {
  const std::string text = j.at(key).get<std::string>();
  std::size_t used = 0;
  const unsigned long long value = std::stoull(text, &used);
  if (used != text.size() || text.starts_with('-')) throw std::invalid_argument(key);
  return value;
}

// A whole number of the JSON object (3.5 or "3" is not one: the JSON library would convert them).
std::int64_t integer(const nlohmann::json& j, const char* key) {
  const nlohmann::json& value = j.at(key);
  if (!value.is_number_integer()) throw std::invalid_argument(key);
  return value.get<std::int64_t>();
}

TrainingPosition parse_position(const std::string& source, const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    TrainingPosition p;
    p.epoch = integer(j, "epoch");
    p.batch = integer(j, "batch");
    p.global_step = integer(j, "global_step");
    p.generator = {parse_u64(j, "generator_seed"), parse_u64(j, "generator_offset")};
    p.loss_sum = parse_exact(j.at("loss_sum").get<std::string>(), "loss_sum");
    p.correct = integer(j, "correct");
    p.samples = integer(j, "samples");
    FRUGAL_CHECK_VALUE(p.epoch >= 0 && p.batch >= 0 && p.global_step >= 0 && p.samples >= 0 && p.correct >= 0, source,
                       ": checkpoint position has a negative count: ", printable(text, 120));
    FRUGAL_CHECK_VALUE(p.correct <= p.samples, source, ": checkpoint position has ", p.correct, " correct of ",
                       p.samples, " samples");
    return p;
  } catch (const nlohmann::json::exception& e) {
    FRUGAL_THROW(ValueError, source, ": checkpoint position is damaged (", json_error(e), ")");
  } catch (const std::logic_error&) {  // stoull, parse_exact: not a number, out of range
    FRUGAL_THROW(ValueError, source, ": checkpoint position has a bad number: ", printable(text, 120));
  }
}

std::string data_json(const DataIdentity& d) {
  return nlohmann::ordered_json{{"samples", d.samples}, {"fingerprint", d.fingerprint}}.dump();
}

DataIdentity parse_data(const std::string& source, const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.at("samples").is_number_integer()) FRUGAL_THROW(ValueError, source, ": checkpoint data identity is damaged: ", printable(text, 120));
    DataIdentity d{j.at("samples").get<std::int64_t>(), j.at("fingerprint").get<std::string>()};
    FRUGAL_CHECK_VALUE(d.samples >= 0 && d.fingerprint.size() == 8, source, ": checkpoint data identity is damaged: ",
                       printable(text, 120));
    return d;
  } catch (const nlohmann::json::exception& e) {
    FRUGAL_THROW(ValueError, source, ": checkpoint data identity is damaged (", json_error(e), ")");
  }
}

const std::string* find(const nn::Metadata& metadata, const std::string& key) {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const std::string& required(const nn::Metadata& metadata, const std::string& key, const std::string& source) {
  const std::string* value = find(metadata, key);
  FRUGAL_CHECK_VALUE(value != nullptr, source, ": checkpoint metadata lacks \"", key, "\"");
  return *value;
}

// Every tensor's bytes against the CRC-32 recorded for it, and no name recorded without a tensor.
void check_crcs(const nn::SafetensorsFile& file, const std::string& text, const std::string& source) {
  std::map<std::string, std::string> recorded;
  try {
    recorded = nlohmann::json::parse(text).get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    FRUGAL_THROW(ValueError, source, ": checkpoint CRC-32 table is damaged (", json_error(e), ")");
  }
  for (const auto& [name, tensor] : file.tensors) {
    const auto it = recorded.find(name);
    FRUGAL_CHECK_VALUE(it != recorded.end(), source, ": tensor '", printable(name), "' has no recorded CRC-32 (damaged header?)");
    const std::string actual = tensor_crc(tensor);
    FRUGAL_CHECK_VALUE(actual == it->second, source, ": tensor '", printable(name), "' is damaged: its bytes' CRC-32 is ",
                       actual, ", the checkpoint recorded ", printable(it->second, 40));
    recorded.erase(it);
  }
  FRUGAL_CHECK_VALUE(recorded.empty(), source, ": the CRC-32 table names a tensor '", printable(recorded.begin()->first),
                     "' the file does not hold");
}

// The one number of a 0-dim tensor of a part, if the part has it.
std::optional<double> scalar(const nn::StateDict& part, const std::string& key) {
  for (const auto& [name, tensor] : part)
    if (name == key && tensor.numel() == 1) return tensor.to(Device::cpu()).to(DType::f64).item<double>();
  return std::nullopt;
}

// The fields that must agree with each other whatever the run (resume_from checks those that need
// the data): the schedule has taken exactly global_step steps, each optimizer state at most that
// many, and the loss scale is a positive finite number.
void check_consistent(const Checkpoint& c, const std::string& source) {
  const std::int64_t steps = c.position.global_step;
  if (const auto last = scalar(c.schedule, "last_epoch"))
    FRUGAL_CHECK_VALUE(*last == static_cast<double>(steps), source, ": the schedule has taken ", count_text(*last),
                       " steps but the position says ", steps, " (fields disagree: damaged or edited)");
  for (const auto& [name, tensor] : c.optimizer) {
    if (!name.ends_with(".step")) continue;
    const double taken = scalar(c.optimizer, name).value_or(-1);
    FRUGAL_CHECK_VALUE(taken >= 1 && taken <= static_cast<double>(steps), source, ": optimizer '", printable(name), "' is ",
                       count_text(taken),
                       " but the position says ", steps, " steps were taken (fields disagree: damaged or edited)");
  }
  // 0 is a scale a run can reach (--allow-nonfinite under f16: halved at every NaN step until f32
  // underflows); GradScaler refuses it on resume, with its own message.
  if (const auto scale = scalar(c.scaler, "scale"))
    FRUGAL_CHECK_VALUE(std::isfinite(*scale) && *scale >= 0, source, ": the loss scale is ", *scale);
}

}  // namespace

std::string metadata_crc(const nn::Metadata& metadata, const std::string& source) {
  std::uint32_t crc = 0;
  for (const char* key : kMetadataKeys) {
    const std::string& value = required(metadata, key, source);
    crc = crc32_of(crc, value.c_str(), value.size() + 1);  // with its NUL: "ab","c" differs from "a","bc"
  }
  return hex32(crc);
}

namespace {

Checkpoint from_file(nn::SafetensorsFile file, const std::string& source) {
  const std::string* format = find(file.metadata, "format");
  FRUGAL_CHECK_VALUE(format && *format == kFormat, source,
                     ": not a frugal checkpoint (no __metadata__ format \"frugal-checkpoint\"; a plain state dict "
                     "can be given to frugal eval --weights, not to --resume)");
  const std::string* version = find(file.metadata, "version");
  FRUGAL_CHECK_VALUE(version && *version == kVersion, source, ": checkpoint version ", version ? printable(*version, 40) : "(none)",
                     ", this frugal reads version ", kVersion);
  const std::string actual = metadata_crc(file.metadata, source);
  const std::string& recorded = required(file.metadata, "metadata_crc32", source);
  FRUGAL_CHECK_VALUE(actual == recorded, source, ": the checkpoint's metadata is damaged: its CRC-32 is ", actual,
                     ", the checkpoint recorded ", printable(recorded, 40));
  check_crcs(file, required(file.metadata, "crc32", source), source);
  Checkpoint c;
  c.position = parse_position(source, required(file.metadata, "position", source));
  c.run_identity = required(file.metadata, "run", source);
  c.data = parse_data(source, required(file.metadata, "data", source));
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
    FRUGAL_CHECK_VALUE(placed, source, ": checkpoint tensor '", printable(name),
                       "' belongs to no part (model., optimizer., scaler., schedule.)");
  }
  check_consistent(c, source);
  return c;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

DataIdentity data_identity(const data::Dataset& dataset) {
  DataIdentity identity{dataset.size(), {}};
  std::uint32_t crc = 0;
  const std::int64_t n = dataset.size();
  for (std::int64_t k = 0; k < std::min(n, kFingerprintSamples); ++k) {
    const std::int64_t index = n <= kFingerprintSamples ? k : k * (n - 1) / (kFingerprintSamples - 1);
    const data::Sample sample = dataset.get(index);
    const Tensor input = sample.input.contiguous();
    crc = crc32_of(crc, input.data_ptr(), input.nbytes());
    crc = crc32_of(crc, &sample.label, sizeof sample.label);
  }
  identity.fingerprint = hex32(crc);
  return identity;
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  check_consistent(c, path);
  nn::StateDict tensors;
  add_part(tensors, kParts[0], c.model);
  add_part(tensors, kParts[1], c.optimizer);
  add_part(tensors, kParts[2], c.scaler);
  add_part(tensors, kParts[3], c.schedule);
  nlohmann::ordered_json crcs = nlohmann::ordered_json::object();
  for (const auto& [name, tensor] : tensors) crcs[name] = tensor_crc(tensor);
  nn::Metadata metadata = {{"format", kFormat},          {"version", kVersion},
                           {"position", position_json(c.position)}, {"run", c.run_identity},
                           {"data", data_json(c.data)},  {"crc32", crcs.dump()}};
  metadata.emplace_back("metadata_crc32", metadata_crc(metadata, path));
  nn::write_safetensors(path, tensors, metadata, [&](const std::string& written) {
    try {
      const Checkpoint back = from_file(nn::read_safetensors(written), path);
      const TrainingPosition& p = back.position;
      FRUGAL_CHECK(p.epoch == c.position.epoch && p.batch == c.position.batch && p.global_step == c.position.global_step &&
                       p.generator == c.position.generator && same_bits(p.loss_sum, c.position.loss_sum) &&
                       p.correct == c.position.correct && p.samples == c.position.samples && back.data == c.data,
                   "the position read back differs from the one written");
    } catch (const Error& e) {
      FRUGAL_THROW(Error, path, ": not saved, the checkpoint written does not load back (", e.message(),
                   "); a previous file there is untouched");
    }
  });
}

// The sum of anything holding a NaN or an infinity is not finite (as the GradScaler's probe); only a
// suspect sum, which could also be a finite overflow, is confirmed element by element.
std::string first_nonfinite(const nn::StateDict& dict, const nn::StateDict& more) {
  for (const nn::StateDict* part : {&dict, &more})
    for (const auto& [name, tensor] : *part) {
      if (!is_floating(tensor.dtype()) || std::isfinite(sum(tensor).to(Device::cpu()).item<double>())) continue;
      const std::vector<double> values = tensor.to(Device::cpu()).to(DType::f64).to_vector<double>();
      if (!std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); })) return name;
    }
  return "";
}

bool is_checkpoint(const std::string& path) {
  const nn::SafetensorsHeader header = nn::read_safetensors_header(path);
  const std::string* format = find(header.metadata, "format");
  return format && *format == kFormat;
}

Checkpoint load_checkpoint(const std::string& path) { return from_file(nn::read_safetensors(path), path); }

Checkpoint parse_checkpoint(std::span<const std::uint8_t> bytes, const std::string& source) {
  return from_file(nn::parse_safetensors(bytes, source), source);
}

}  // namespace frugal::train
