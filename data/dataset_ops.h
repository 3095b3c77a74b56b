// Datasets made from other datasets: InMemoryDataset (every sample read into RAM once), Subset
// (chosen indices of one dataset) and ConcatDataset (several datasets one after another), as
// torch.utils.data's Subset and ConcatDataset. Also locate(), the index arithmetic of any
// dataset made of consecutive parts (ConcatDataset, CifarDataset's files).
// Not here: random splits and shuffling (data/sampler.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace frugal::data {

// Where a global index falls among consecutive parts, given starts = {0, n0, n0 + n1, ..., total}:
// the part whose range [starts[part], starts[part + 1]) holds it, and the index within that part.
// `index` must be in [0, starts.back()).
struct PartIndex {
  std::size_t part;
  std::int64_t index;
};
PartIndex locate(std::span<const std::int64_t> starts, std::int64_t index);

// Every sample of `source` read at construction into one [N, ...sample shape] tensor (allocated
// under MemoryTag::data) and a label list. Kept on purpose, to measure streaming from a mapping
// against reading from RAM: for a dataset that fits, it costs the RAM and a full read up front.
class InMemoryDataset final : public Dataset {
 public:
  // ShapeError/DTypeError if a sample differs from the shape and dtype the source declares.
  explicit InMemoryDataset(const Dataset& source);

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  Sample get(std::int64_t index) const override;  // a copy, as every dataset returns
  std::int64_t get_into(std::int64_t index, void* out) const override;
  Shape sample_shape() const override { return sample_shape_; }
  DType sample_dtype() const override { return samples_.dtype(); }
  std::int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override { return description_; }

 private:
  Tensor samples_;  // [N, ...sample shape]
  std::vector<std::int64_t> labels_;
  Shape sample_shape_;
  std::int64_t num_classes_;
  std::string description_;
};

// The samples of `source` at `indices`, in that order (repeats allowed).
class Subset final : public Dataset {
 public:
  Subset(DatasetPtr source, std::vector<std::int64_t> indices);  // IndexError for an index out of range

  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Sample get(std::int64_t index) const override;
  std::int64_t get_into(std::int64_t index, void* out) const override;
  Shape sample_shape() const override { return source_->sample_shape(); }
  DType sample_dtype() const override { return source_->sample_dtype(); }
  std::int64_t num_classes() const override { return source_->num_classes(); }
  std::string describe() const override;

 private:
  std::int64_t source_index(std::int64_t index) const;  // IndexError if out of range

  DatasetPtr source_;
  std::vector<std::int64_t> indices_;
};

// Several datasets one after another. num_classes() is the largest of theirs.
class ConcatDataset final : public Dataset {
 public:
  // ValueError if `parts` is empty; ShapeError/DTypeError if their samples differ in shape or dtype.
  explicit ConcatDataset(std::vector<DatasetPtr> parts);

  std::int64_t size() const override { return starts_.back(); }
  Sample get(std::int64_t index) const override;
  std::int64_t get_into(std::int64_t index, void* out) const override;
  Shape sample_shape() const override { return parts_.front()->sample_shape(); }
  DType sample_dtype() const override { return parts_.front()->sample_dtype(); }
  std::int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;

 private:
  PartIndex part_of(std::int64_t index) const;  // IndexError if out of range

  std::vector<DatasetPtr> parts_;
  std::vector<std::int64_t> starts_;  // starts_[p] = index of part p's first sample; back() = size()
  std::int64_t num_classes_ = 0;
};

}  // namespace frugal::data
