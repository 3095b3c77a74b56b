// safetensors (see safetensors.h): the header is parsed with nlohmann::json in two passes, the first
// catching what the parsed value hides (Note [Two passes over the header]); the checks then follow
// the reference reader's order: lengths, JSON, each entry alone, then the entries together against
// the buffer.
#include "nn/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_set>

#include "core/error.h"
#include "core/mapped_file.h"

namespace frugal::nn {

// The length and the tensors' bytes are read and written in place, as the host holds them.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using nlohmann::json;

constexpr std::size_t kLengthBytes = 8;  // N, the header's length, as a little-endian u64
constexpr std::size_t kHeaderAlignment = 8;  // the reference writer pads the header to a multiple of 8
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr std::array<DTypeName, 8> kDTypeNames{{{DType::boolean, "BOOL"},
                                                {DType::u8, "U8"},
                                                {DType::i32, "I32"},
                                                {DType::i64, "I64"},
                                                {DType::f16, "F16"},
                                                {DType::bf16, "BF16"},
                                                {DType::f32, "F32"},
                                                {DType::f64, "F64"}}};
// The reference's other dtypes, which frugal has no tensors of.
constexpr std::array<std::string_view, 13> kOtherDTypes{"I8",    "I16",    "U16",     "U32",      "U64",
                                                        "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3",
                                                        "F6_E3M2", "C64",     "F8_E4M3FNUZ"};

std::uint64_t load_length(std::span<const std::uint8_t> bytes) {
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), kLengthBytes);
  return n;
}

// A name or a JSON value as a message shows it: names in quotes ('attn.0', JSON-escaped if they hold
// a control character such as a newline), values as JSON, both cut after kShownChars, so that a
// crafted header still makes a short message of one line.
constexpr std::size_t kShownChars = 80;

std::string cut(std::string text) {
  if (text.size() <= kShownChars) return text;
  std::size_t keep = kShownChars;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 letter
  return text.substr(0, keep) + "...";
}

std::string shown(const json& value) { return cut(value.dump(-1, ' ', false, json::error_handler_t::replace)); }

