// `frugal inspect` (see inspect.h): the format is found from the file's first bytes and size (or its
// being a folder, or a name ending in .safetensors); the file is opened as a data::Dataset where it
// is one (an IDX file alone is not: it is read as an array); a Summary is filled once, then printed
// as text or as JSON. A safetensors file is no dataset: its header is listed on its own.
#include "cli/inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "cli/pack.h"
#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/mapped_file.h"
#include "data/shard.h"
#include "nn/safetensors.h"

namespace frugal::cli {

namespace {

using nlohmann::ordered_json;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr std::string_view kGreyRamp = " .:-=+*#%@";  // dark to bright, one character per tenth of the range
constexpr std::int64_t kHistogramWidth = 40;          // characters in the longest bar
constexpr std::int64_t kMaxShownSamples = 10000;      // --samples: far more than anyone reads

enum class Format { shard, idx, cifar10, cifar100, folder, safetensors };

std::string_view format_key(Format format) {  // as JSON names it
  switch (format) {
    case Format::shard: return "shard";
    case Format::idx: return "idx";
    case Format::cifar10: return "cifar10";
    case Format::cifar100: return "cifar100";
    case Format::folder: return "folder";
    case Format::safetensors: return "safetensors";
  }
  return "";
}

std::string_view format_title(Format format) {  // as the text report names it
  switch (format) {
    case Format::shard: return "frugal shard";
    case Format::idx: return "IDX file";
    case Format::cifar10: return "CIFAR-10 batch";
    case Format::cifar100: return "CIFAR-100 batch";
    case Format::folder: return "image folder";
    case Format::safetensors: return "safetensors file";
  }
  return "";
}

struct ShownSample {
  std::int64_t index;
  std::optional<std::int64_t> label;  // absent for a file without labels (IDX images alone)
  std::vector<std::string> art;       // one string per row; empty unless a 1-channel image
};

// Everything inspect reports, gathered once.
struct Summary {
  Format format{};
  std::string description;
  std::int64_t records = 0;
  Shape sample_shape;
  std::string sample_dtype;
  ordered_json header = ordered_json::object();            // what the format's header says
  std::optional<std::vector<std::int64_t>> class_counts;  // per label; absent without labels
  std::vector<std::string> class_names;                   // image folders only
  std::vector<ShownSample> samples;
};

bool is_plain_idx(const std::string& path) {
  try {
    data::IdxArray::open(path);
    return true;
  } catch (const ValueError&) {
    return false;
  }
}

// The first bytes of `path` (up to head.size()), read through a descriptor so that a failure says
// why: "cannot open: Permission denied". Returns how many were read.
std::size_t read_head(const std::string& path, std::span<std::uint8_t> head) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FRUGAL_CHECK_AS(data::FileError, fd >= 0, path, ": cannot open: ", std::strerror(errno));
  const ssize_t got = ::read(fd, head.data(), head.size());
  const int error = errno;
  ::close(fd);
  FRUGAL_CHECK_AS(data::FileError, got >= 0, path, ": cannot read: ", std::strerror(error));
  return static_cast<std::size_t>(got);
}

// A file that is none of the formats. One with a plausible CIFAR label first and at least one
// record's bytes is most likely a CIFAR batch cut short (or with bytes added): say so, with the
// record sizes it misses, rather than list every format.
[[noreturn]] void unknown_format(const std::string& path, std::span<const std::uint8_t> head, std::uintmax_t size) {
  const std::size_t c10 = data::cifar_record_size(data::CifarKind::cifar10);
  const std::size_t c100 = data::cifar_record_size(data::CifarKind::cifar100_fine);
  constexpr std::uint8_t kCifarFirstLabels = 20;  // CIFAR-10's 10 classes, CIFAR-100's 20 coarse ones
  FRUGAL_CHECK_VALUE(size < c10 || head.empty() || head[0] >= kCifarFirstLabels, path,
                     ": looks like a CIFAR batch, but its ", size, " bytes are not a whole number of records (",
                     size / c10, " CIFAR-10 records of ", c10, " bytes and ", size % c10, " over; ", size / c100,
                     " CIFAR-100 records of ", c100, " bytes and ", size % c100, " over): truncated or padded?");
  std::ostringstream first;
  for (std::size_t i = 0; i < head.size(); ++i) first << (i ? " " : "") << std::hex << std::setw(2) << std::setfill('0') << int{head[i]};
  FRUGAL_THROW(ValueError, path, ": not a frugal shard, IDX file, CIFAR batch, safetensors file or image folder (",
               size, " bytes, starting ", first.str(), ")");
}

// A safetensors file has no magic number: it is one by its name, or by starting with a header length
// (8 bytes, little-endian) that the file can hold, followed by '{'.
bool looks_like_safetensors(const std::string& path, std::span<const std::uint8_t> head, std::uintmax_t size) {
  if (path.ends_with(".safetensors")) return true;
  constexpr std::size_t kLengthBytes = 8;
  if (head.size() <= kLengthBytes || head[kLengthBytes] != '{') return false;
  std::uint64_t n = 0;
  for (std::size_t i = kLengthBytes; i-- > 0;) n = n << 8 | head[i];
  return n <= nn::kMaxSafetensorsHeader && kLengthBytes + n <= size;
}

// Shards and gzip (frugal reads only IDX gzipped) have magic numbers; IDX starts 00 00; CIFAR has
// no header, only its record size; safetensors is found by its name or its first 9 bytes. A CIFAR
// batch can start 00 00 too (label 0, a black first pixel), so a file that could be either is IDX
// only if it parses as IDX.
Format detect(const std::string& path) {
  struct stat info {};
  FRUGAL_CHECK_AS(data::FileError, ::stat(path.c_str(), &info) == 0, path, ": ", data::path_error_text(errno));
  if (S_ISDIR(info.st_mode)) return Format::folder;
  // Before opening: reading a FIFO would wait for a writer, and a device has no size.
  FRUGAL_CHECK_AS(data::FileError, S_ISREG(info.st_mode), path, ": is not a regular file or a folder");
  constexpr std::size_t kSniffed = 9;  // the safetensors length and its '{'; shards need 8
  std::array<std::uint8_t, kSniffed> bytes{};
  const std::span<const std::uint8_t> head(bytes.data(), read_head(path, bytes));
  const auto size = static_cast<std::uintmax_t>(info.st_size);
  FRUGAL_CHECK_AS(data::FileError, size > 0, path, ": is empty");
  const bool cifar10_sized = size % data::cifar_record_size(data::CifarKind::cifar10) == 0;
  const bool cifar100_sized = size % data::cifar_record_size(data::CifarKind::cifar100_fine) == 0;
  const std::size_t magic = sizeof(data::kShardMagic);
  if (head.size() >= magic && std::equal(head.begin(), head.begin() + magic, data::kShardMagic)) return Format::shard;
  if (data::is_gzip(head)) return Format::idx;
  if (looks_like_safetensors(path, head, size)) return Format::safetensors;
  if (head.size() >= 4 && head[0] == 0 && head[1] == 0 && (!(cifar10_sized || cifar100_sized) || is_plain_idx(path)))
    return Format::idx;
  if (cifar10_sized) return Format::cifar10;
  if (cifar100_sized) return Format::cifar100;
  unknown_format(path, head.first(std::min(head.size(), magic)), size);
}

// A 1-channel image, one character per pixel; nothing for other samples. u8 pixels span 0..255;
// other dtypes are stretched from the sample's smallest to its largest value.
std::vector<std::string> ascii_art(const Tensor& sample) {
  if (sample.dim() != 3 || sample.size(0) != 1) return {};
  const std::vector<double> pixels = sample.to_vector<double>();
  double low = 0, high = 255;
  if (sample.dtype() != DType::u8 && !pixels.empty()) {
    low = *std::min_element(pixels.begin(), pixels.end());
    high = *std::max_element(pixels.begin(), pixels.end());
  }
  const double range = high > low ? high - low : 1;
  const auto levels = static_cast<std::int64_t>(kGreyRamp.size());
  std::vector<std::string> rows;
  for (std::int64_t y = 0; y < sample.size(1); ++y) {
    std::string row;
    for (std::int64_t x = 0; x < sample.size(2); ++x) {
      const double v = (pixels[static_cast<std::size_t>(y * sample.size(2) + x)] - low) / range;
      row += kGreyRamp[static_cast<std::size_t>(std::clamp(static_cast<std::int64_t>(v * static_cast<double>(levels)), std::int64_t{0}, levels - 1))];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// A histogram of more classes than this is not drawn: its rows alone would be megabytes, and a
// crafted file with one label of 2^27 would make it gigabytes. ImageNet-21k has 21,841 classes.
constexpr std::int64_t kMaxHistogramClasses = std::int64_t{1} << 20;

// Adds record `index`'s label to the histogram, which grows to the labels seen; ValueError naming
// `file` for a label the histogram will not grow to.
void count_label(std::vector<std::int64_t>& counts, std::int64_t label, const std::string& file, std::int64_t index) {
  FRUGAL_CHECK_VALUE(label < kMaxHistogramClasses, file, ": record ", index, " has label ", label,
                     "; inspect draws histograms of at most ", kMaxHistogramClasses, " classes");
  if (label >= static_cast<std::int64_t>(counts.size())) counts.resize(static_cast<std::size_t>(label + 1), 0);
  ++counts[static_cast<std::size_t>(label)];
}

// Count, shape, histogram and first samples of a dataset. `label_of(i)` reads label i, without the
// sample where the format allows (an image folder's labels need no decoding).
template <typename LabelOf>
void summarize(Summary& s, const std::string& file, const data::Dataset& dataset, std::int64_t shown,
               LabelOf label_of) {
  s.description = dataset.describe();
  s.records = dataset.size();
  s.sample_shape = dataset.sample_shape();
  s.sample_dtype = dtype_name(dataset.sample_dtype());
  // Sized by the header's class count only up to a bound: a corrupt-but-checksummed header could
  // claim 2^40 classes. count_label grows the histogram to the labels actually seen beyond it.
  s.class_counts.emplace(static_cast<std::size_t>(std::min(dataset.num_classes(), kMaxHistogramClasses)), 0);
  for (std::int64_t i = 0; i < s.records; ++i) count_label(*s.class_counts, label_of(i), file, i);
  for (std::int64_t i = 0; i < std::min(shown, s.records); ++i) {
    const data::Sample sample = dataset.get(i);
    s.samples.push_back({i, sample.label, ascii_art(sample.input)});
  }
}

void summarize_dataset(Summary& s, const std::string& file, const data::Dataset& dataset, std::int64_t shown) {
  summarize(s, file, dataset, shown, [&](std::int64_t i) { return dataset.get(i).label; });
}

// One IDX file alone: a 1-D u8 array is a labels file, a 3-D u8 array an images file ([1, H, W]
// samples, as IdxDataset hands them out); any other array is listed by its dims only.
void summarize_idx(Summary& s, const std::string& path, const std::string& cache_dir, std::int64_t shown) {
  const data::IdxArray array = data::IdxArray::open(path, cache_dir);
  const Shape& dims = array.dims();
  const bool labels = dims.size() == 1 && array.type() == data::IdxType::u8;
  const bool images = dims.size() == 3 && array.type() == data::IdxType::u8;
  s.records = dims[0];
  s.sample_shape = images ? Shape{1, dims[1], dims[2]} : Shape(dims.begin() + 1, dims.end());
  s.sample_dtype = data::idx_type_name(array.type());
  s.description = labels ? detail::str("IDX labels ", path, ": ", s.records, " u8 labels")
                         : detail::str("IDX ", images ? "images " : "array ", path, ": ", s.records, " records of ",
                                       shape_str(s.sample_shape), " ", s.sample_dtype);
  s.header = {{"element_type", data::idx_type_name(array.type())}, {"dims", dims}, {"gzip", array.name() != path}};
  if (labels) {
    s.class_counts.emplace();
    for (std::int64_t i = 0; i < s.records; ++i) count_label(*s.class_counts, static_cast<std::int64_t>(array.at(i)), path, i);
  }
  for (std::int64_t i = 0; i < std::min(shown, s.records); ++i) {
    ShownSample sample{i, std::nullopt, {}};
    if (labels) sample.label = static_cast<std::int64_t>(array.at(i));
    if (images) sample.art = ascii_art(data::tensor_from_bytes(array.item(i).data(), s.sample_shape, DType::u8));
    s.samples.push_back(std::move(sample));
  }
}

ordered_json to_json(const std::string& file, const Summary& s) {
  ordered_json report = {{"file", file},
                         {"format", format_key(s.format)},
                         {"description", s.description},
                         {"records", s.records},
                         {"sample_shape", s.sample_shape},
                         {"sample_dtype", s.sample_dtype},
                         {"header", s.header}};
  report["num_classes"] = s.class_counts ? ordered_json(s.class_counts->size()) : ordered_json(nullptr);
  report["class_counts"] = s.class_counts ? ordered_json(*s.class_counts) : ordered_json(nullptr);
  if (!s.class_names.empty()) report["classes"] = s.class_names;
  report["samples"] = ordered_json::array();
  for (const ShownSample& sample : s.samples)
    report["samples"].push_back({{"index", sample.index},
                                 {"label", sample.label ? ordered_json(*sample.label) : ordered_json(nullptr)},
                                 {"ascii", sample.art}});
  return report;
}

void print_text(const std::string& file, const Summary& s) {
  const auto row = [](std::string_view name, const std::string& value) {
    std::cout << "  " << std::left << std::setw(14) << name << value << "\n";
  };
  std::cout << file << ": " << format_title(s.format) << "\n" << "  " << s.description << "\n";
  row("records", std::to_string(s.records));
  row("sample", shape_str(s.sample_shape) + " " + s.sample_dtype);
  for (const auto& [key, value] : s.header.items()) row(key, value.is_string() ? value.get<std::string>() : value.dump());
  if (s.class_counts) {
    const std::vector<std::int64_t>& counts = *s.class_counts;
    row("classes", std::to_string(counts.size()));
    const std::int64_t most = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    for (std::size_t c = 0; c < counts.size(); ++c) {
      const std::string name = c < s.class_names.size() ? s.class_names[c] : std::to_string(c);
      const auto bar = static_cast<std::size_t>(most ? counts[c] * kHistogramWidth / most : 0);
      std::cout << "    " << std::right << std::setw(12) << name << std::setw(9) << counts[c]
                << (bar ? "  " + std::string(bar, '#') : "") << "\n";
    }
  }
  for (const ShownSample& sample : s.samples) {
    std::cout << "sample " << sample.index;
    if (sample.label) std::cout << ", label " << *sample.label;
    std::cout << (sample.art.empty() ? "" : ":") << "\n";
    for (const std::string& line : sample.art) std::cout << "    |" << line << "|\n";
  }
}

// What `parameters` counts in a safetensors file: the elements of its floating-point tensors, less
// BatchNorm's running statistics (floating, but buffers, not parameters) and its step counter.
constexpr std::array<std::string_view, 3> kBufferSuffixes = {"running_mean", "running_var", "num_batches_tracked"};
constexpr std::string_view kParametersCounted =
    "elements of floating-point tensors whose names do not end in running_mean, running_var or num_batches_tracked";

bool is_parameter(const nn::SafetensorsEntry& entry) {
  const auto is_buffer = [&](std::string_view suffix) { return entry.name.ends_with(suffix); };
  return is_floating(entry.dtype) && std::none_of(kBufferSuffixes.begin(), kBufferSuffixes.end(), is_buffer);
}

// A safetensors file's report: each tensor's name, dtype, shape and bytes, the totals, the metadata.
ordered_json safetensors_report(const std::string& path, const nn::SafetensorsHeader& header) {
  ordered_json tensors = ordered_json::array();
  std::int64_t elements = 0, parameters = 0;
  std::uint64_t bytes = 0;
  for (const nn::SafetensorsEntry& entry : header.entries) {
    const std::int64_t numel = shape_numel(entry.shape);  // the file holds them all: no sum overflows
    tensors.push_back({{"name", entry.name},
                       {"dtype", nn::safetensors_dtype_name(entry.dtype)},
                       {"shape", entry.shape},
                       {"bytes", entry.end - entry.begin},
                       {"data_offsets", {entry.begin, entry.end}}});
    elements += numel;
    parameters += is_parameter(entry) ? numel : 0;
    bytes += entry.end - entry.begin;
  }
  // A plain (sorted) object: ordered_json's insertion is linear, and a header may hold millions of keys.
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [key, value] : header.metadata) metadata[key] = value;
  return {{"file", path},
          {"format", "safetensors"},
          {"data_start", header.data_start},
          {"tensors", std::move(tensors)},
          {"totals",
           {{"tensors", header.entries.size()},
            {"elements", elements},
            {"bytes", bytes},
            {"parameters", parameters},
            {"parameters_counted", kParametersCounted}}},
          {"metadata", ordered_json(metadata)}};
}

void print_safetensors(const ordered_json& report, const nn::Metadata& metadata) {
  constexpr std::size_t kMaxNameColumn = 48;  // longer names push their row's other columns right
  std::size_t width = 4;
  for (const ordered_json& tensor : report["tensors"])
    width = std::max(width, std::min(kMaxNameColumn, tensor["name"].get_ref<const std::string&>().size()));
  std::cout << report["file"].get<std::string>() << ": safetensors file, data from byte " << report["data_start"]
            << " (after the 8-byte length and the JSON header)\n";
  const auto row = [&](const std::string& name, const std::string& dtype, const std::string& shape,
                       const std::string& bytes) {
    std::cout << "  " << std::left << std::setw(static_cast<int>(width)) << name << "  " << std::setw(5) << dtype
              << "  " << std::setw(20) << shape << std::right << std::setw(12) << bytes << "\n";
  };
  row("name", "dtype", "shape", "bytes");
  for (const ordered_json& tensor : report["tensors"])
    row(printable(tensor["name"].get<std::string>()), tensor["dtype"].get<std::string>(),
        shape_str(tensor["shape"].get<Shape>()), tensor["bytes"].dump());
  const ordered_json& totals = report["totals"];
  std::cout << "totals\n"
            << "  tensors     " << totals["tensors"] << "\n"
            << "  elements    " << totals["elements"] << "\n"
            << "  bytes       " << totals["bytes"] << "\n"
            << "  parameters  " << totals["parameters"] << " (" << kParametersCounted << ")\n";
  std::cout << "metadata" << (metadata.empty() ? ": none" : "") << "\n";
  // The file's own text: shown, never sent to the terminal as escape codes (core/error.h printable).
  for (const auto& [key, value] : metadata) std::cout << "  " << printable(key) << ": " << printable(value, std::size_t{1} << 20) << "\n";
}

// From the header alone: no tensor is read.
void inspect_safetensors(const std::string& path, bool as_json) {
  const nn::SafetensorsHeader header = nn::read_safetensors_header(path);
  const ordered_json report = safetensors_report(path, header);
  if (as_json)
    std::cout << report.dump() << "\n";
  else
    print_safetensors(report, header.metadata);
}

}  // namespace

InspectCommand::InspectCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("inspect", "Show what a data file holds: a frugal shard, an IDX file (plain or .gz), "
                                             "a CIFAR batch, an image folder, or a safetensors file's tensors")) {
  command_->add_option("file", file_, "The file (or image folder) to inspect")->required();
  command_->add_flag("--json", json_, "Print one JSON object: {file, format, records, sample_shape, ..., samples}");
  command_->add_option("--samples", samples_, "How many of the first samples to show (default 3)")
      ->check(between(0, kMaxShownSamples));
  command_->add_option("--size", size_, "Image folders: the HEIGHTxWIDTH images are resized to (default 32x32)");
  command_->add_option("--cache-dir", cache_dir_, "IDX .gz files: where they are decompressed (default ~/.cache/frugal)");
}

int InspectCommand::run() const {
  try {
    Summary s;
    s.format = detect(file_);
    switch (s.format) {
      case Format::shard: {
        const data::ShardDataset shard(file_);
        const data::ShardInfo& info = shard.info();
        s.header = {{"version", info.version},          {"label_dtype", dtype_name(info.label_dtype)},
                    {"record_size", info.record_size},  {"data_offset", info.data_offset},
                    {"header_crc32", info.header_crc}};
        summarize_dataset(s, file_, shard, samples_);
        break;
      }
      case Format::idx: summarize_idx(s, file_, cache_dir_, samples_); break;
      case Format::safetensors: inspect_safetensors(file_, json_); return 0;
      case Format::cifar10:
      case Format::cifar100: {
        const auto kind = s.format == Format::cifar10 ? data::CifarKind::cifar10 : data::CifarKind::cifar100_fine;
        s.header = {{"record_size", data::cifar_record_size(kind)},
                    {"label", s.format == Format::cifar10 ? "the class" : "fine (of coarse and fine)"}};
        summarize_dataset(s, file_, data::CifarDataset({file_}, kind), samples_);
        break;
      }
      case Format::folder: {
        const auto [height, width] = parse_image_size(size_, "--size");
        const data::ImageFolder folder(file_, height, width);
        s.class_names = folder.classes();
        s.header = {{"resized_to", size_}};
        summarize(s, file_, folder, samples_, [&](std::int64_t i) { return folder.label(i); });
        break;
      }
    }
    if (json_)
      std::cout << to_json(file_, s).dump() << "\n";
    else
      print_text(file_, s);
    return 0;
  } catch (const ValueError& error) {
    std::cerr << "frugal inspect: " << error.message() << "\n";
  } catch (const data::WriteError& error) {  // a decompressed copy could not be written (a full disk)
    std::cerr << "frugal inspect: error: " << error.message() << "\n";
    return kExitError;
  } catch (const data::FileError& error) {
    std::cerr << "frugal inspect: " << error.message() << "\n";
  }
  return kExitUsage;
}

}  // namespace frugal::cli
