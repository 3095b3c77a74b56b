// The shard format (layout in shard.h): header encoding and checks, reading, and the streaming writer.
#include "data/shard.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "core/allocator.h"
#include "data/byte_order.h"

namespace frugal::data {

// Samples are stored as their in-memory bytes, which are little-endian on every host frugal
// supports; the header is encoded explicitly. A big-endian port would byte-swap samples here.
static_assert(std::endian::native == std::endian::little, "shard samples are stored in little-endian order");

namespace {

// The dtype codes of the file. Fixed forever, so they do not follow DType's enum order, which may change.
constexpr std::pair<DType, std::uint8_t> kShardDTypeCodes[] = {
    {DType::f32, 1}, {DType::f64, 2}, {DType::f16, 3}, {DType::bf16, 4},
    {DType::i32, 5}, {DType::i64, 6}, {DType::u8, 7},  {DType::boolean, 8}};

std::uint8_t dtype_code(DType dtype) {
  return std::ranges::find(kShardDTypeCodes, dtype, &std::pair<DType, std::uint8_t>::first)->second;
}

bool dtype_from_code(std::uint8_t code, DType* dtype) {
  const auto* found = std::ranges::find(kShardDTypeCodes, code, &std::pair<DType, std::uint8_t>::second);
  if (found == std::end(kShardDTypeCodes)) return false;
  *dtype = found->first;
  return true;
}

// Far above any real sample and far below where the layout's arithmetic could overflow.
constexpr std::int64_t kMaxSampleBytes = std::int64_t{1} << 40;

std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The largest label a label dtype holds. For i64 one less, so that num_classes = label + 1 fits.
std::int64_t max_label(DType label_dtype) {
  return label_dtype == DType::u8    ? std::numeric_limits<std::uint8_t>::max()
         : label_dtype == DType::i32 ? std::numeric_limits<std::int32_t>::max()
                                     : std::numeric_limits<std::int64_t>::max() - 1;
}

// Header field offsets (the table in shard.h).
constexpr std::size_t kVersionAt = 8, kSampleDTypeAt = 12, kLabelDTypeAt = 13, kRankAt = 14, kRecordsAt = 16,
                      kRecordSizeAt = 24, kDataOffsetAt = 32, kNumClassesAt = 40, kDimsAt = 48, kCrcAt = 124;

std::uint32_t header_crc(const std::uint8_t* header) {
  return static_cast<std::uint32_t>(crc32(0L, header, static_cast<uInt>(kCrcAt)));
}

std::array<std::uint8_t, kShardHeaderBytes> encode_header(const ShardInfo& info) {
  std::array<std::uint8_t, kShardHeaderBytes> header{};
  std::memcpy(header.data(), kShardMagic, sizeof(kShardMagic));
  store_le<std::uint32_t>(&header[kVersionAt], info.version);
  header[kSampleDTypeAt] = dtype_code(info.sample_dtype);
  header[kLabelDTypeAt] = dtype_code(info.label_dtype);
  header[kRankAt] = static_cast<std::uint8_t>(info.sample_shape.size());
  store_le<std::uint64_t>(&header[kRecordsAt], static_cast<std::uint64_t>(info.records));
  store_le<std::uint64_t>(&header[kRecordSizeAt], static_cast<std::uint64_t>(info.record_size));
  store_le<std::uint64_t>(&header[kDataOffsetAt], static_cast<std::uint64_t>(info.data_offset));
  store_le<std::uint64_t>(&header[kNumClassesAt], static_cast<std::uint64_t>(info.num_classes));
  for (std::size_t d = 0; d < info.sample_shape.size(); ++d) {
    store_le<std::int64_t>(&header[kDimsAt + 8 * d], info.sample_shape[d]);
  }
  store_le<std::uint32_t>(&header[kCrcAt], header_crc(header.data()));
  return header;
}

// The header's fields, checked in the order that gives the most useful message: is it a shard at
// all (magic), one we can read (version), intact (checksum), self-consistent (layout).
// `header`: the file's first bytes, up to kShardHeaderBytes of them; `file_size`: all of its bytes.
ShardInfo decode_header(std::span<const std::uint8_t> header_bytes, std::uint64_t file_size, const std::string& name) {
  FRUGAL_CHECK_VALUE(header_bytes.size() >= static_cast<std::size_t>(kShardHeaderBytes), name, ": ", file_size,
                     " bytes is too short for a shard header (", kShardHeaderBytes, " bytes)");
  const std::uint8_t* header = header_bytes.data();
  FRUGAL_CHECK_VALUE(std::memcmp(header, kShardMagic, sizeof(kShardMagic)) == 0, name,
                     ": wrong magic number: not a frugal shard (it starts with \"FRUGALSH\")");
  const auto version = load_le<std::uint32_t>(&header[kVersionAt]);
  FRUGAL_CHECK_VALUE(version == kShardVersion, name, ": shard version ", version, ", this frugal reads version ",
                     kShardVersion);
  const auto stored_crc = load_le<std::uint32_t>(&header[kCrcAt]), crc = header_crc(header);
  FRUGAL_CHECK_VALUE(stored_crc == crc, name, ": corrupt shard header: its CRC-32 is ", stored_crc,
                     " but its bytes give ", crc);

  DType sample_dtype, label_dtype;
  FRUGAL_CHECK_VALUE(dtype_from_code(header[kSampleDTypeAt], &sample_dtype), name, ": unknown sample dtype code ",
                     static_cast<int>(header[kSampleDTypeAt]));
  FRUGAL_CHECK_VALUE(dtype_from_code(header[kLabelDTypeAt], &label_dtype), name, ": unknown label dtype code ",
                     static_cast<int>(header[kLabelDTypeAt]));
  const std::int64_t rank = header[kRankAt];
  FRUGAL_CHECK_VALUE(rank <= kShardMaxRank, name, ": sample rank ", rank, " is above the maximum ", kShardMaxRank);
  Shape shape;
  for (std::int64_t d = 0; d < rank; ++d) shape.push_back(load_le<std::int64_t>(&header[kDimsAt + 8 * d]));

  ShardInfo info = shard_layout(shape, sample_dtype, label_dtype, name);
  info.version = version;
  info.header_crc = crc;
  const auto record_size = load_le<std::uint64_t>(&header[kRecordSizeAt]);
  const auto data_offset = load_le<std::uint64_t>(&header[kDataOffsetAt]);
  FRUGAL_CHECK_VALUE(record_size == static_cast<std::uint64_t>(info.record_size) &&
                         data_offset == static_cast<std::uint64_t>(info.data_offset),
                     name, ": the header's record size ", record_size, " and data offset ", data_offset,
                     " do not match samples of ", shape_str(shape), " ", sample_dtype, " with ", label_dtype,
                     " labels (", info.record_size, " and ", info.data_offset, ")");
  const auto num_classes = load_le<std::uint64_t>(&header[kNumClassesAt]);
  FRUGAL_CHECK_VALUE(num_classes <= static_cast<std::uint64_t>(max_label(label_dtype)) + 1, name, ": ", num_classes,
                     " classes do not fit ", label_dtype, " labels");
  info.num_classes = static_cast<std::int64_t>(num_classes);
  // Compared by division, so a huge record count cannot overflow a product.
  const auto records = load_le<std::uint64_t>(&header[kRecordsAt]);
  const std::uint64_t body = file_size - data_offset;
  FRUGAL_CHECK_VALUE(body % record_size == 0 && body / record_size == records, name, ": the header says ", records,
                     " records of ", record_size, " bytes, the file holds ", body / record_size, " records and ",
                     body % record_size, " more bytes", body / record_size < records ? " (truncated)" : "");
  info.records = static_cast<std::int64_t>(records);
  return info;
}

}  // namespace

ShardInfo shard_layout(const Shape& sample_shape, DType sample_dtype, DType label_dtype, std::string_view name) {
  FRUGAL_CHECK_VALUE(static_cast<std::int64_t>(sample_shape.size()) <= kShardMaxRank, name, ": sample shape ",
                     shape_str(sample_shape), " has more than ", kShardMaxRank, " dims");
  FRUGAL_CHECK_VALUE(label_dtype == DType::u8 || label_dtype == DType::i32 || label_dtype == DType::i64,
                     name, ": labels must be u8, i32 or i64, not ", label_dtype);
  ShardInfo info;
  info.sample_shape = sample_shape;
  info.sample_dtype = sample_dtype;
  info.label_dtype = label_dtype;
  info.sample_bytes = static_cast<std::int64_t>(dtype_size(sample_dtype));
  for (const std::int64_t dim : sample_shape) {
    FRUGAL_CHECK_VALUE(dim >= 1, name, ": sample shape ", shape_str(sample_shape), " has a dim below 1");
    FRUGAL_CHECK_VALUE(!__builtin_mul_overflow(info.sample_bytes, dim, &info.sample_bytes) &&
                           info.sample_bytes <= kMaxSampleBytes,
                       name, ": samples of ", shape_str(sample_shape), " ", sample_dtype, " exceed ", kMaxSampleBytes,
                       " bytes");
  }
  const auto label_size = static_cast<std::int64_t>(dtype_size(label_dtype));
  info.label_offset = round_up(info.sample_bytes, label_size);  // the label aligned to its own size
  info.record_size = round_up(info.label_offset + label_size, kShardAlignment);
  return info;
}

// ---- Shard

Shard Shard::parse(std::span<const std::uint8_t> bytes, std::string name) {
  Shard shard;
  shard.info_ = decode_header(bytes.first(std::min(bytes.size(), std::size_t{kShardHeaderBytes})), bytes.size(), name);
  shard.name_ = std::move(name);
  shard.bytes_ = bytes;
  return shard;
}

Shard Shard::open(const std::string& path) {
  auto file = std::make_shared<const RandomAccessFile>(path);
  std::array<std::uint8_t, kShardHeaderBytes> header{};
  const auto header_size = static_cast<std::size_t>(std::min<std::uint64_t>(file->size(), header.size()));
  file->read_at(0, header.data(), header_size);
  Shard shard;
  shard.info_ = decode_header({header.data(), header_size}, file->size(), path);
  shard.name_ = path;
  shard.file_ = std::move(file);
  return shard;
}

std::uint64_t Shard::record_offset(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), name_, ": record ", index, " is out of range for ", size(),
                     " records");
  return static_cast<std::uint64_t>(info_.data_offset + index * info_.record_size);
}

