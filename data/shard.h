// frugal's shard format: fixed-size records (a sample of one shape and dtype, then its label) after a
// checksummed header, each record aligned to 64 bytes. `frugal pack` writes a dataset once into a
// shard; training then reads each sample with one read straight into its tensor, however the
// samples were stored before (decoded images, gzipped IDX). Byte layout (all little-endian):
//
//   offset  size  field
//        0     8  magic "FRUGALSH"
//        8     4  version, u32 (1)
//       12     1  sample dtype code (see kShardDTypeCodes in shard.cpp)
//       13     1  label dtype code: u8, i32 or i64
//       14     1  rank of the sample shape, 0..8
//       15     1  zero
//       16     8  record count, u64
//       24     8  record size in bytes, u64: sample bytes, then the label at the next multiple of
//                 its own size, then zeros up to a multiple of 64
//       32     8  data offset, u64: where record 0 starts (128)
//       40     8  number of classes, u64: the count the writer was given, else the largest label + 1
//                 (0 for an empty shard)
//       48    64  sample shape: 8 dims, i64 each; dims past the rank are 0
//      112    12  zero
//      124     4  CRC-32 (zlib's crc32) of bytes 0..123
//      128     .  records: record i at data offset + i * record size
//
// Not here: which dataset a shard came from, compression, variable-size records (images are resized
// to one size before packing).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/mapped_file.h"

namespace frugal::data {

inline constexpr char kShardMagic[8] = {'F', 'R', 'U', 'G', 'A', 'L', 'S', 'H'};
inline constexpr std::uint32_t kShardVersion = 1;
inline constexpr std::int64_t kShardHeaderBytes = 128;  // the fields above, padded to a record alignment
inline constexpr std::int64_t kShardAlignment = 64;     // a cache line: records never straddle one needlessly
inline constexpr std::int64_t kShardMaxRank = 8;

// What a shard's header says, and the layout it implies.
struct ShardInfo {
  std::uint32_t version = kShardVersion;
  std::int64_t records = 0;
  Shape sample_shape;
  DType sample_dtype = DType::u8;
  DType label_dtype = DType::i64;
  std::int64_t num_classes = 0;
  std::int64_t sample_bytes = 0;  // numel(sample_shape) * dtype_size(sample_dtype)
  std::int64_t label_offset = 0;  // within a record
  std::int64_t record_size = 0;
  std::int64_t data_offset = kShardHeaderBytes;
  std::uint32_t header_crc = 0;
};

// The layout of records of this sample shape and dtype and label dtype (records and num_classes 0).
// ValueError, starting with `name`, for a rank above 8, a dim below 1, a label dtype other than
// u8/i32/i64, or a sample above 2^40 bytes.
ShardInfo shard_layout(const Shape& sample_shape, DType sample_dtype, DType label_dtype,
                       std::string_view name = "shard");

// One shard, its header and size checked. Records are read from a file with pread (open()) or
// from bytes in memory (parse()). Cheap to copy (copies share the file); immutable; thread-safe.
class Shard {
 public:
  // Bytes the caller owns and keeps alive as long as the shard; `name` starts every error message.
  // ValueError for a short or corrupt header (checksum), a wrong magic number or version, a layout
  // that does not match its shape and dtypes, or a file shorter or longer than its records.
  static Shard parse(std::span<const std::uint8_t> bytes, std::string name);
  // Reads and checks the header; records are read when asked for. FileError if unreadable.
  static Shard open(const std::string& path);

  const ShardInfo& info() const { return info_; }
  std::int64_t size() const { return info_.records; }
  // Copies record `index`'s sample (info().sample_bytes bytes) to `out` and returns its label.
  // IndexError if out of range; ValueError naming the file and record if the label is negative or
  // not below num_classes (the file was changed after it was written); FileError if a read fails.
  std::int64_t read(std::int64_t index, void* out) const;
  std::int64_t label(std::int64_t index) const;  // checked as read() checks it
  const std::string& name() const { return name_; }

 private:
  Shard() = default;
  std::uint64_t record_offset(std::int64_t index) const;  // IndexError if out of range
  void read_bytes(std::uint64_t offset, void* out, std::size_t count) const;
  std::int64_t check_label(std::int64_t index, const std::uint8_t* stored) const;

  std::shared_ptr<const RandomAccessFile> file_;  // null for parse()d bytes
  std::span<const std::uint8_t> bytes_;           // parse()d bytes; empty for a file
  std::string name_;
  ShardInfo info_;
};

// The header of the shard at `path` (for `frugal inspect`), checked as Shard::open checks it.
ShardInfo read_shard_info(const std::string& path);

// A shard as a dataset: samples of the stored shape and dtype, labels as stored. Each get() is one
// preadv call, the sample straight into the new tensor and the label beside it: streaming a shard
// larger than RAM keeps the process's RSS flat, where a mapping's touched pages would count in it.
class ShardDataset final : public Dataset {
 public:
  explicit ShardDataset(const std::string& path);

  std::int64_t size() const override { return shard_.size(); }
  Sample get(std::int64_t index) const override;
  std::int64_t get_into(std::int64_t index, void* out) const override { return shard_.read(index, out); }
  Shape sample_shape() const override { return shard_.info().sample_shape; }
  DType sample_dtype() const override { return shard_.info().sample_dtype; }
  std::int64_t num_classes() const override { return shard_.info().num_classes; }
  std::string describe() const override;

  const ShardInfo& info() const { return shard_.info(); }

 private:
  Shard shard_;
};

// Writes a shard record by record, never holding more than one record (a packed dataset may be
// larger than RAM). The file appears under `path` only when finish() succeeds: until then the
// records go to a temporary file beside it (AtomicFile), which is removed if the writer is
// destroyed unfinished. Not thread-safe.
class ShardWriter {
 public:
  // `num_classes`: the dataset's class count, which every label must be below; 0 = the largest
  // label + 1 (a file holding only some classes then reports fewer). ValueError as shard_layout, or
  // for a negative count or one the label dtype cannot hold; FileError if the folder is not writable.
  ShardWriter(std::string path, Shape sample_shape, DType sample_dtype, DType label_dtype = DType::i64,
              std::int64_t num_classes = 0);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // A CPU tensor of the sample shape and dtype, any strides. ShapeError/DTypeError/DeviceError if
  // it is not; ValueError if the label is negative, not below the declared class count, or does not
  // fit the label dtype.
  void add(const Tensor& sample, std::int64_t label);
  // `sample_bytes`: one contiguous sample, info().sample_bytes bytes in the sample dtype.
  void add_raw(const void* sample_bytes, std::int64_t label);
  std::int64_t records() const { return info_.records; }
  const ShardInfo& info() const { return info_; }  // the header finish() will write
  // Writes the header with the final count and class count, syncs, renames into place.
  void finish();
  ~ShardWriter() = default;  // unfinished: the AtomicFile removes the temporary file

 private:
  void check_open(const char* what) const;

  ShardInfo info_;
  AtomicFile file_;
  std::vector<std::uint8_t> record_;  // the record being written, padding included
  std::int64_t declared_classes_;     // 0: none declared
  bool finished_ = false;
};

}  // namespace frugal::data
