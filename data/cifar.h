// The CIFAR-10 and CIFAR-100 binary batches (data_batch_1.bin ... test_batch.bin, train.bin,
// test.bin): a file is a run of fixed-size records with no header.
//   CIFAR-10 record, 3073 bytes:  label (0-9), then 3072 pixel bytes
//   CIFAR-100 record, 3074 bytes: coarse label (0-19), fine label (0-99), then 3072 pixel bytes
// The 3072 pixel bytes are 1024 red, 1024 green, 1024 blue: three 32x32 row-major planes, which is
// already the [3, 32, 32] layout of a sample, so a sample is one memcpy from the mapping.
// Not here: the class names (batches.meta.txt), normalisation (data/transforms.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/mapped_file.h"

namespace frugal::data {

// Which CIFAR a file holds and, for CIFAR-100, which of its two labels a sample carries.
enum class CifarKind : std::uint8_t { cifar10, cifar100_fine, cifar100_coarse };
std::size_t cifar_record_size(CifarKind kind);   // 3073 or 3074
std::int64_t cifar_num_classes(CifarKind kind);  // 10, 100 or 20

inline constexpr std::int64_t kCifarChannels = 3, kCifarSize = 32;
inline constexpr std::size_t kCifarPixelBytes = 3 * 32 * 32;

// One batch file, its size checked. Cheap to copy (copies share the mapping); immutable.
class CifarBatch {
 public:
  // Bytes the caller owns and keeps alive as long as the batch; `name` starts every error message.
  // ValueError if the size is not a positive multiple of the record size.
  static CifarBatch parse(std::span<const std::uint8_t> bytes, std::string name, CifarKind kind);
  static CifarBatch open(const std::string& path, CifarKind kind);  // maps the file; FileError if unreadable

  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size() / cifar_record_size(kind_)); }
  // The label of record `index`; ValueError naming the file and record if it is out of range.
  std::int64_t label(std::int64_t index) const;
  const std::uint8_t* pixels(std::int64_t index) const;  // kCifarPixelBytes bytes, [3, 32, 32]
  // Copies record `index`'s pixels (kCifarPixelBytes bytes) to `out` and returns its label, checked
  // as label() checks it. From a file both are read with one preadv, not from the mapping: FileError
  // naming the file if it shrank since it was opened (core/mapped_file.h).
  std::int64_t read(std::int64_t index, void* out) const;
  CifarKind kind() const { return kind_; }
  const std::string& name() const { return name_; }

 private:
  CifarBatch() = default;
  const std::uint8_t* record(std::int64_t index) const;  // IndexError outside [0, size())
  std::int64_t check_label(std::int64_t index, const std::uint8_t* labels) const;  // the record's label bytes

  std::shared_ptr<const MappedFile> file_;  // keeps the mapping alive; null for parse()d bytes
  std::string name_;
  CifarKind kind_ = CifarKind::cifar10;
  std::span<const std::uint8_t> bytes_;
};

// One or several batch files read as one dataset, in the order given: samples [3, 32, 32] u8.
// Labels are checked as samples are read (get), so opening six 30 MB files reads none of them.
class CifarDataset final : public Dataset {
 public:
  CifarDataset(const std::vector<std::string>& paths, CifarKind kind);  // ValueError if paths is empty

  std::int64_t size() const override { return starts_.back(); }
  Sample get(std::int64_t index) const override;
  std::int64_t get_into(std::int64_t index, void* out) const override;
  Shape sample_shape() const override { return {kCifarChannels, kCifarSize, kCifarSize}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return cifar_num_classes(kind_); }
  std::string describe() const override;

 private:
  CifarKind kind_;
  std::vector<CifarBatch> batches_;
  std::vector<std::int64_t> starts_;  // starts_[b] = index of batch b's first sample; back() = size()
};

}  // namespace frugal::data