void Shard::read_bytes(std::uint64_t offset, void* out, std::size_t count) const {
  if (file_) {
    file_->read_at(offset, out, count);
  } else {
    std::memcpy(out, bytes_.data() + offset, count);  // in range: decode_header checked the size
  }
}

std::int64_t Shard::check_label(std::int64_t index, const std::uint8_t* stored) const {
  const std::int64_t label = info_.label_dtype == DType::u8    ? *stored
                             : info_.label_dtype == DType::i32 ? load_le<std::int32_t>(stored)
                                                               : load_le<std::int64_t>(stored);
  FRUGAL_CHECK_VALUE(label >= 0 && label < info_.num_classes, name_, ": record ", index, " has label ", label,
                     ", out of range for the header's ", info_.num_classes, " classes");
  return label;
}

std::int64_t Shard::label(std::int64_t index) const {
  std::array<std::uint8_t, sizeof(std::int64_t)> stored{};
  read_bytes(record_offset(index) + static_cast<std::uint64_t>(info_.label_offset), stored.data(),
             dtype_size(info_.label_dtype));
  return check_label(index, stored.data());
}

std::int64_t Shard::read(std::int64_t index, void* out) const {
  const std::uint64_t offset = record_offset(index);
  const auto sample_bytes = static_cast<std::size_t>(info_.sample_bytes);
  // The label sits at label_offset, up to 7 bytes of alignment after the sample: read through.
  std::array<std::uint8_t, 2 * sizeof(std::int64_t)> after{};
  const std::size_t gap = static_cast<std::size_t>(info_.label_offset) - sample_bytes;
  const std::size_t after_bytes = gap + dtype_size(info_.label_dtype);
  if (file_) {
    file_->read_at(offset, out, sample_bytes, after.data(), after_bytes);
  } else {
    std::memcpy(out, bytes_.data() + offset, sample_bytes);  // in range: decode_header checked the size
    std::memcpy(after.data(), bytes_.data() + offset + sample_bytes, after_bytes);
  }
  return check_label(index, after.data() + gap);
}

