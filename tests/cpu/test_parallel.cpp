// parallel_for (core/cpu/parallel.h): small loops stay on the calling thread and open no OpenMP
// region; big ones are split in pieces the threads claim, each thread starting on its own share, and
// either way every index is visited exactly once, in a team of any size. Counted with
// parallel_regions_opened() and per thread, never timed.
#include <doctest/doctest.h>

#include <omp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/tensor.h"
#include "data/transforms.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "tests/cpu/thread_scopes.h"

using namespace frugal;
using cpu::parallel_regions_opened;

TEST_CASE("parallel_for: every index once, on the caller below kMinParallelWork, split above it") {
  for (const std::int64_t work : {std::int64_t{1}, cpu::kMinParallelWork - 1, cpu::kMinParallelWork, std::int64_t{1} << 20}) {
    constexpr std::int64_t kCount = 1000;
    std::vector<std::atomic<int>> visits(kCount);
    const auto before = parallel_regions_opened();
    cpu::parallel_for(kCount, work, [&](std::int64_t i) { visits[static_cast<std::size_t>(i)]++; });
    for (const auto& v : visits) CHECK(v.load() == 1);
    CHECK(parallel_regions_opened() - before == (work >= cpu::kMinParallelWork ? 1u : 0u));
  }
  std::vector<int> chunks_seen(10, 0);
  cpu::parallel_for_chunks(95, 10, 1, [&](std::int64_t begin, std::int64_t end) {
    CHECK(end - begin == (begin == 90 ? 5 : 10));
    chunks_seen[static_cast<std::size_t>(begin / 10)]++;
  });
  CHECK(chunks_seen == std::vector<int>(10, 1));
}

TEST_CASE("parallel_for: a team larger than kMaxShares shares the shares, every index once") {
  const test::OmpThreadsScope big_team(cpu::kMaxShares + 6);
  constexpr std::int64_t kCount = 5000;
  std::vector<std::atomic<int>> visits(kCount);
  cpu::parallel_for(kCount, cpu::kMinParallelWork, [&](std::int64_t i) { visits[static_cast<std::size_t>(i)]++; });
  for (const auto& v : visits) CHECK(v.load() == 1);
}

TEST_CASE("parallel_for_in_region: one region whatever the work, every index once") {
  const test::OmpThreadsScope two_threads(2);
  std::vector<std::atomic<int>> visits(3);
  const auto before = parallel_regions_opened();
  cpu::parallel_for_in_region(3, [&](std::int64_t i) { visits[static_cast<std::size_t>(i)]++; });
  CHECK(parallel_regions_opened() - before == 1u);
  for (const auto& v : visits) CHECK(v.load() == 1);
}

TEST_CASE("parallel_for: while one thread is held up in a piece, the other claims the rest") {
  // A static split would give each of 2 threads 4 of the 8 indices whatever happened; with claimed
  // pieces (Note [Threads claim pieces of a loop]) the thread that is not stuck in index 0 takes every
  // piece left (its own share's, then the stuck thread's: Note [Each thread starts on its own
  // share]), so the stuck thread runs none after it, or, if the other never arrived, the first
  // thread does all 8 alone.
  const test::OmpThreadsScope two_threads(2);
  {
    std::array<std::atomic<int>, 2> pieces{}, after_hold{};
    std::atomic<int> held_thread{-1};
    cpu::parallel_for(8, cpu::kMinParallelWork, [&](std::int64_t i) {
      const int thread = omp_get_thread_num();
      pieces[static_cast<std::size_t>(thread)]++;
      if (held_thread.load() == thread) after_hold[static_cast<std::size_t>(thread)]++;
      if (i == 0) {
        held_thread = thread;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
    });
    const int held = held_thread.load(), other = 1 - held;
    CHECK(pieces[0] + pieces[1] == 8);
    const bool other_took_the_rest = after_hold[static_cast<std::size_t>(held)] == 0;
    const bool one_thread_alone = pieces[static_cast<std::size_t>(other)] == 0;
    CHECK((other_took_the_rest || one_thread_alone));
  }
}

TEST_CASE("parallel_for: each thread starts on its own contiguous share") {
  // Note [Each thread starts on its own share]: with 2 threads and 8 indices (pieces of 1), thread 0's
  // share is 0-3 and thread 1's 4-7. Each thread's first index waits (up to a few seconds) until both
  // have begun one, so neither can finish its share and take the other's first piece: each first
  // index is the start of its own share. Claimed in any order, thread 1 would begin at 0 or 1.
  const test::OmpThreadsScope two_threads(2);
  std::array<std::atomic<std::int64_t>, 2> first{-1, -1};
  std::atomic<int> began{0};
  cpu::parallel_for(8, cpu::kMinParallelWork, [&](std::int64_t i) {
    const auto thread = static_cast<std::size_t>(omp_get_thread_num());
    std::int64_t unset = -1;
    if (first[thread].compare_exchange_strong(unset, i)) {
      began++;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (began.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
  });
  REQUIRE(began.load() == 2);
  CHECK(first[0].load() == 0);
  CHECK(first[1].load() == 4);
}

TEST_CASE("one 28x28 sample's transforms, a small add, conv and loss open no parallel region") {
  data::RandomStream random(1, 0, 0);
  const Tensor image = arange(784.0).view({1, 28, 28});
  const auto before = parallel_regions_opened();
  const Tensor padded = data::Pad(2).apply(image, random);  // a fill, then one copy per row
  const Tensor cropped = data::RandomCrop(28, 28).apply(padded, random);
  const Tensor sum = add(cropped, cropped);
  const Tensor y = conv2d(sum.view({1, 1, 28, 28}), ones({4, 1, 3, 3}));
  cross_entropy(zeros({8, 10}), zeros({8}, {.dtype = DType::i64}));
  CHECK(parallel_regions_opened() == before);
  CHECK(padded.shape() == Shape{1, 32, 32});
  CHECK(y.shape() == Shape{1, 4, 26, 26});
}

TEST_CASE("a large strided copy is still split across threads") {
  const Tensor big = zeros({1024, 1024});
  const auto before = parallel_regions_opened();
  const Tensor transposed = big.t().contiguous();  // strided: the chunked loop, not memcpy
  CHECK(parallel_regions_opened() > before);
  CHECK(transposed.shape() == Shape{1024, 1024});
}
