// The CUDA emulator: correct kernels give the right answer under every schedule; deliberately
// broken ones are caught, each by the check meant for it: the hazard checker names a missing barrier
// (read-after-write), a write over values another thread still reads (write-after-read), two
// writers (write-after-write), a race between warps and one inside a warp without __syncwarp; the
// bounds checks name an access past dynamic or static shared memory; the scheduler names a
// __syncthreads in both arms of a branch. With the checker off, the same races show as results that
// differ between schedules. Then frugal's own hand-written kernels (core/cuda/kernels.cu) run in the
// emulator against the CPU kernels.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/random.h"
#include "core/cuda/kernel_support.h"  // after the other headers: it defines threadIdx & co. as macros
#include "core/tensor.h"

using frugal::emu::KernelError;
using frugal::emu::Options;
using frugal::emu::OptionsScope;
using frugal::emu::Schedule;

// An element of shared memory is used in the expression that names it, never kept: `auto v = p[i];`
// and a later use of v would read after the GPU does, so that use does not compile.
static_assert(!std::is_convertible_v<frugal::emu::SharedRef<float>&, float>);
static_assert(std::is_convertible_v<frugal::emu::SharedRef<float>&&, float>);

namespace {

const Options kSchedules[] = {{Schedule::forward}, {Schedule::reverse}, {Schedule::shuffle, 1}, {Schedule::shuffle, 2}};

// The same schedule with the hazard checker off, to see what a race does to a result.
Options unchecked(Options options) {
  options.check_hazards = false;
  return options;
}

// ---- kernels

__global__ void write_indices(int* out, int width) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * width + x] = 1000 * y + x;
}

// Sum of one block's inputs, the classic tree in shared memory.
template <bool kBarrier>
__global__ void block_sum(const float* in, float* out) {
  FRUGAL_DYNAMIC_SHARED(float, partial);
  const unsigned t = threadIdx.x;
  partial[t] = in[blockIdx.x * blockDim.x + t];
  if (kBarrier) __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    if (kBarrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// C = A x B for n x n matrices, in kTile x kTile tiles staged through shared memory. kOffByOne
// loads the B tile one row too far: the bug a wrong tile index makes.
constexpr int kTile = 4;
template <int kOffByOne>
__global__ void tiled_matmul(const float* a, const float* b, float* c, int n) {
  FRUGAL_DYNAMIC_SHARED(float, tiles);
  const auto tile_a = tiles;
  const auto tile_b = tiles + kTile * kTile;
  const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0;
  for (int phase = 0; phase < n / kTile; ++phase) {
    tile_a[threadIdx.y * kTile + threadIdx.x] = a[row * n + phase * kTile + threadIdx.x];
    tile_b[(threadIdx.y + kOffByOne) * kTile + threadIdx.x] = b[(phase * kTile + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < kTile; ++k) sum += tile_a[threadIdx.y * kTile + k] * tile_b[k * kTile + threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = sum;
}

// Every thread adds its index into one shared counter without an atomic, through a stale copy:
// two reads and a write separated by a barrier, so the result depends on the order.
__global__ void racy_counter(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, counter);
  if (threadIdx.x == 0) counter[0] = 0;
  __syncthreads();
  const int seen = counter[0];
  __syncthreads();
  counter[0] = seen + static_cast<int>(threadIdx.x);  // last writer wins
  __syncthreads();
  if (threadIdx.x == 0) out[0] = counter[0];
}

// Every thread moves its right neighbour's value into its own slot. kBarrier false drops the barrier
// between reading the neighbour and overwriting one's own slot, which the left neighbour still reads.
template <bool kBarrier>
__global__ void shift_left(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, values);
  const int t = static_cast<int>(threadIdx.x);
  values[t] = t;
  __syncthreads();
  const int next = t + 1 < static_cast<int>(blockDim.x) ? values[t + 1] : -1;
  if (kBarrier) __syncthreads();
  values[t] = next;
  __syncthreads();
  out[t] = values[t];
}

// Thread 0 publishes a flag; __syncwarp orders it for warp 0 only, so thread 32 (warp 1) races.
__global__ void flag_across_warps(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, flag);
  if (threadIdx.x == 0) flag[0] = 1;
  __syncwarp();
  if (threadIdx.x == 32) out[0] = flag[0];
}

// Each thread reads its right neighbour's slot after a barrier; the last reads one past the end.
__global__ void read_past_shared(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, values);
  values[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = values[threadIdx.x + 1];
}

// A static shared array indexed `shift` elements off: thread 31 writes past its end for +1, thread 0
// before its start for -1.
__global__ void static_shared_shifted(int shift, float* out) {
  FRUGAL_SHARED_ARRAY(float, row, 32);
  row[static_cast<int>(threadIdx.x) + shift] = 1.0f;
  out[0] = 0.0f;
}

// A __syncthreads in both arms of a branch that splits the block: undefined in CUDA.
constexpr int kThenBarrierLine = __LINE__ + 4;  // where the two barriers below are
constexpr int kElseBarrierLine = __LINE__ + 5;
__global__ void barrier_in_both_arms(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void atomic_histogram(const int* values, int n, int* bins) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[values[i] % 4], 1);
}

__global__ void warp_sum(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int delta = 16; delta > 0; delta /= 2) v += __shfl_down_sync(0xffffffffu, v, delta);
  if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

__global__ void warp_primitives(int* out) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int broadcast = __shfl_sync(0xffffffffu, lane * 10, 3);
  int butterfly = lane;
  for (int mask = 1; mask < 32; mask *= 2) butterfly += __shfl_xor_sync(0xffffffffu, butterfly, mask);
  const unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
  const int up = __shfl_up_sync(0xffffffffu, lane, 1);
  const int in_eight = __shfl_sync(0xffffffffu, lane, 0, 8);  // width 8: lane 0 of each group of 8
  out[threadIdx.x * 5 + 0] = broadcast;
  out[threadIdx.x * 5 + 1] = butterfly;
  out[threadIdx.x * 5 + 2] = static_cast<int>(odd == 0xaaaaaaaau);
  out[threadIdx.x * 5 + 3] = up;
  out[threadIdx.x * 5 + 4] = in_eight;
}

