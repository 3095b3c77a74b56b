// The emulator's scheduler (see emulator.h).
//
// Note [How a block runs]: every CUDA thread of the block is a fiber. The scheduler makes passes:
// in each pass it resumes every runnable thread once, in the order the schedule gives, and each
// runs until it reaches a meeting point (__syncthreads, a warp primitive) or returns. After a
// pass, warps whose named lanes have all reached the same warp primitive exchange their values and
// run on; when nothing else can run and every live thread waits at __syncthreads, the barrier opens.
// If neither can happen the kernel is stuck, and the emulator says which threads wait where.
// Because threads switch only at meeting points, what a thread does between two of them is
// atomic, and the schedule decides only the order of those stretches: exactly the freedom a GPU
// has, minus interleavings inside a stretch, which no correct kernel may depend on.
#include "emu/emulator.h"

#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>

#include <algorithm>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace frugal::emu {

namespace ctx = boost::context;

// Note [Fibers under AddressSanitizer]: ASan tracks one stack per OS thread; when a fiber switch
// moves the stack pointer elsewhere it must be told, or it reports false errors (an exception thrown
// on a fiber's stack looks like a stack overflow). These two calls bracket every switch; they do
// nothing in ordinary builds.
namespace {
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

void before_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const StackBounds& to) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
}

void after_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] StackBounds* from) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#endif
}
}  // namespace

namespace {

// Each fiber's stack: a thread's local variables and arrays live here. 256 KiB holds any kernel
// frugal writes and printf; pages are only touched as they are used. A kernel whose locals exceed
// it crashes without a diagnosis (GPUs allow up to 512 KiB of local memory per thread).
constexpr std::size_t kStackBytes = 256 << 10;
// Guards before and after dynamic shared memory, each at least as large as the memory itself, so
// any index up to twice the size lands in a guard: a write changes one and the next check names the
// thread that just ran; a read gets the guard pattern, which is NaN as a float and as a double.
constexpr std::size_t kMinGuardBytes = 256;
constexpr unsigned char kGuardPattern[4] = {0xA5, 0xA5, 0xF5, 0xFF};  // 0xFFF5A5A5: NaN in f32 and f64
constexpr unsigned char kPoisonByte = 0xFF;  // as float: NaN; as an integer: -1

std::size_t guard_bytes(std::size_t shared_bytes) {
  return (std::max(kMinGuardBytes, shared_bytes) + 15) / 16 * 16;  // keeps the memory 16-byte aligned
}
unsigned char guard_byte(std::size_t offset) { return kGuardPattern[offset % 4]; }

enum class Wait : std::uint8_t { runnable, barrier, warp, done };

struct Thread {
  ThreadIndex index;
  int linear = 0;  // position in the block, x fastest: the warp is linear / 32, the lane linear % 32
  ctx::fiber fiber;   // where to resume this thread
  ctx::fiber sink;    // inside the thread: where to return to the scheduler
  StackBounds stack;      // this fiber's stack, and the scheduler's: Note [Fibers under AddressSanitizer]
  StackBounds scheduler;
  Wait wait = Wait::runnable;
  // The warp primitive it waits at.
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  int operand = 0, width = kWarpSize;
  std::uint64_t bits = 0;    // sent
  std::uint64_t result = 0;  // received
  std::exception_ptr error;
};

struct Block {
  const char* kernel = "";
  bool abandoning = false;  // a thread failed: the others are resumed only to unwind
  std::vector<Thread> threads;
  std::vector<unsigned char> shared;  // guard | dynamic shared memory | guard
  std::size_t shared_bytes = 0;
};

// Static __shared__ arrays all live in the section frugal_shared (cuda_emu.h); the linker marks its
// bounds with these symbols, absent (null) when no kernel declares one.
extern "C" char __start_frugal_shared[] __attribute__((weak));
extern "C" char __stop_frugal_shared[] __attribute__((weak));

// Launches from several OS threads take turns: static __shared__ arrays exist once per process.
std::mutex g_launch_mutex;

thread_local Options t_options;
thread_local Block* t_block = nullptr;
thread_local Thread* t_thread = nullptr;

std::string where(const Block& block, const Thread* thread) {
  const ThreadIndex& i = block.threads.front().index;
  std::ostringstream out;
  out << "kernel " << block.kernel << ", block (" << i.block_idx.x << "," << i.block_idx.y << "," << i.block_idx.z << ")";
  if (thread)
    out << ", thread (" << thread->index.thread_idx.x << "," << thread->index.thread_idx.y << ","
        << thread->index.thread_idx.z << ")";
  return out.str();
}

Thread& running_thread(const char* what) {
  FRUGAL_CHECK_AS(KernelError, t_thread != nullptr, what, " called outside an emulated kernel");
  return *t_thread;
}

// Thrown inside a waiting thread when its block is abandoned, so its stack unwinds normally.
struct Abandoned {};

// Back to the scheduler until it resumes this thread.
void suspend(Thread& thread) {
  void* fake_stack = nullptr;
  before_switch(&fake_stack, thread.scheduler);
  thread.sink = std::move(thread.sink).resume();
  after_switch(fake_stack, &thread.scheduler);
  if (t_block->abandoning) throw Abandoned{};
}

// Runs `thread` until it reaches a meeting point or returns.
void resume(Thread& thread) {
  t_thread = &thread;
  void* fake_stack = nullptr;
  before_switch(&fake_stack, thread.stack);
  thread.fiber = std::move(thread.fiber).resume();
  after_switch(fake_stack, nullptr);
  t_thread = nullptr;
}

// Hands out pooled stacks and remembers the last one, so the scheduler knows each fiber's bounds.
class RecordingStack {
 public:
  explicit RecordingStack(ctx::pooled_fixedsize_stack& pool, StackBounds& last) : pool_(&pool), last_(&last) {}
  ctx::stack_context allocate() {
    ctx::stack_context stack = pool_->allocate();
    *last_ = {static_cast<char*>(stack.sp) - stack.size, stack.size};  // stacks grow down from sp
    return stack;
  }
  void deallocate(ctx::stack_context& stack) noexcept { pool_->deallocate(stack); }

