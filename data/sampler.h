// Samplers: the order in which the loader visits a dataset's indices, one epoch at a time (torch's
// Sampler family). set_epoch(e) selects the epoch; indices() is that epoch's whole order, a pure
// function of the sampler's arguments and e, so a run can be repeated, or resumed at any epoch.
//   SequentialSampler   0, 1, ..., size-1 every epoch
//   RandomSampler       a fresh permutation per epoch, from (seed, epoch)
//   DistributedSampler  this rank's share of the permutation when `num_replicas` processes train
//                       together (data parallelism): torch.utils.data.DistributedSampler's partition,
//                       padding and drop_last exactly; the shuffled order itself is frugal's own
//                       (Philox, keyed by (seed, epoch)), not torch's randperm
// Not here: batching (data/loader.h). An epoch's order is held as one vector of indices: 8 bytes per
// sample, small next to the samples themselves.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  void set_epoch(std::int64_t epoch);  // ValueError unless 0 <= epoch < 2^32
  std::int64_t epoch() const { return epoch_; }
  virtual std::int64_t size() const = 0;                  // indices per epoch
  virtual std::vector<std::int64_t> indices() const = 0;  // this epoch's, in visiting order

 private:
  std::int64_t epoch_ = 0;
};

// 0, 1, ..., size-1: what a permutation-free sampler of `size` indices returns.
std::vector<std::int64_t> sequential_indices(std::int64_t size);
// A uniformly random permutation of 0..size-1 (Fisher-Yates), a pure function of (seed, epoch).
std::vector<std::int64_t> random_permutation(std::int64_t size, std::uint64_t seed, std::int64_t epoch);

class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(std::int64_t size);
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> indices() const override { return sequential_indices(size_); }

 private:
  std::int64_t size_;
};

class RandomSampler final : public Sampler {
 public:
  RandomSampler(std::int64_t size, std::uint64_t seed);
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> indices() const override { return random_permutation(size_, seed_, epoch()); }

 private:
  std::int64_t size_;
  std::uint64_t seed_;
};

// Rank `rank` of `num_replicas` gets every num_replicas-th index of the epoch's order (shuffled by
// (seed, epoch) when `shuffle`, the same order on every rank), starting at position `rank`. So ranks
// are disjoint and together cover the dataset. Every rank gets the same count, ceil(size / replicas):
// the order is first padded by repeating its start. With drop_last the tail is dropped instead and
// each rank gets floor(size / replicas).
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, std::uint64_t seed = 0,
                     bool drop_last = false);
  std::int64_t size() const override { return per_rank_; }
  std::vector<std::int64_t> indices() const override;

 private:
  std::int64_t dataset_size_;
  int num_replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t per_rank_;
};

}  // namespace frugal::data