__global__ void barrier_after_return(int* out, int n) {
  if (static_cast<int>(threadIdx.x) >= n) return;  // exited threads are not waited for, as on a GPU
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void barrier_in_branch(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[0] = __shfl_sync(0xffffffffu, 1, 0);
  }
}

__global__ void write_past_shared(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, values);
  values[threadIdx.x + 1] = 7;  // blockDim.x ints were asked for: the last thread writes one too many
  out[0] = 0;
}

__global__ void read_unwritten_shared(float* out) {
  FRUGAL_DYNAMIC_SHARED(float, values);
  out[threadIdx.x] = values[threadIdx.x];
}

// Each warp sums its 32 values through shared memory; kSyncWarp false drops the __syncwarp
// between a lane's write and its neighbour's read: the warp-level race the emulator must expose.
template <bool kSyncWarp>
__global__ void warp_shared_sum(const int* in, int* out) {
  FRUGAL_DYNAMIC_SHARED(int, values);
  const int t = static_cast<int>(threadIdx.x);
  values[t] = in[t];
  if (kSyncWarp) __syncwarp();
  for (int stride = 16; stride > 0; stride /= 2) {
    const int mine = values[t] + (t % 32 < stride ? values[t + stride] : 0);
    if (kSyncWarp) __syncwarp();
    values[t] = mine;
    if (kSyncWarp) __syncwarp();
  }
  if (t % 32 == 0) atomicAdd(&out[0], values[t]);
}

// Shared-memory atomics: a block-local histogram, then one global add per bin.
__global__ void shared_histogram(const int* values, int n, int* bins) {
  FRUGAL_DYNAMIC_SHARED(int, local);
  if (threadIdx.x < 4) local[threadIdx.x] = 0;
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) atomicAdd(&local[values[i] % 4], 1);
  __syncthreads();
  if (threadIdx.x < 4) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