 private:
  ctx::pooled_fixedsize_stack* pool_;
  StackBounds* last_;
};

// ---- shared memory guards

void check_guards(const Block& block, const Thread& thread) {
  if (block.shared.empty()) return;
  const unsigned char* data = block.shared.data();
  const std::size_t guard = guard_bytes(block.shared_bytes), after = guard + block.shared_bytes;
  for (std::size_t i = 0; i < guard; ++i) {
    if (data[guard - 1 - i] != guard_byte(guard - 1 - i))
      FRUGAL_THROW(KernelError, where(block, &thread), " wrote ", i + 1, " bytes before the start of its dynamic shared memory");
    if (data[after + i] != guard_byte(after + i))
      FRUGAL_THROW(KernelError, where(block, &thread), " wrote past the end of its dynamic shared memory (",
                   block.shared_bytes, " bytes; byte ", block.shared_bytes + i, " was written)");
  }
}

// ---- warps

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::shfl_idx: return "__shfl_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::shfl_up: return "__shfl_up_sync";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::all: return "__all_sync";
    case WarpOp::any: return "__any_sync";
    case WarpOp::sync: return "__syncwarp";
  }
  return "?";
}

// The lane a shuffle reads from, or the lane itself when the source lies outside its segment of
// `width` lanes (CUDA then returns the lane's own value).
int source_lane(const Thread& lane, int count) {
  const int self = lane.linear % kWarpSize;
  const int segment = self / lane.width * lane.width;
  int source = self;
  switch (lane.op) {
    case WarpOp::shfl_idx: source = segment + ((lane.operand % lane.width) + lane.width) % lane.width; break;
    case WarpOp::shfl_down: source = self + lane.operand < segment + lane.width ? self + lane.operand : self; break;
    case WarpOp::shfl_up: source = self - lane.operand >= segment ? self - lane.operand : self; break;
    case WarpOp::shfl_xor: source = (self ^ lane.operand) < segment + lane.width ? self ^ lane.operand : self; break;
    default: break;
  }
  return source < count ? source : self;
}

