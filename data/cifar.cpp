// CIFAR binary batches: size checks, labels checked as records are read, and the dataset over
// several batch files.
#include "data/cifar.h"

#include <array>
#include <cstring>

#include "data/dataset_ops.h"

namespace frugal::data {

std::size_t cifar_record_size(CifarKind kind) {
  return (kind == CifarKind::cifar10 ? 1 : 2) + kCifarPixelBytes;  // one label byte, or coarse and fine
}

std::int64_t cifar_num_classes(CifarKind kind) {
  switch (kind) {
    case CifarKind::cifar10: return 10;
    case CifarKind::cifar100_fine: return 100;
    case CifarKind::cifar100_coarse: return 20;
  }
  FRUGAL_THROW(ValueError, "unknown CifarKind ", static_cast<int>(kind));
}

namespace {
const char* kind_name(CifarKind kind) {
  return kind == CifarKind::cifar10 ? "CIFAR-10" : kind == CifarKind::cifar100_fine ? "CIFAR-100 (fine labels)"
                                                                                    : "CIFAR-100 (coarse labels)";
}
}  // namespace

// ---- CifarBatch

CifarBatch CifarBatch::parse(std::span<const std::uint8_t> bytes, std::string name, CifarKind kind) {
  const std::size_t record_size = cifar_record_size(kind);
  FRUGAL_CHECK_VALUE(!bytes.empty() && bytes.size() % record_size == 0, name, ": ", bytes.size(),
                     " bytes is not a whole number of ", kind_name(kind), " records of ", record_size,
                     " bytes (", bytes.size() / record_size, " records and ", bytes.size() % record_size,
                     " bytes left over)");
  CifarBatch batch;
  batch.name_ = std::move(name);
  batch.kind_ = kind;
  batch.bytes_ = bytes;
  return batch;
}

CifarBatch CifarBatch::open(const std::string& path, CifarKind kind) {
  // A batch file is 30 MB read every epoch: read it in now.
  auto file = std::make_shared<const MappedFile>(path, Access::willneed);
  CifarBatch batch = parse(file->bytes(), path, kind);
  batch.file_ = std::move(file);
  return batch;
}

const std::uint8_t* CifarBatch::record(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), name_, ": record ", index, " is out of range for ", size(),
                     " records");
  return bytes_.data() + static_cast<std::size_t>(index) * cifar_record_size(kind_);
}

std::int64_t CifarBatch::label(std::int64_t index) const { return check_label(index, record(index)); }

std::int64_t CifarBatch::read(std::int64_t index, void* out) const {
  const std::uint8_t* stored = record(index);  // checks the index; not read through
  std::array<std::uint8_t, 2> labels{};
  const std::size_t label_bytes = cifar_record_size(kind_) - kCifarPixelBytes;
  if (file_) {
    file_->file().read_at(static_cast<std::uint64_t>(stored - file_->data()), labels.data(), label_bytes, out,
                          kCifarPixelBytes);
  } else {
    std::memcpy(labels.data(), stored, label_bytes);
    std::memcpy(out, stored + label_bytes, kCifarPixelBytes);
  }
  return check_label(index, labels.data());
}

std::int64_t CifarBatch::check_label(std::int64_t index, const std::uint8_t* labels) const {
  // CIFAR-100 stores the coarse label first, then the fine one.
  const std::int64_t label = labels[kind_ == CifarKind::cifar100_fine ? 1 : 0];
  FRUGAL_CHECK_VALUE(label < cifar_num_classes(kind_), name_, ": record ", index, " has label ", label,
                     ", out of range for the ", cifar_num_classes(kind_), " classes of ", kind_name(kind_));
  return label;
}

const std::uint8_t* CifarBatch::pixels(std::int64_t index) const {
  return record(index) + cifar_record_size(kind_) - kCifarPixelBytes;
}

// ---- CifarDataset

CifarDataset::CifarDataset(const std::vector<std::string>& paths, CifarKind kind) : kind_(kind), starts_{0} {
  FRUGAL_CHECK_VALUE(!paths.empty(), "CifarDataset: no batch files given");
  for (const std::string& path : paths) {
    batches_.push_back(CifarBatch::open(path, kind));
    starts_.push_back(starts_.back() + batches_.back().size());
  }
}

Sample CifarDataset::get(std::int64_t index) const { return get_by_reading(index); }

std::int64_t CifarDataset::get_into(std::int64_t index, void* out) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "CifarDataset: index ", index, " is out of range for ", size(),
                     " samples");
  const auto [b, record] = locate(starts_, index);
  return batches_[b].read(record, out);
}

std::string CifarDataset::describe() const {
  return detail::str(kind_name(kind_), " ", batches_.front().name(),
                     batches_.size() > 1 ? detail::str(" and ", batches_.size() - 1, " more files") : "", ": ",
                     size(), " samples of [3, 32, 32] u8, ", num_classes(), " classes");
}

}  // namespace frugal::data