ShardInfo read_shard_info(const std::string& path) { return Shard::open(path).info(); }

// ---- ShardDataset

ShardDataset::ShardDataset(const std::string& path) : shard_(Shard::open(path)) {}

Sample ShardDataset::get(std::int64_t index) const { return get_by_reading(index); }

std::string ShardDataset::describe() const {
  const ShardInfo& info = shard_.info();
  return detail::str("shard ", shard_.name(), ": ", info.records, " samples of ", shape_str(info.sample_shape), " ",
                     info.sample_dtype, ", ", info.label_dtype, " labels, ", info.num_classes, " classes");
}

// ---- ShardWriter

ShardWriter::ShardWriter(std::string path, Shape sample_shape, DType sample_dtype, DType label_dtype,
                         std::int64_t num_classes)
    : info_(shard_layout(sample_shape, sample_dtype, label_dtype, path)),
      file_(std::move(path)),
      declared_classes_(num_classes) {
  FRUGAL_CHECK_VALUE(num_classes >= 0 && num_classes - 1 <= max_label(label_dtype), file_.path(), ": ", num_classes,
                     " classes do not fit ", label_dtype, " labels");
  info_.num_classes = num_classes;
  record_.assign(static_cast<std::size_t>(info_.record_size), 0);  // the padding stays zero
  // The header's place, filled by finish() once the counts are known. Zeros fail the magic check, so
  // a reader of the temporary file would refuse it.
  const std::array<std::uint8_t, kShardHeaderBytes> reserved{};
  file_.write(reserved.data(), reserved.size());
}

