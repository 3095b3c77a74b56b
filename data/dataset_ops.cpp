// InMemoryDataset, Subset, ConcatDataset and locate().
#include "data/dataset_ops.h"

#include <algorithm>
#include <cstring>

#include "core/allocator.h"

namespace frugal::data {

PartIndex locate(std::span<const std::int64_t> starts, std::int64_t index) {
  // The first start above index belongs to the next part.
  const auto part = static_cast<std::size_t>(std::ranges::upper_bound(starts, index) - starts.begin() - 1);
  return {part, index - starts[part]};
}

// ---- InMemoryDataset

InMemoryDataset::InMemoryDataset(const Dataset& source)
    : sample_shape_(source.sample_shape()), num_classes_(source.num_classes()) {
  const std::int64_t count = source.size();
  Shape shape = sample_shape_;
  shape.insert(shape.begin(), count);
  {
    MemoryTagScope scope(MemoryTag::data);
    samples_ = empty(shape, {.dtype = source.sample_dtype()});
  }
  labels_.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const Sample sample = source.get(i);
    FRUGAL_CHECK_SHAPE(sample.input.shape() == sample_shape_, "InMemoryDataset: sample ", i, " of ",
                       source.describe(), " has shape ", shape_str(sample.input.shape()), ", the dataset declares ",
                       shape_str(sample_shape_));
    FRUGAL_CHECK_DTYPE(sample.input.dtype() == samples_.dtype(), "InMemoryDataset: sample ", i, " of ",
                       source.describe(), " is ", sample.input.dtype(), ", the dataset declares ", samples_.dtype());
    samples_.select(0, i).copy_(sample.input);
    labels_.push_back(sample.label);
  }
  description_ = detail::str("in memory (", samples_.nbytes(), " bytes): ", source.describe());
}

Sample InMemoryDataset::get(std::int64_t index) const { return get_by_reading(index); }

std::int64_t InMemoryDataset::get_into(std::int64_t index, void* out) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "InMemoryDataset: index ", index, " is out of range for ", size(),
                     " samples");
  const Tensor row = samples_.select(0, index);  // a contiguous row of a contiguous tensor
  std::memcpy(out, row.data_ptr(), row.nbytes());
  return labels_[static_cast<std::size_t>(index)];
}

// ---- Subset

Subset::Subset(DatasetPtr source, std::vector<std::int64_t> indices)
    : source_(std::move(source)), indices_(std::move(indices)) {
  for (const std::int64_t index : indices_) {
    FRUGAL_CHECK_INDEX(index >= 0 && index < source_->size(), "Subset: index ", index, " is out of range for ",
                       source_->describe());
  }
}

std::int64_t Subset::source_index(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "Subset: index ", index, " is out of range for ", size(),
                     " samples");
  return indices_[static_cast<std::size_t>(index)];
}

Sample Subset::get(std::int64_t index) const { return source_->get(source_index(index)); }

std::int64_t Subset::get_into(std::int64_t index, void* out) const {
  return source_->get_into(source_index(index), out);
}

std::string Subset::describe() const {
  return detail::str("subset of ", size(), " samples of ", source_->describe());
}

// ---- ConcatDataset

ConcatDataset::ConcatDataset(std::vector<DatasetPtr> parts) : parts_(std::move(parts)), starts_{0} {
  FRUGAL_CHECK_VALUE(!parts_.empty(), "ConcatDataset: no datasets given");
  const DatasetPtr& first = parts_.front();
  for (const DatasetPtr& part : parts_) {
    FRUGAL_CHECK_SHAPE(part->sample_shape() == first->sample_shape(), "ConcatDataset: samples of ",
                       shape_str(part->sample_shape()), " (", part->describe(), ") and of ",
                       shape_str(first->sample_shape()), " (", first->describe(), ") cannot be concatenated");
    FRUGAL_CHECK_DTYPE(part->sample_dtype() == first->sample_dtype(), "ConcatDataset: samples of ",
                       part->sample_dtype(), " (", part->describe(), ") and of ", first->sample_dtype(), " (",
                       first->describe(), ") cannot be concatenated");
    starts_.push_back(starts_.back() + part->size());
    num_classes_ = std::max(num_classes_, part->num_classes());
  }
}

PartIndex ConcatDataset::part_of(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "ConcatDataset: index ", index, " is out of range for ", size(),
                     " samples");
  return locate(starts_, index);
}

Sample ConcatDataset::get(std::int64_t index) const {
  const auto [part, within] = part_of(index);
  return parts_[part]->get(within);
}

std::int64_t ConcatDataset::get_into(std::int64_t index, void* out) const {
  const auto [part, within] = part_of(index);
  return parts_[part]->get_into(within, out);
}

std::string ConcatDataset::describe() const {
  std::string text = detail::str("concatenation of ", parts_.size(), " datasets, ", size(), " samples: ");
  for (std::size_t p = 0; p < parts_.size(); ++p) text += (p ? "; " : "") + parts_[p]->describe();
  return text;
}

}  // namespace frugal::data