__global__ void static_shared_read(float* out) {
  FRUGAL_SHARED_ARRAY(float, values, 32);
  if (blockIdx.x == 0) values[threadIdx.x] = 1.0f;  // only the first block writes before reading
  out[blockIdx.x * 32 + threadIdx.x] = values[threadIdx.x];
}

// Two half-warps exchange within their own halves, with masks of their own.
__global__ void half_warp_groups(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < 16)
    out[lane] = __shfl_sync(0x0000ffffu, lane, 0);
  else
    out[lane] = __shfl_sync(0xffff0000u, lane, 16);
}

// Lanes 24..31 return before the vote; a 48-thread block has a partial second warp.
__global__ void votes_with_absent_lanes(unsigned* out) {
  if (threadIdx.x % 32 >= 24) return;
  const unsigned ballot = __ballot_sync(0xffffffffu, 1);
  const int all = __all_sync(0xffffffffu, threadIdx.x < 40);
  const int any = __any_sync(0xffffffffu, threadIdx.x == 3);
  out[threadIdx.x * 3 + 0] = ballot;
  out[threadIdx.x * 3 + 1] = static_cast<unsigned>(all);
  out[threadIdx.x * 3 + 2] = static_cast<unsigned>(any);
}

__global__ void mixed_votes(int* out) {
  out[threadIdx.x] = threadIdx.x < 16 ? __all_sync(0xffffffffu, 1) : __any_sync(0xffffffffu, 1);
}

__global__ void failing_check(int* out) {
  FRUGAL_CHECK(threadIdx.x != 5, "thread 5 refuses");
  out[threadIdx.x] = 1;
}

__global__ void uses_missing_shared(int* out) {
  FRUGAL_DYNAMIC_SHARED(int, values);
  values[threadIdx.x] = 1;  // the launch asked for no dynamic shared memory
  out[0] = 0;
}

std::vector<float> matmul_reference(const std::vector<float>& a, const std::vector<float>& b, int n) {
  std::vector<float> c(static_cast<std::size_t>(n * n), 0.0f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) c[i * n + j] += a[i * n + k] * b[k * n + j];
  return c;
}

}  // namespace

TEST_CASE("emulator: every thread sees its own indices") {
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(schedule);
    std::vector<int> out(8 * 6, -1);
    FRUGAL_LAUNCH(dim3(2, 3), dim3(4, 2), 0, nullptr, write_indices)(out.data(), 8);
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 8; ++x) CHECK(out[y * 8 + x] == 1000 * y + x);
  }
}

TEST_CASE("emulator: a barrier-correct reduction passes every schedule, without barriers it fails") {
  std::vector<float> in(4 * 64);
  std::iota(in.begin(), in.end(), 1.0f);
  std::vector<float> expected(4);
  for (int b = 0; b < 4; ++b) expected[b] = std::accumulate(in.begin() + b * 64, in.begin() + (b + 1) * 64, 0.0f);
  int wrong = 0;
  for (const Options& schedule : kSchedules) {
    std::vector<float> out(4, 0.0f);
    {
      OptionsScope scope(schedule);
      FRUGAL_LAUNCH(4, 64, 64 * sizeof(float), nullptr, block_sum<true>)(in.data(), out.data());
      CHECK_MESSAGE(out == expected, frugal::emu::schedule_name(schedule.schedule));
    }
    OptionsScope scope(unchecked(schedule));
    FRUGAL_LAUNCH(4, 64, 64 * sizeof(float), nullptr, block_sum<false>)(in.data(), out.data());
    wrong += out != expected;
  }
  CHECK(wrong > 0);  // the missing barrier shows under some schedule: no luck involved
}