// A shuffle that reads a lane outside the exchange gets an undefined value on a GPU; here it gets
// bits that are NaN as a float or a double and -1 as an integer, so a test notices if it is used.
constexpr std::uint64_t kUndefinedLaneBits = ~std::uint64_t{0};

// Completes, in the warp starting at thread `first`, every group of lanes that wait at a warp
// primitive with the same mask, once all of that mask's live lanes have arrived. As in CUDA, the
// lanes that take part are the non-exited threads named in the mask: lanes that returned, or that
// lie beyond the end of the block, are absent (their ballot bit is 0). Lanes named in one mask must
// arrive at the same primitive with the same mask. Returns whether any group completed.
bool complete_warps(Block& block, std::size_t first) {
  const std::size_t end = std::min(first + kWarpSize, block.threads.size());
  bool completed = false;
  for (std::size_t t = first; t < end; ++t) {
    const Thread& leader = block.threads[t];
    if (leader.wait != Wait::warp) continue;
    const unsigned mask = leader.mask;
    unsigned present = 0;  // named lanes that take part
    bool ready = true;
    for (std::size_t l = first; l < end && ready; ++l) {
      const Thread& lane = block.threads[l];
      if (!((mask >> (l - first)) & 1u) || lane.wait == Wait::done) continue;
      if (lane.wait != Wait::warp) {
        ready = false;  // still on its way (or stuck at a barrier: the scheduler will say so)
      } else if (lane.mask != mask || lane.op != leader.op) {
        FRUGAL_THROW(KernelError, where(block, &lane), " reached ", op_name(lane.op), " with mask 0x", std::hex, lane.mask,
                     " while lane ", std::dec, leader.linear % kWarpSize, " waits at ", op_name(leader.op),
                     " with mask 0x", std::hex, mask, ": lanes named in one mask must reach the same primitive with it");
      } else {
        present |= 1u << (l - first);
      }
    }
    if (!ready) continue;
    unsigned votes = 0;
    for (std::size_t l = first; l < end; ++l)
      if ((present >> (l - first)) & 1u && block.threads[l].bits) votes |= 1u << (l - first);
    for (std::size_t l = first; l < end; ++l) {
      if (!((present >> (l - first)) & 1u)) continue;
      Thread& lane = block.threads[l];
      switch (lane.op) {
        case WarpOp::ballot: lane.result = votes; break;
        case WarpOp::all: lane.result = votes == present; break;
        case WarpOp::any: lane.result = votes != 0; break;
        case WarpOp::sync: lane.result = 0; break;
        default: {
          const int source = source_lane(lane, static_cast<int>(end - first));
          lane.result = (present >> source) & 1u ? block.threads[first + static_cast<std::size_t>(source)].bits
                                                 : kUndefinedLaneBits;
        }
      }
      lane.wait = Wait::runnable;
    }
    completed = true;
  }
  return completed;
}

// ---- the scheduler

std::vector<std::size_t> pass_order(const Block& block, std::uint64_t pass) {
  std::vector<std::size_t> order(block.threads.size());
  std::iota(order.begin(), order.end(), 0);
  switch (t_options.schedule) {
    case Schedule::forward: break;
    case Schedule::reverse: std::reverse(order.begin(), order.end()); break;
    case Schedule::shuffle: {
      const ThreadIndex& i = block.threads.front().index;
      const std::uint64_t block_number = (std::uint64_t{i.block_idx.z} * i.grid_dim.y + i.block_idx.y) * i.grid_dim.x + i.block_idx.x;
      std::seed_seq seed{t_options.seed, block_number, pass};
      std::mt19937_64 rng(seed);
      std::shuffle(order.begin(), order.end(), rng);
      break;
    }
  }
  return order;
}

std::string describe_waits(const Block& block) {
  std::ostringstream out;
  int shown = 0;
  for (const Thread& t : block.threads) {
    if (t.wait == Wait::done || shown == 4) continue;
    out << (shown++ ? "; " : "") << "thread (" << t.index.thread_idx.x << "," << t.index.thread_idx.y << ","
        << t.index.thread_idx.z << ") waits at " << (t.wait == Wait::barrier ? "__syncthreads" : op_name(t.op));
  }
  return out.str();
}