bool valid_utf8(const std::string& text) {
  try {
    static_cast<void>(json(text).dump());
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

std::string named(const std::string& name) {
  const bool plain = std::none_of(name.begin(), name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  return plain && valid_utf8(name) ? cut("'" + name + "'") : shown(json(name));
}

// The top-level JSON object as the parser read it, its keys in file order, and those of "__metadata__".
struct ParsedHeader {
  json root;
  std::vector<std::string> names, metadata_keys;
};

// A safetensors header nests three levels: {name: {"shape": [dims]}}. Deeper is refused before
// anything recurses through it (json::dump does: a million '[' overflowed the stack).
constexpr std::size_t kMaxNesting = 3;

// Note [Two passes over the header]
// json objects keep one value per key, sorted: a key given twice is lost (the last one wins, as in
// most JSON parsers, while the reference refuses the file) and so is the file's order of tensors.
// So a first pass reads the text as events (nlohmann's SAX interface) and checks what the parsed
// value will no longer show: keys twice in one object, and nesting deeper than kMaxNesting; it
// records the order of the keys. The second pass builds the value. nlohmann's parser callback could
// watch the keys in the same pass, but its parser then scans the enclosing object after every inner
// one ends: quadratic, minutes for a header of 200,000 tensors.
class HeaderScan final : public json::json_sax_t {
 public:
  HeaderScan(const std::string& source, ParsedHeader& parsed) : source_(source), parsed_(parsed) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    enter();
    keys_.emplace_back();
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    enter();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& key) override {
    const bool first_time = keys_.back().insert(key).second;
    if (keys_.size() == 1) {
      FRUGAL_CHECK_VALUE(first_time, source_, ": the header names ", named(key), " twice");
      parsed_.names.push_back(entry_ = key);
    } else {
      FRUGAL_CHECK_VALUE(first_time, source_, ": ", named(entry_), " has the key ", named(key), " twice");
      if (keys_.size() == 2 && entry_ == kMetadataKey) parsed_.metadata_keys.push_back(key);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& error) override {
    std::string_view what = error.what();  // "[json.exception.parse_error.101] parse error at ..."
    what.remove_prefix(std::min(what.size(), what.find("] ") + 2));
    FRUGAL_THROW(ValueError, source_, ": the header is not valid JSON: ", printable(what, 300));
  }

 private:
  void enter() {
    FRUGAL_CHECK_VALUE(++depth_ <= kMaxNesting, source_, ": the header nests arrays and objects deeper than the ",
                       kMaxNesting, " levels of {name: {\"shape\": [dims]}}", entry_.empty() ? "" : ", in ",
                       named(entry_));
  }

  const std::string& source_;
  ParsedHeader& parsed_;
  std::vector<std::unordered_set<std::string>> keys_;  // the keys seen so far in each object being read
  std::size_t depth_ = 0;                              // arrays and objects open
  std::string entry_;                                  // the top-level key being read
};

// Parses the header text in the two passes of Note [Two passes over the header]; ValueError for
// invalid JSON, a key twice in one object, or nesting deeper than a header's.
ParsedHeader parse_json(std::string_view text, const std::string& source) {
  ParsedHeader parsed;
  HeaderScan scan(source, parsed);
  json::sax_parse(text.begin(), text.end(), &scan);
  parsed.root = json::parse(text.begin(), text.end());  // valid: the scan would have thrown
  return parsed;
}

// "__metadata__": strings to strings, appended to `out` in the order of `keys` (the file's).
void read_metadata(const json& metadata, const std::vector<std::string>& keys, const std::string& source,
                   Metadata& out) {
  FRUGAL_CHECK_VALUE(metadata.is_object(), source, ": '__metadata__' must map strings to strings, got ",
                     shown(metadata));
  for (const std::string& key : keys) {
    const json& value = metadata.at(key);
    FRUGAL_CHECK_VALUE(value.is_string(), source, ": '__metadata__' must map strings to strings, but ", named(key),
                       " is ", shown(value));
    out.emplace_back(key, value.get<std::string>());
  }
}

// A JSON number that is an integer >= 0 (not 1.0, not -1, not 1e30).
std::uint64_t natural(const json& value, const std::string& source, const std::string& name, const char* what) {
  FRUGAL_CHECK_VALUE(value.is_number_unsigned(), source, ": tensor ", named(name), ": ", what,
                     " must hold integers >= 0, got ", shown(value));
  return value.get<std::uint64_t>();
}

// One tensor's entry, checked alone: its keys, types, shape and that its offsets fit its size.
SafetensorsEntry parse_entry(const std::string& name, const json& info, const std::string& source) {
  const auto where = [&] { return source + ": tensor " + named(name); };
  FRUGAL_CHECK_VALUE(info.is_object() && info.size() == 3 && info.contains("dtype") && info.contains("shape") &&
                         info.contains("data_offsets"),
                     where(), ": expected exactly the keys dtype, shape and data_offsets, got ", shown(info));
  SafetensorsEntry entry;
  entry.name = name;
  const json& dtype = info["dtype"];
  FRUGAL_CHECK_VALUE(dtype.is_string(), where(), ": dtype must be a string, got ", shown(dtype));
  entry.dtype = parse_safetensors_dtype(dtype.get_ref<const std::string&>(), name, source);

  const json& shape = info["shape"];
  FRUGAL_CHECK_VALUE(shape.is_array(), where(), ": shape must be an array, got ", shown(shape));
  // The product with zeros counted as one bounds every stride of the tensor (contiguous_strides).
  constexpr auto kMaxElements = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t product = 1;
  for (const json& dim : shape) {
    const std::uint64_t size = natural(dim, source, name, "shape");
    FRUGAL_CHECK_VALUE(size <= kMaxElements / product, where(), ": shape ", shown(shape),
                       " has more elements than a 64-bit count holds");
    product *= std::max<std::uint64_t>(size, 1);
    entry.shape.push_back(static_cast<std::int64_t>(size));
  }

  const json& offsets = info["data_offsets"];
  FRUGAL_CHECK_VALUE(offsets.is_array() && offsets.size() == 2, where(), ": data_offsets must be [begin, end], got ",
                     shown(offsets));
  entry.begin = natural(offsets[0], source, name, "data_offsets");
  entry.end = natural(offsets[1], source, name, "data_offsets");
  FRUGAL_CHECK_VALUE(entry.begin <= entry.end, where(), ": data_offsets ", shown(offsets), " end before they begin");
  const auto numel = static_cast<std::uint64_t>(shape_numel(entry.shape));
  FRUGAL_CHECK_VALUE(numel <= std::numeric_limits<std::uint64_t>::max() / dtype_size(entry.dtype), where(), ": shape ",
                     shown(shape), " has more bytes than a 64-bit count holds");
  const std::uint64_t bytes = numel * dtype_size(entry.dtype);
  FRUGAL_CHECK_VALUE(entry.end - entry.begin == bytes, where(), ": ", safetensors_dtype_name(entry.dtype), " ",
                     shown(shape), " needs ", bytes, " bytes, but data_offsets ", shown(offsets), " hold ",
                     entry.end - entry.begin);
  return entry;
}

// The entries together: sorted by offset they fill the buffer from 0 to its end, no gap, no overlap.
void check_layout(const std::vector<SafetensorsEntry>& entries, std::uint64_t buffer_bytes, const std::string& source) {
  std::vector<std::size_t> order(entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
  });
  std::uint64_t filled = 0;  // the tensors so far cover [0, filled)
  const SafetensorsEntry* last = nullptr;
  for (const std::size_t i : order) {
    const SafetensorsEntry& entry = entries[i];
    FRUGAL_CHECK_VALUE(entry.begin <= filled, source, ": tensor ", named(entry.name), " starts at byte ", entry.begin,
                       " of the data, but the tensors before it end at byte ", filled, ": a gap");
    FRUGAL_CHECK_VALUE(entry.begin == filled, source, ": tensor ", named(entry.name), " (bytes ", entry.begin, " to ",
                       entry.end, ") overlaps tensor ", named(last->name), " (bytes ", last->begin, " to ", last->end, ")");
    filled = entry.end;
    last = &entry;
  }
  FRUGAL_CHECK_VALUE(filled <= buffer_bytes, source, ": tensor ", named(last->name), " ends at byte ", filled,
                     " of the data, but the file holds only ", buffer_bytes, " bytes of data (truncated?)");
  FRUGAL_CHECK_VALUE(filled == buffer_bytes, source, ": the file holds ", buffer_bytes, " bytes of data, but ",
                     last ? "its tensors end at byte " + std::to_string(filled) : std::string("it has no tensors"),
                     ": bytes ", filled, " to ", buffer_bytes, " belong to no tensor");
}

// Each tensor of `header`, allocated fresh and filled by read(file_offset, out, bytes).
template <typename Read>
StateDict read_tensors(const SafetensorsHeader& header, const std::string& source, Read read) {
  StateDict tensors;
  tensors.reserve(header.entries.size());
  for (const SafetensorsEntry& entry : header.entries) {
    Tensor tensor = empty(entry.shape, {.dtype = entry.dtype});
    auto* bytes = static_cast<std::uint8_t*>(tensor.data_ptr());
    read(header.data_start + entry.begin, bytes, tensor.nbytes());
    // A bool that is neither 0 nor 1 is undefined behaviour in C++ the moment it is read.
    FRUGAL_CHECK_VALUE(entry.dtype != DType::boolean ||
                           std::all_of(bytes, bytes + tensor.nbytes(), [](std::uint8_t b) { return b <= 1; }),
                       source, ": tensor ", named(entry.name), ": BOOL bytes must be 0 or 1");
    tensors.emplace_back(entry.name, std::move(tensor));
  }
  return tensors;
}

// A JSON string literal; ValueError naming `what` if `text` is not valid UTF-8.
std::string quoted(const std::string& text, const std::string& target, const char* what) {
  try {
    return json(text).dump();
  } catch (const json::type_error&) {
    FRUGAL_THROW(ValueError, target, ": ", what, " is not valid UTF-8: ",
                 json(text).dump(-1, ' ', true, json::error_handler_t::replace));
  }
}

// The file's bytes in order: the length, the padded header, then each tensor, handed to write(bytes, count).
template <typename Write>
void encode(const StateDict& tensors, const Metadata& metadata, const std::string& target, Write write) {
  // Members of a JSON object, built as text: "key":value, comma separated.
  const auto add = [](std::string& object, const std::string& key, const std::string& value) {
    if (object.size() > 1) object += ',';
    object += key;
    object += ':';
    object += value;
  };
  std::string header = "{";
  if (!metadata.empty()) {
    std::string fields = "{";
    std::unordered_set<std::string> keys;
    for (const auto& [key, value] : metadata) {
      FRUGAL_CHECK_VALUE(keys.insert(key).second, target, ": metadata key ", named(key), " is given twice");
      add(fields, quoted(key, target, "a metadata key"), quoted(value, target, "a metadata value"));
    }
    add(header, json(kMetadataKey).dump(), fields + "}");
  }
  std::unordered_set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    FRUGAL_CHECK_VALUE(name != kMetadataKey, target, ": no tensor may be named '__metadata__', the reserved key");
    FRUGAL_CHECK_VALUE(names.insert(name).second, target, ": tensor ", named(name), " is given twice");
    FRUGAL_CHECK_VALUE(tensor.defined(), target, ": tensor ", named(name), " is undefined");
    const std::uint64_t end = offset + tensor.nbytes();
    const nlohmann::ordered_json info = {{"dtype", safetensors_dtype_name(tensor.dtype())}, {"shape", tensor.shape()},
                                         {"data_offsets", {offset, end}}};  // in the reference's order
    add(header, quoted(name, target, "a tensor name"), info.dump());
    offset = end;
  }
  header += "}";
  header.append((kHeaderAlignment - header.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  const std::uint64_t length = header.size();
  write(&length, kLengthBytes);
  write(header.data(), header.size());
  for (const auto& [name, tensor] : tensors) {  // one CPU copy at a time, not all of them at once
    const Tensor bytes = tensor.to(Device::cpu()).contiguous();
    write(bytes.data_ptr(), bytes.nbytes());
  }
}

// The header of `file`: its first 8 + N bytes, read with pread.
SafetensorsHeader read_header(const RandomAccessFile& file) {
  std::vector<std::uint8_t> head(std::min<std::uint64_t>(file.size(), kLengthBytes));
  file.read_at(0, head.data(), head.size());
  // A length the file cannot hold is left for the parser to report; any other header is read whole.
  if (head.size() == kLengthBytes) {
    const std::uint64_t n = load_length(head);
    if (n <= kMaxSafetensorsHeader && kLengthBytes + n <= file.size()) {
      head.resize(kLengthBytes + n);
      file.read_at(kLengthBytes, head.data() + kLengthBytes, n);
    }
  }
  return parse_safetensors_header(head, file.size(), file.path());
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& known : kDTypeNames)
    if (known.dtype == dtype) return known.name;
  FRUGAL_THROW(DTypeError, "no safetensors name for dtype ", dtype);
}

DType parse_safetensors_dtype(std::string_view name, const std::string& tensor, const std::string& source) {
  for (const DTypeName& known : kDTypeNames)
    if (known.name == name) return known.dtype;
  const bool other = std::find(kOtherDTypes.begin(), kOtherDTypes.end(), name) != kOtherDTypes.end();
  FRUGAL_THROW(ValueError, source, ": tensor ", named(tensor), ": dtype ", shown(json(std::string(name))),
               other ? " has no frugal dtype (frugal reads BOOL, U8, I32, I64, F16, BF16, F32, F64)"
                     : " is not a safetensors dtype");
}

SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                                           const std::string& source) {
  FRUGAL_CHECK_VALUE(file_size >= kLengthBytes, source, ": ", file_size,
                     " bytes is too short for a safetensors file, which starts with an 8-byte header length");
  FRUGAL_CHECK(bytes.size() >= kLengthBytes && bytes.size() <= file_size, "parse_safetensors_header: ", bytes.size(),
               " bytes given of a file of ", file_size);
  const std::uint64_t n = load_length(bytes);
  FRUGAL_CHECK_VALUE(n <= kMaxSafetensorsHeader, source, ": the header length is ", n,
                     " bytes, over the limit of ", kMaxSafetensorsHeader, " (not a safetensors file?)");
  FRUGAL_CHECK_VALUE(kLengthBytes + n <= file_size, source, ": the header length is ", n, " bytes, but only ",
                     file_size - kLengthBytes, " bytes follow it (truncated?)");
  FRUGAL_CHECK(bytes.size() >= kLengthBytes + n, "parse_safetensors_header: ", bytes.size(),
               " bytes given, the header needs ", kLengthBytes + n);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + kLengthBytes, n);
  FRUGAL_CHECK_VALUE(text.starts_with('{'), source, ": the header does not start with '{' (not a safetensors file?)");

  const ParsedHeader parsed = parse_json(text, source);
  SafetensorsHeader header;
  header.data_start = kLengthBytes + n;
  for (const std::string& name : parsed.names) {
    const json& value = parsed.root.at(name);
    if (name == kMetadataKey)
      read_metadata(value, parsed.metadata_keys, source, header.metadata);
    else
      header.entries.push_back(parse_entry(name, value, source));
  }
  check_layout(header.entries, file_size - header.data_start, source);
  return header;
}

