// Samplers (see sampler.h).
#include "data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "data/random_stream.h"

namespace frugal::data {

void Sampler::set_epoch(std::int64_t epoch) {
  FRUGAL_CHECK_VALUE(epoch >= 0 && epoch < (std::int64_t{1} << 32), "Sampler::set_epoch: epoch ", epoch,
                     " is outside [0, 2^32)");
  epoch_ = epoch;
}

std::vector<std::int64_t> sequential_indices(std::int64_t size) {
  FRUGAL_CHECK_VALUE(size >= 0, "sampler: dataset size must be >= 0, got ", size);
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  return order;
}

std::vector<std::int64_t> random_permutation(std::int64_t size, std::uint64_t seed, std::int64_t epoch) {
  // RandomStream::randint draws ranges up to 2^32, far beyond any dataset frugal meets.
  FRUGAL_CHECK_VALUE(size <= (std::int64_t{1} << 32), "random_permutation: size ", size, " exceeds 2^32");
  std::vector<std::int64_t> order = sequential_indices(size);
  RandomStream random(seed, epoch, RandomStream::kSamplerStream);
  for (std::int64_t i = size - 1; i > 0; --i) std::swap(order[i], order[random.randint(0, i + 1)]);
  return order;
}

SequentialSampler::SequentialSampler(std::int64_t size) : size_(size) {
  FRUGAL_CHECK_VALUE(size >= 0, "SequentialSampler: size must be >= 0, got ", size);
}

RandomSampler::RandomSampler(std::int64_t size, std::uint64_t seed) : size_(size), seed_(seed) {
  FRUGAL_CHECK_VALUE(size >= 0, "RandomSampler: size must be >= 0, got ", size);
}

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed) {
  FRUGAL_CHECK_VALUE(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size);
  FRUGAL_CHECK_VALUE(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  FRUGAL_CHECK_VALUE(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is outside [0, ",
                     num_replicas, ")");
  per_rank_ = drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const std::vector<std::int64_t> order =
      shuffle_ ? random_permutation(dataset_size_, seed_, epoch()) : sequential_indices(dataset_size_);
  // Position p of the padded order is order[p % size]: past the end, the order repeats from its start
  // (torch pads the same way). With drop_last no position reaches the end.
  std::vector<std::int64_t> mine(static_cast<std::size_t>(per_rank_));
  for (std::int64_t i = 0; i < per_rank_; ++i) mine[i] = order[(rank_ + i * num_replicas_) % dataset_size_];
  return mine;
}

}  // namespace frugal::data
