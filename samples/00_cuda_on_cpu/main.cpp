// Sample 00: a CUDA kernel stepped through on the CPU.
// A tiled matrix multiply (C = A x B, 4 x 4 matrices, 2 x 2 tiles, a 2 x 2 grid of 2 x 2-thread
// blocks) runs in frugal's CUDA emulator, where each CUDA thread is a fiber. First with its first
// __syncthreads left out: the emulator's hazard checker stops the launch and prints which threads
// raced on which word of shared memory. Then the correct kernel, which logs which thread loads which
// tile element in each phase; the sample prints the log in execution order, for two schedules, and
// checks C against a CPU reference. It exits 1 when the checker misses the race, a load is missing
// from the log or C is wrong (samples/checks.h). The kernel source is ordinary CUDA: with nvcc,
// FRUGAL_LAUNCH would be <<<grid, block, shared, stream>>> and the same code would run on a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda/kernel_support.h"
#include "samples/checks.h"

namespace {

constexpr int kN = 4;     // matrix side
constexpr int kTile = 2;  // tile side = block side

// One line of the log: who loaded what, and when.
struct Load {
  int block_x, block_y, thread_x, thread_y, phase;
  char matrix;  // 'A' or 'B'
  int row, col;  // the element of A or B that was loaded
};

// kWaitForTiles false leaves out the barrier between loading the tiles and reading them: the bug.
template <bool kWaitForTiles>
__global__ void tiled_matmul(const float* a, const float* b, float* c, int n, Load* log, int* log_size) {
  FRUGAL_DYNAMIC_SHARED(float, tiles);  // tile of A, then tile of B: 2 * kTile * kTile floats
  const auto tile_a = tiles;
  const auto tile_b = tiles + kTile * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float sum = 0.0f;
  for (int phase = 0; phase < n / kTile; ++phase) {
    // Phase `phase`: each thread loads one element of A's tile and one of B's, then all wait.
    const int a_col = phase * kTile + tx, b_row = phase * kTile + ty;
    tile_a[ty * kTile + tx] = a[row * n + a_col];
    tile_b[ty * kTile + tx] = b[b_row * n + col];
    const int slot = atomicAdd(log_size, 2);
    log[slot] = {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), tx, ty, phase, 'A', row, a_col};
    log[slot + 1] = {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), tx, ty, phase, 'B', b_row, col};
    if (kWaitForTiles) __syncthreads();  // the tiles are complete: every thread may read every element
    for (int k = 0; k < kTile; ++k) sum += tile_a[ty * kTile + k] * tile_b[k * kTile + tx];
    __syncthreads();  // everyone is done reading before the next phase overwrites the tiles
  }
  c[row * n + col] = sum;
}

std::vector<float> reference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(kN * kN, 0.0f);
  for (int i = 0; i < kN; ++i)
    for (int j = 0; j < kN; ++j)
      for (int k = 0; k < kN; ++k) c[i * kN + j] += a[i * kN + k] * b[k * kN + j];
  return c;
}

constexpr std::size_t kSharedBytes = 2 * kTile * kTile * sizeof(float);

// The kernel without its first barrier: the hazard checker names the race instead of a wrong C.
void run_without_barrier(const std::vector<float>& a, const std::vector<float>& b, frugal::samples::Checks& checks) {
  std::vector<float> c(kN * kN, 0.0f);
  std::vector<Load> log(2 * kN * kN * (kN / kTile));
  int log_size = 0;
  std::printf("Without the __syncthreads between loading the tiles and reading them:\n");
  try {
    FRUGAL_LAUNCH(dim3(kN / kTile, kN / kTile), dim3(kTile, kTile), kSharedBytes, nullptr, tiled_matmul<false>)(
        a.data(), b.data(), c.data(), kN, log.data(), &log_size);
    checks.expect(false, "the hazard checker stops the launch without the first __syncthreads (it finished)");
    std::printf("\n");
  } catch (const frugal::emu::KernelError& error) {
    std::printf("  %s\n\n", error.message().c_str());
  }
}

void run(frugal::emu::Schedule schedule, const std::vector<float>& a, const std::vector<float>& b, bool print_log,
         frugal::samples::Checks& checks) {
  frugal::emu::OptionsScope scope({.schedule = schedule, .seed = 1});
  std::vector<float> c(kN * kN, 0.0f);
  std::vector<Load> log(2 * kN * kN * (kN / kTile));
  int log_size = 0;
  FRUGAL_LAUNCH(dim3(kN / kTile, kN / kTile), dim3(kTile, kTile), kSharedBytes, nullptr, tiled_matmul<true>)(
      a.data(), b.data(), c.data(), kN, log.data(), &log_size);

  std::printf("schedule %s: %d loads logged (%d threads x %d phases x 2 matrices)\n",
              std::string(frugal::emu::schedule_name(schedule)).c_str(), log_size, kN * kN, kN / kTile);
  checks.expect(log_size == 2 * kN * kN * (kN / kTile), "every thread logged both loads of every phase");
  if (print_log) {
    int last_block = -1, last_phase = -1;
    for (int i = 0; i < log_size; i += 2) {
      const Load& l = log[i];
      const int block = l.block_y * (kN / kTile) + l.block_x;
      if (block != last_block || l.phase != last_phase)
        std::printf("  block (%d,%d) phase %d\n", l.block_x, l.block_y, l.phase);
      last_block = block;
      last_phase = l.phase;
      std::printf("    thread (%d,%d) loads A[%d][%d] into tile_a[%d][%d] and B[%d][%d] into tile_b[%d][%d]\n", l.thread_x,
                  l.thread_y, l.row, l.col, l.thread_y, l.thread_x, log[i + 1].row, log[i + 1].col, l.thread_y,
                  l.thread_x);
    }
  }
  const auto expected = reference(a, b);
  float worst = 0.0f;
  for (int i = 0; i < kN * kN; ++i) worst = std::max(worst, std::abs(c[i] - expected[i]));
  std::printf("  C matches the CPU reference: %s (largest difference %g; small integers make it exact)\n",
              worst == 0.0f ? "yes" : "NO", worst);
  checks.expect(worst == 0.0f, "C equals the CPU reference exactly, schedule " +
                                   std::string(frugal::emu::schedule_name(schedule)));
  std::printf("\n");
}

}  // namespace

int main() {
  std::vector<float> a(kN * kN), b(kN * kN);
  for (int i = 0; i < kN * kN; ++i) {
    a[i] = static_cast<float>(i % 5 - 2);
    b[i] = static_cast<float>(i % 3 - 1);
  }
  std::printf("tiled matmul: %dx%d matrices, %dx%d tiles, grid (%d,%d) of (%d,%d)-thread blocks, in the CUDA emulator\n\n",
              kN, kN, kTile, kTile, kN / kTile, kN / kTile, kTile, kTile);
  frugal::samples::Checks checks;
  run_without_barrier(a, b, checks);
  std::printf("With it:\n");
  run(frugal::emu::Schedule::forward, a, b, true, checks);
  std::printf("The same launch with the threads of each block run in a shuffled order between barriers:\n");
  run(frugal::emu::Schedule::shuffle, a, b, true, checks);
  run(frugal::emu::Schedule::reverse, a, b, false, checks);
  return checks.exit_code("00_cuda_on_cpu");
}