TEST_CASE("emulator: a tiled matmul matches the CPU exactly, an off-by-one tile index does not") {
  constexpr int n = 8;
  std::vector<float> a(n * n), b(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 7 - 3);  // small integers: sums are exact, so any index error shows
    b[i] = static_cast<float>(i % 5 - 2);
  }
  const auto expected = matmul_reference(a, b, n);
  const std::size_t shared = 2 * kTile * kTile * sizeof(float);
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(schedule);
    std::vector<float> c(n * n);
    FRUGAL_LAUNCH(dim3(n / kTile, n / kTile), dim3(kTile, kTile), shared, nullptr, tiled_matmul<0>)(a.data(), b.data(), c.data(), n);
    CHECK(c == expected);
  }
  // The broken kernel writes its last B row past the tiles: the bounds check names the thread.
  std::vector<float> c(n * n);
  CHECK_THROWS_WITH_AS(
      (FRUGAL_LAUNCH(dim3(n / kTile, n / kTile), dim3(kTile, kTile), shared, nullptr, tiled_matmul<1>)(a.data(), b.data(), c.data(), n)),
      doctest::Contains("thread (0,3,0) writes 4 bytes at offset 128 of dynamic shared memory, past its end (128 bytes)"),
      KernelError);
}

TEST_CASE("emulator: a racy shared write gives different answers under different schedules") {
  std::vector<int> results;
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(unchecked(schedule));
    int out = -1;
    FRUGAL_LAUNCH(1, 32, sizeof(int), nullptr, racy_counter)(&out);
    results.push_back(out);
  }
  CHECK(results[0] != results[1]);  // forward: thread 31 writes last; reverse: thread 0 does
}

TEST_CASE("emulator: atomics count correctly in every order") {
  std::vector<int> values(1000);
  std::iota(values.begin(), values.end(), 0);
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(schedule);
    std::vector<int> bins(4, 0);
    FRUGAL_LAUNCH(4, 256, 0, nullptr, atomic_histogram)(values.data(), 1000, bins.data());
    CHECK(bins == std::vector<int>{250, 250, 250, 250});
  }
}

TEST_CASE("emulator: warp shuffles and ballots") {
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(schedule);
    std::vector<float> in(128, 1.0f), sums(4, 0.0f);
    for (int i = 0; i < 128; ++i) in[i] = static_cast<float>(i);
    FRUGAL_LAUNCH(2, 64, 0, nullptr, warp_sum)(in.data(), sums.data());
    for (int w = 0; w < 4; ++w) CHECK(sums[w] == static_cast<float>(32 * (32 * w) + 31 * 32 / 2));
    std::vector<int> out(64 * 5, -1);
    FRUGAL_LAUNCH(1, 64, 0, nullptr, warp_primitives)(out.data());
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32;
      CHECK(out[t * 5 + 0] == 30);
      CHECK(out[t * 5 + 1] == 31 * 32 / 2);  // every lane holds the warp's sum after the butterfly
      CHECK(out[t * 5 + 2] == 1);
      CHECK(out[t * 5 + 3] == (lane == 0 ? 0 : lane - 1));  // lane 0 keeps its own value
      CHECK(out[t * 5 + 4] == lane / 8 * 8);
    }
  }
}

TEST_CASE("emulator: __syncwarp orders a warp's shared memory, without it the race shows") {
  std::vector<int> in(64);
  std::iota(in.begin(), in.end(), 1);
  const int expected = 64 * 65 / 2;
  int wrong = 0;
  for (const Options& schedule : kSchedules) {
    int out = 0;
    {
      OptionsScope scope(schedule);
      FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, warp_shared_sum<true>)(in.data(), &out);
      CHECK(out == expected);
    }
    OptionsScope scope(unchecked(schedule));
    out = 0;
    FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, warp_shared_sum<false>)(in.data(), &out);
    wrong += out != expected;
  }
  CHECK(wrong > 0);
}

TEST_CASE("emulator: atomics on shared memory") {
  std::vector<int> values(777);
  std::iota(values.begin(), values.end(), 0);
  for (const Options& schedule : kSchedules) {
    OptionsScope scope(schedule);
    std::vector<int> bins(4, 0);
    FRUGAL_LAUNCH(1, 128, 4 * sizeof(int), nullptr, shared_histogram)(values.data(), 777, bins.data());
    CHECK(bins == std::vector<int>{195, 194, 194, 194});
  }
}