SafetensorsHeader read_safetensors_header(const std::string& path) { return read_header(RandomAccessFile(path)); }

SafetensorsFile parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& source) {
  SafetensorsHeader header = parse_safetensors_header(bytes, bytes.size(), source);
  StateDict tensors = read_tensors(header, source, [&](std::uint64_t offset, std::uint8_t* out, std::size_t count) {
    if (count > 0) std::memcpy(out, bytes.data() + offset, count);  // inside: check_layout saw to it
  });
  return {std::move(tensors), std::move(header.metadata)};
}

SafetensorsFile read_safetensors(const std::string& path) {
  const RandomAccessFile file(path);
  SafetensorsHeader header = read_header(file);
  StateDict tensors = read_tensors(header, path, [&](std::uint64_t offset, std::uint8_t* out, std::size_t count) {
    file.read_at(offset, out, count);
  });
  return {std::move(tensors), std::move(header.metadata)};
}

void write_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  write_safetensors(path, tensors, metadata, [](const std::string&) {});
}

void write_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata,
                       const std::function<void(const std::string& written)>& verify) {
  AtomicFile file(path);
  encode(tensors, metadata, path, [&](const void* bytes, std::size_t count) { file.write(bytes, count); });
  verify(file.readable_path());
  file.commit();
}

std::vector<std::uint8_t> encode_safetensors(const StateDict& tensors, const Metadata& metadata) {
  std::vector<std::uint8_t> out;
  encode(tensors, metadata, "safetensors", [&](const void* bytes, std::size_t count) {
    const auto* first = static_cast<const std::uint8_t*>(bytes);
    out.insert(out.end(), first, first + count);
  });
  return out;
}

}  // namespace frugal::nn