// Opens the barrier if every live thread waits at it. A thread that returned while others wait
// is a divergent barrier: undefined on a GPU (it may hang), so an error here.
bool try_open_barrier(Block& block) {
  bool any_waiting = false;
  const Thread* returned = nullptr;
  for (const Thread& t : block.threads) {
    if (t.wait == Wait::runnable || t.wait == Wait::warp) return false;
    if (t.wait == Wait::barrier) any_waiting = true;
    if (t.wait == Wait::done && !returned) returned = &t;
  }
  if (!any_waiting) return false;
  if (returned)
    FRUGAL_THROW(KernelError, where(block, returned), " returned while other threads of its block wait at __syncthreads: "
                 "a barrier must be reached by every thread of the block (no early return before it)");
  for (Thread& t : block.threads) t.wait = Wait::runnable;
  return true;
}

void schedule_block(Block& block);

// An exception thrown by the kernel's own code (a failed check, say) gains the kernel, block and
// thread it came from; KernelErrors already say where.
[[noreturn]] void rethrow_with_place(const Block& block, const Thread& thread) {
  try {
    std::rethrow_exception(thread.error);
  } catch (const KernelError&) {
    throw;
  } catch (const std::exception& error) {
    FRUGAL_THROW(KernelError, where(block, &thread), " threw: ", error.what());
  }
}

void run_block(Block& block, const std::function<void()>& body) {
  static thread_local ctx::pooled_fixedsize_stack stacks(kStackBytes);
  for (Thread& thread : block.threads) {
    thread.fiber = ctx::fiber(std::allocator_arg, RecordingStack(stacks, thread.stack), [&thread, &body](ctx::fiber&& sink) {
      after_switch(nullptr, &thread.scheduler);
      thread.sink = std::move(sink);
      try {
        if (!t_block->abandoning) body();  // a thread first started to be abandoned has nothing to undo
      } catch (const Abandoned&) {
        // another thread failed; this one only had to unwind
      } catch (const ctx::detail::forced_unwind&) {
        throw;  // Boost.Context unwinding a fiber it destroys (never a suspended one here)
      } catch (...) {
        thread.error = std::current_exception();
      }
      thread.wait = Wait::done;
      before_switch(nullptr, thread.scheduler);
      return std::move(thread.sink);
    });
  }
  try {
    schedule_block(block);
  } catch (...) {
    // Every suspended thread is resumed once more to unwind its stack (Abandoned), so no fiber is
    // ever destroyed mid-kernel.
    block.abandoning = true;
    for (Thread& thread : block.threads)
      if (thread.wait != Wait::done) resume(thread);
    throw;
  }
}

void schedule_block(Block& block) {
  for (std::uint64_t pass = 0;; ++pass) {
    bool ran = false;
    for (std::size_t t : pass_order(block, pass)) {
      Thread& thread = block.threads[t];
      if (thread.wait != Wait::runnable) continue;
      resume(thread);
      ran = true;
      if (thread.error) rethrow_with_place(block, thread);
      check_guards(block, thread);
    }
    bool warps = false;
    for (std::size_t first = 0; first < block.threads.size(); first += kWarpSize) warps |= complete_warps(block, first);
    if (std::all_of(block.threads.begin(), block.threads.end(), [](const Thread& t) { return t.wait == Wait::done; })) return;
    if (!ran && !warps && !try_open_barrier(block))
      FRUGAL_THROW(KernelError, where(block, nullptr), " is stuck: ", describe_waits(block));
  }
}

// Guards around the dynamic shared memory (there even when none was asked for, so that using it
// anyway is caught), the memory itself poisoned, and every static __shared__ array poisoned too.
void prepare_shared_memory(Block& block) {
  const std::size_t guard = guard_bytes(block.shared_bytes);
  block.shared.resize(2 * guard + block.shared_bytes);
  for (std::size_t i = 0; i < block.shared.size(); ++i) block.shared[i] = guard_byte(i);
  std::memset(block.shared.data() + guard, t_options.poison_shared ? kPoisonByte : 0, block.shared_bytes);
  if (t_options.poison_shared && __start_frugal_shared && __stop_frugal_shared)
    std::memset(__start_frugal_shared, kPoisonByte, static_cast<std::size_t>(__stop_frugal_shared - __start_frugal_shared));
}