TEST_CASE("emulator: divergent barriers and stuck kernels are named, exited threads are not waited for") {
  std::vector<int> out(64, 0);
  FRUGAL_LAUNCH(1, 64, 0, nullptr, barrier_after_return)(out.data(), 40);
  for (int t = 0; t < 64; ++t) CHECK(out[t] == (t < 40 ? 1 : 0));
  const std::string first = "kernel barrier_in_both_arms, block (0,0,0): divergent __syncthreads: thread (0,0,0) waits at "
                            "test_emulator.cpp:" + std::to_string(kThenBarrierLine) + ":";
  const std::string second = " and thread (16,0,0) at test_emulator.cpp:" + std::to_string(kElseBarrierLine) + ":";
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, barrier_in_both_arms)(out.data())), doctest::Contains(first.c_str()),
                       KernelError);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, barrier_in_both_arms)(out.data())), doctest::Contains(second.c_str()),
                       KernelError);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, barrier_in_branch)(out.data())),
                       doctest::Contains("is stuck: thread (0,0,0) waits at __syncthreads"), KernelError);
}

TEST_CASE("emulator: the hazard checker names the kind, the kernel, the block, both threads and the offset") {
  std::vector<float> in(64, 1.0f), sums(1);
  std::vector<int> out(64);
  SUBCASE("a missing barrier: read-after-write") {
    OptionsScope scope({Schedule::reverse});  // thread 63 writes first, then thread 31 adds it in
    CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 64, 64 * sizeof(float), nullptr, block_sum<false>)(in.data(), sums.data())),
                         doctest::Contains("kernel block_sum<false>, block (0,0,0): read-after-write (RAW) hazard on dynamic "
                                           "shared memory at offset 252: thread (31,0,0) reads a word that thread (63,0,0) "
                                           "wrote since the last __syncthreads (different warps"),
                         KernelError);
  }
  SUBCASE("a value overwritten while another thread still reads it: write-after-read") {
    CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, shift_left<false>)(out.data())),
                         doctest::Contains("kernel shift_left<false>, block (0,0,0): write-after-read (WAR) hazard on dynamic "
                                           "shared memory at offset 4: thread (1,0,0) writes a word that thread (0,0,0) read"),
                         KernelError);
    FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, shift_left<true>)(out.data());
    for (int t = 0; t < 64; ++t) CHECK(out[t] == (t < 63 ? t + 1 : -1));
  }
  SUBCASE("two writers of one word: write-after-write") {
    CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, sizeof(int), nullptr, racy_counter)(out.data())),
                         doctest::Contains("kernel racy_counter, block (0,0,0): write-after-write (WAW) hazard on dynamic "
                                           "shared memory at offset 0: thread (1,0,0) writes a word that thread (0,0,0) wrote"),
                         KernelError);
  }
  SUBCASE("two warps: __syncwarp does not order them") {
    CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 64, sizeof(int), nullptr, flag_across_warps)(out.data())),
                         doctest::Contains("kernel flag_across_warps, block (0,0,0): read-after-write (RAW) hazard on dynamic "
                                           "shared memory at offset 0: thread (32,0,0) reads a word that thread (0,0,0) wrote "
                                           "since the last __syncthreads (different warps: only __syncthreads orders them)"),
                         KernelError);
  }
  SUBCASE("lanes of one warp without __syncwarp race; with it they do not") {
    std::vector<int> values(64);
    std::iota(values.begin(), values.end(), 1);
    int total = 0;
    CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, warp_shared_sum<false>)(values.data(), &total)),
                         doctest::Contains("kernel warp_shared_sum<false>, block (0,0,0): write-after-read (WAR) hazard on "
                                           "dynamic shared memory at offset 4: thread (1,0,0) writes a word that thread "
                                           "(0,0,0) read since the last __syncthreads, and no __syncwarp ordered them (both "
                                           "in warp 0)"),
                         KernelError);
    for (const Options& schedule : kSchedules) {
      OptionsScope scope(schedule);
      total = 0;
      FRUGAL_LAUNCH(1, 64, 64 * sizeof(int), nullptr, warp_shared_sum<true>)(values.data(), &total);
      CHECK(total == 64 * 65 / 2);
    }
  }
}