void ShardWriter::check_open(const char* what) const {
  FRUGAL_CHECK_VALUE(!finished_, file_.path(), ": ShardWriter::", what, " after finish()");
}

void ShardWriter::add(const Tensor& sample, std::int64_t label) {
  check_open("add");
  FRUGAL_CHECK_DEVICE(sample.device().is_cpu(), file_.path(), ": ShardWriter::add takes CPU tensors, got one on ",
                      sample.device());
  FRUGAL_CHECK_DTYPE(sample.dtype() == info_.sample_dtype, file_.path(), ": ShardWriter::add: sample dtype ",
                     sample.dtype(), ", the shard holds ", info_.sample_dtype);
  FRUGAL_CHECK_SHAPE(sample.shape() == info_.sample_shape, file_.path(), ": ShardWriter::add: sample shape ",
                     shape_str(sample.shape()), ", the shard holds ", shape_str(info_.sample_shape));
  MemoryTagScope scope(MemoryTag::data);  // the copy a strided sample needs
  add_raw(sample.contiguous().data_ptr(), label);
}

void ShardWriter::add_raw(const void* sample_bytes, std::int64_t label) {
  check_open("add_raw");
  FRUGAL_CHECK_VALUE(label >= 0 && label <= max_label(info_.label_dtype), file_.path(), ": label ", label,
                     " does not fit the shard's ", info_.label_dtype, " labels (0 to ", max_label(info_.label_dtype),
                     ")");
  FRUGAL_CHECK_VALUE(declared_classes_ == 0 || label < declared_classes_, file_.path(), ": label ", label,
                     " is out of range for the ", declared_classes_, " classes declared");
  std::memcpy(record_.data(), sample_bytes, static_cast<std::size_t>(info_.sample_bytes));
  std::uint8_t* at = record_.data() + info_.label_offset;
  switch (info_.label_dtype) {
    case DType::u8: *at = static_cast<std::uint8_t>(label); break;
    case DType::i32: store_le<std::int32_t>(at, static_cast<std::int32_t>(label)); break;
    default: store_le<std::int64_t>(at, label); break;
  }
  file_.write(record_.data(), record_.size());
  ++info_.records;
  info_.num_classes = std::max(info_.num_classes, label + 1);
}

void ShardWriter::finish() {
  check_open("finish");
  const auto header = encode_header(info_);
  info_.header_crc = load_le<std::uint32_t>(&header[kCrcAt]);
  file_.write_at(0, header.data(), header.size());
  file_.commit();
  finished_ = true;
}

}  // namespace frugal::data