void check_launch(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes) {
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  FRUGAL_CHECK_AS(KernelError, threads >= 1 && threads <= kMaxThreadsPerBlock && block.z <= 64, "launch of ", kernel,
                  ": a block of (", block.x, ",", block.y, ",", block.z, ") threads is invalid (1 to ",
                  kMaxThreadsPerBlock, " threads, z at most 64)");
  FRUGAL_CHECK_AS(KernelError, grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.y <= 65535 && grid.z <= 65535,
                  "launch of ", kernel, ": a grid of (", grid.x, ",", grid.y, ",", grid.z, ") blocks is invalid");
  FRUGAL_CHECK_AS(KernelError, shared_bytes <= t_options.max_shared_bytes, "launch of ", kernel, ": ", shared_bytes,
                  " bytes of dynamic shared memory exceed the ", t_options.max_shared_bytes, " a block may have");
}

}  // namespace

std::string_view schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::forward: return "forward";
    case Schedule::reverse: return "reverse";
    case Schedule::shuffle: return "shuffle";
  }
  return "?";
}

Options options() { return t_options; }
OptionsScope::OptionsScope(Options new_options) : previous_(t_options) { t_options = new_options; }
OptionsScope::~OptionsScope() { t_options = previous_; }

const ThreadIndex& current_thread() { return running_thread("threadIdx/blockIdx/blockDim/gridDim").index; }

void block_barrier() {
  Thread& thread = running_thread("__syncthreads");
  thread.wait = Wait::barrier;
  suspend(thread);
}

std::uint64_t warp_exchange(unsigned mask, WarpOp op, std::uint64_t bits, int operand, int width) {
  Thread& thread = running_thread(op_name(op));
  FRUGAL_CHECK_AS(KernelError, (mask >> (thread.linear % kWarpSize)) & 1u, where(*t_block, &thread), " calls ",
                  op_name(op), " with mask 0x", std::hex, mask, ", which does not name its own lane");
  FRUGAL_CHECK_AS(KernelError, width >= 1 && width <= kWarpSize && (width & (width - 1)) == 0, where(*t_block, &thread),
                  ": width ", width, " of ", op_name(op), " is not a power of two up to 32");
  thread.wait = Wait::warp;
  thread.op = op;
  thread.mask = mask;
  thread.operand = operand;
  thread.width = width;
  thread.bits = bits;
  suspend(thread);
  return thread.result;
}

void* dynamic_shared_memory() {
  running_thread("dynamic shared memory");
  return t_block->shared.data() + guard_bytes(t_block->shared_bytes);
}

void run_grid(const char* kernel, dim3 grid, dim3 block_dim, std::size_t shared_bytes, const std::function<void()>& body) {
  FRUGAL_CHECK_AS(KernelError, t_block == nullptr, "launch of ", kernel, " from inside an emulated kernel");
  check_launch(kernel, grid, block_dim, shared_bytes);
  std::lock_guard lock(g_launch_mutex);
  Block block;
  block.kernel = kernel;
  block.shared_bytes = shared_bytes;
  const std::size_t count = std::size_t{block_dim.x} * block_dim.y * block_dim.z;
  struct Reset {
    ~Reset() { t_block = nullptr; t_thread = nullptr; }
  } reset;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block.threads.clear();  // the fibers of the previous block are done
        block.threads.resize(count);
        for (std::size_t t = 0; t < count; ++t) {
          const auto x = static_cast<unsigned>(t % block_dim.x), y = static_cast<unsigned>(t / block_dim.x % block_dim.y),
                     z = static_cast<unsigned>(t / (std::size_t{block_dim.x} * block_dim.y));
          block.threads[t].index = {dim3(x, y, z), dim3(bx, by, bz), block_dim, grid};
          block.threads[t].linear = static_cast<int>(t);
        }
        prepare_shared_memory(block);
        t_block = &block;
        run_block(block, body);
      }
}

}  // namespace frugal::emu