TEST_CASE("emulator: accesses outside dynamic or static shared memory are named") {
  std::vector<int> out(16);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 16, 16 * sizeof(int), nullptr, read_past_shared)(out.data())),
                       doctest::Contains("kernel read_past_shared, block (0,0,0), thread (15,0,0) reads 4 bytes at offset "
                                         "64 of dynamic shared memory, past its end (64 bytes)"),
                       KernelError);
  std::vector<float> sink(1);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, static_shared_shifted)(1, sink.data())),
                       doctest::Contains("kernel static_shared_shifted, block (0,0,0), thread (31,0,0) writes 4 bytes at "
                                         "offset 128 of static shared array row, past its end (128 bytes)"),
                       KernelError);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, static_shared_shifted)(-1, sink.data())),
                       doctest::Contains("thread (0,0,0) writes 4 bytes at offset -4 of static shared array row, before its "
                                         "start (128 bytes)"),
                       KernelError);
  FRUGAL_LAUNCH(1, 32, 0, nullptr, static_shared_shifted)(0, sink.data());
}

TEST_CASE("emulator: shared memory is poisoned, bounded and sized") {
  std::vector<float> out(8, 0.0f);
  FRUGAL_LAUNCH(1, 8, 8 * sizeof(float), nullptr, read_unwritten_shared)(out.data());
  for (float v : out) CHECK(std::isnan(v));  // read before written: NaN, not a lucky zero
  std::vector<int> sink(1);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 16, 16 * sizeof(int), nullptr, write_past_shared)(sink.data())),
                       doctest::Contains("kernel write_past_shared, block (0,0,0), thread (15,0,0) writes 4 bytes at offset 64"),
                       KernelError);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 2048, 0, nullptr, read_unwritten_shared)(out.data())),
                       doctest::Contains("a block of (2048,1,1) threads is invalid"), KernelError);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 8, 1 << 20, nullptr, read_unwritten_shared)(out.data())),
                       doctest::Contains("exceed the 49152 a block may have"), KernelError);
  CHECK_THROWS_AS(frugal::emu::current_thread(), KernelError);  // threadIdx outside a kernel
}

// ---- frugal's own kernels (core/cuda/kernels.cu) in the emulator, against the CPU kernels

namespace {
using namespace frugal;

void check_copy(const Tensor& src, DType to) {
  Tensor expected = empty(src.shape(), {.dtype = to});
  Tensor emulated = empty(src.shape(), {.dtype = to});
  cpu::copy_strided(expected.data_ptr(), to, expected.layout(), src.data_ptr(), src.dtype(), src.layout());
  cuda_emulated::copy_strided(emulated.data_ptr(), to, emulated.layout(), src.data_ptr(), src.dtype(), src.layout());
  CHECK_MESSAGE(emulated.to_vector<double>() == expected.to_vector<double>(), src.dtype() << " -> " << to);
}
}  // namespace

