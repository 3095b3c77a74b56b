// parallel_for: the one way frugal's CPU loops use OpenMP threads, and only when a loop is big
// enough to pay for them (Note [Small loops run on the calling thread]). Host code only.
// Not here: OpenBLAS's own threading (it decides for itself), or the data loader's worker threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace frugal::cpu {

// Note [Small loops run on the calling thread]
// Opening an OpenMP parallel region wakes the team's threads and waits at its end for the slowest.
// On an idle 2-core machine that costs about 1 us; with other threads busy beside it (two loader
// workers, a build) it costs milliseconds whenever a team thread is descheduled: padding one 28x28
// sample took 6.5 us idle, 45 us beside two busy threads and 2.9-4.4 ms on a loaded machine, against
// 5.5 us on one thread. So a loop runs on its caller unless it has at least kMinParallelWork element
// operations (its `work`, counted by the caller: elements touched, or multiply-adds). Measured here
// with a y = 2x + 1 loop over floats beside two busy compilers: 4096 elements took 1.7 us on one
// thread and 2.6 us in a region; 32768 took 19 us on one thread and 13 us on two. From there on the
// second thread pays for the region; the risk of a descheduled team thread (one run of 262144
// elements took 8 ms) remains, and is taken only for work that size. It is the grain size of
// PyTorch's at::parallel_for too (GRAIN_SIZE = 32768). `frugal bench tensor`'s pad_28x28 measures a
// small copy.
inline constexpr std::int64_t kMinParallelWork = 32768;

inline bool worth_parallel(std::int64_t work) { return work >= kMinParallelWork; }

// How many parallel regions parallel_for has opened in this process: tests check that small work
// opens none, and a teaching sample can count them.
inline std::atomic<std::uint64_t> g_parallel_regions{0};
inline std::uint64_t parallel_regions_opened() { return g_parallel_regions.load(std::memory_order_relaxed); }

// Note [Threads claim pieces of a loop]
// A static split gives each thread its share of a loop up front, and the region ends when the slowest
// thread has done its share. On a host whose second core is shared with other machines that thread
// is often the slower one, by more than the loop's imbalance: the split then runs at the slow
// thread's pace. So a loop goes in about kPiecesPerThread pieces per thread, each claimed by
// whichever thread is free (an atomic counter, as in OpenMP's dynamic schedule): a fast thread takes
// more pieces, and a thread that wakes late finds fewer left. A claim is one atomic add, so a few
// per thread cost nothing beside a region's wake-up. Which thread runs an index never changes what
// body(i) computes, so results stay those of any thread count. Measured 2026-12-06 on the 2-core
// development host with the training steps and eval forwards of `frugal bench train`, alternating in
// one process between 1 thread, a static split on 2 and claimed pieces on 2: docs/benchmarks.md,
// "The speed of `frugal train` on the CPU".
inline constexpr std::int64_t kPiecesPerThread = 4;

// Note [Each thread starts on its own share]
// Which pieces a thread claims first matters too. Each thread first claims, in order, the pieces of
// its own share (the t-th of the team's equal contiguous parts of the loop) and only then what is
// left of the others' shares. Threads running at the same pace each run their own share, as a
// static split would, so consecutive loops over the same order (most of frugal's run over a batch's
// planes, sample by sample) give a thread the same samples, whose tensors it wrote itself and finds
// in its own core's caches; a slower thread still leaves the rest of its share to the others. With
// pieces claimed in any order, about half of what a loop reads was written on the other core: cheap
// where the two cores share an L3, dear where they do not, and this host's hypervisor moves its two
// vCPUs between the two placements (Note [Where the two cores sit] in bench/train_bench.cpp).
// Measured 2026-12-07 (docs/benchmarks.md): the standard stem's 2-thread training step faster in 28
// of 32 pairs of processes against pieces claimed in any order (medians 44.9 and 42.0 ms against
// 47.4 and 44.9); the CIFAR stem's 2-6% faster in three pairs in the second placement, and slower in
// four of five in the first, by 0.4-7.8%, within what its steps vary from process to process.
// The shares live on the caller's stack, at most kMaxShares of them (4 KiB); in a larger team thread
// t starts on share t mod kMaxShares, which several threads then claim from.
inline constexpr int kMaxShares = 64;

// One thread's share of a loop's pieces: the next piece to claim and the end. On its own cache line,
// so that claims from one share do not slow claims from the next.
struct alignas(64) LoopShare {
  std::int64_t next;
  std::int64_t end;
};

// Calls body(i) for i in [0, count) in one parallel region of omp_get_max_threads() threads, whatever
// the work: claimed in pieces (Note [Threads claim pieces of a loop]), each thread starting on its own
// share (Note [Each thread starts on its own share]). For callers that have decided a region pays
// (nn/batch_slices.cpp); loops of element operations call parallel_for below.
template <typename Body>
void parallel_for_in_region(std::int64_t count, Body&& body) {
  g_parallel_regions.fetch_add(1, std::memory_order_relaxed);
  const int threads = omp_get_max_threads(), share_count = std::min(threads, kMaxShares);
  const std::int64_t piece = std::max<std::int64_t>(1, count / (kPiecesPerThread * threads));
  const std::int64_t pieces = (count + piece - 1) / piece;
  LoopShare shares[kMaxShares];  // the first share_count used; written here, read after the region starts
  for (int s = 0; s < share_count; ++s) shares[s] = {pieces * s / share_count, pieces * (s + 1) / share_count};
#pragma omp parallel num_threads(threads)
  {
    const int own = omp_get_thread_num() % share_count;
    for (int k = 0; k < share_count; ++k) {  // its own share, then the others' in turn
      LoopShare& share = shares[(own + k) % share_count];
      const std::atomic_ref<std::int64_t> next(share.next);
      for (std::int64_t p; (p = next.fetch_add(1, std::memory_order_relaxed)) < share.end;) {
        const std::int64_t end = std::min(count, (p + 1) * piece);
        for (std::int64_t i = p * piece; i < end; ++i) body(i);
      }
    }
  }
}

// Calls body(i) for i in [0, count): parallel_for_in_region when `work` (the whole loop's element
// operations) is worth a region, else in order on the calling thread. body(i) for different i must
// not write the same memory.
template <typename Body>
void parallel_for(std::int64_t count, std::int64_t work, Body&& body) {
  if (!worth_parallel(work)) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  parallel_for_in_region(count, body);
}

// The same over chunks: body(begin, end) for consecutive ranges of at most `chunk` indices.
template <typename Body>
void parallel_for_chunks(std::int64_t count, std::int64_t chunk, std::int64_t work, Body&& body) {
  const std::int64_t chunks = (count + chunk - 1) / chunk;
  parallel_for(chunks, work, [&](std::int64_t c) {
    const std::int64_t begin = c * chunk;
    body(begin, begin + chunk < count ? begin + chunk : count);
  });
}

}  // namespace frugal::cpu