TEST_CASE("core kernels in the emulator match the CPU kernels under two schedules") {
  for (const Options& schedule : {Options{Schedule::forward}, Options{Schedule::shuffle, 7}}) {
    OptionsScope scope(schedule);
    const Tensor base = uniform({5, 7, 11}, -300.0, 300.0);
    for (const Tensor& src : {base, base.permute({2, 0, 1}), base.slice(1, 1, 7, 3).transpose(0, 2)})
      for (DType to : kAllDTypes) check_copy(src.to(DType::f32), to);
    check_copy(base.to(DType::f16).transpose(0, 2), DType::f64);
    check_copy(base.to(DType::i64).select(0, 2), DType::bf16);

    Tensor cpu_fill = zeros({9, 13}), emu_fill = zeros({9, 13});
    const Tensor cpu_view = cpu_fill.slice(1, 1, 13, 2), emu_view = emu_fill.slice(1, 1, 13, 2);
    cpu::fill_strided(cpu_view.data_ptr(), DType::f32, cpu_view.layout(), 2.5);
    cuda_emulated::fill_strided(emu_view.data_ptr(), DType::f32, emu_view.layout(), 2.5);
    CHECK(emu_fill.to_vector<float>() == cpu_fill.to_vector<float>());

    for (Distribution distribution : {Distribution::uniform, Distribution::normal, Distribution::randint, Distribution::bernoulli}) {
      const RandomSpec spec{.distribution = distribution, .a = 0.25, .b = 9.0, .seed = 42, .offset = 3};
      for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
        Tensor expected = empty({1027}, {.dtype = dtype}), emulated = empty({1027}, {.dtype = dtype});
        cpu::random_fill(expected.data_ptr(), dtype, 1027, spec);
        cuda_emulated::random_fill(emulated.data_ptr(), dtype, 1027, spec);
        CHECK(emulated.to_vector<double>() == expected.to_vector<double>());
      }
    }
  }
}

TEST_CASE("emulator: static shared arrays are poisoned at every block's start") {
  std::vector<float> out(64, 0.0f);
  for (int launch = 0; launch < 2; ++launch) {  // a second launch does not see the first one's values
    FRUGAL_LAUNCH(2, 32, 0, nullptr, static_shared_read)(out.data());
    for (int t = 0; t < 32; ++t) {
      CHECK(out[t] == 1.0f);
      CHECK(std::isnan(out[32 + t]));
    }
  }
}

TEST_CASE("emulator: warp primitives follow CUDA's rules for masks and absent lanes") {
  std::vector<int> out(32, -1);
  FRUGAL_LAUNCH(1, 32, 0, nullptr, half_warp_groups)(out.data());
  for (int lane = 0; lane < 32; ++lane) CHECK(out[lane] == (lane < 16 ? 0 : 16));
  std::vector<unsigned> votes(48 * 3, 7);
  FRUGAL_LAUNCH(1, 48, 0, nullptr, votes_with_absent_lanes)(votes.data());
  CHECK(votes[0] == 0x00ffffffu);    // lanes 24..31 returned: absent, bit 0
  CHECK(votes[32 * 3] == 0x00ffffu);  // the second warp has 16 lanes, 8 of them still present
  CHECK(votes[1] == 1u);              // every present lane of warp 0 has threadIdx.x < 40
  CHECK(votes[32 * 3 + 1] == 0u);     // threads 40..47 of warp 1 do not
  CHECK(votes[2] == 1u);
  CHECK(votes[32 * 3 + 2] == 0u);
  std::vector<int> sink(32);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 32, 0, nullptr, mixed_votes)(sink.data())),
                       doctest::Contains("must reach the same primitive"), KernelError);
}

TEST_CASE("emulator: errors inside a kernel name the kernel, block and thread") {
  std::vector<int> out(8);
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 8, 0, nullptr, failing_check)(out.data())),
                       doctest::Contains("kernel failing_check, block (0,0,0), thread (5,0,0) threw:"), KernelError);
  try {
    FRUGAL_LAUNCH(1, 8, 0, nullptr, failing_check)(out.data());
    FAIL("the launch did not throw");
  } catch (const KernelError& error) {
    CHECK(std::string(error.what()).starts_with("emu/emulator.cpp:"));  // the emulator's file, from the top folder
  }
  CHECK_THROWS_WITH_AS((FRUGAL_LAUNCH(1, 8, 0, nullptr, uses_missing_shared)(out.data())),
                       doctest::Contains("writes 4 bytes at offset 0 of dynamic shared memory, past its end (0 bytes)"),
                       KernelError);
}
