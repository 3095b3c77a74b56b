// The emulator's scheduler (see emulator.h).
//
// Note [How a block runs]: every CUDA thread of the block is a fiber. The scheduler makes passes:
// in each pass it resumes every runnable thread once, in the order the schedule gives, and each
// runs until it reaches a meeting point (__syncthreads, a warp primitive) or returns. After a
// pass, warps whose named lanes have all reached the same warp primitive exchange their values and
// run on; when nothing else can run and every live thread waits at one __syncthreads, the barrier
// opens (threads that returned are not waited for, as on a GPU). Live threads waiting at different
// __syncthreads are a divergent barrier; if nothing can happen at all, the kernel is stuck, and the
// emulator says which threads wait where.
// Because threads switch only at meeting points, what a thread does between two of them is
// atomic, and the schedule decides only the order of those stretches: exactly the freedom a GPU
// has, minus interleavings inside a stretch, which no correct kernel may depend on.
#include "emu/emulator.h"

#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include "emu/hazard_checker.h"

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
// Note [Stack colouring]: the pool hands out stacks a multiple of their size apart, so without help
// every fiber's top frames (where it suspends and resumes) share the same cache sets, and a block of
// 1024 threads meeting at a warp shuffle evicts itself from L1 and L2 at every switch. Each stack's
// top is moved down by its own multiple of a cache line, spreading 1024 fibers over 64 KiB of sets;
// the stack is that much larger, so a kernel still has kStackBytes.
constexpr std::size_t kCacheLine = 64;
constexpr std::size_t kStackColours = 1024;
constexpr std::size_t kPooledStackBytes = kStackBytes + kCacheLine * kStackColours;
constexpr unsigned char kPoisonByte = 0xFF;  // as float: NaN; as an integer: -1

enum class Wait : std::uint8_t { runnable, barrier, warp, done };

struct Thread {
  ThreadIndex index;
  int linear = 0;  // position in the block, x fastest: the warp is linear / 32, the lane linear % 32
  ctx::fiber fiber;   // where to resume this thread
  ctx::fiber sink;    // inside the thread: where to return to the scheduler
  StackBounds stack;      // this fiber's stack, and the scheduler's: Note [Fibers under AddressSanitizer]
  StackBounds scheduler;
  Wait wait = Wait::runnable;
  std::source_location barrier;  // the __syncthreads it waits at
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
  // t_options.check_hazards at launch, kept here because every shared-memory access asks, and a
  // thread_local with a dynamic initialiser costs a call to its TLS wrapper each time it is read.
  bool check_hazards = true;
  std::vector<Thread> threads;
  std::vector<unsigned char> shared;  // dynamic shared memory (operator new aligns it to 16 bytes)
  HazardChecker hazards;
};

// Static __shared__ arrays all live in the section frugal_shared (cuda_emu.h); the linker marks its
// bounds with these symbols, absent (null) when no kernel declares one.
extern "C" char __start_frugal_shared[] __attribute__((weak));
extern "C" char __stop_frugal_shared[] __attribute__((weak));

// Launches from several OS threads take turns: static __shared__ arrays exist once per process.
std::mutex g_launch_mutex;

// Every thread starts from the defaults, except that FRUGAL_EMULATOR_HAZARDS=0 turns the race checks
// off for the whole process: a whole training step in the emulated CUDA build spends about 40% of
// its time checking shared-memory accesses that the kernel tests already check one kernel at a time
// (docs/cuda-emulator.md has the measurement).
Options initial_options() {
  static const Options initial = [] {
    Options o;
    const char* hazards = std::getenv("FRUGAL_EMULATOR_HAZARDS");
    if (hazards && std::string_view(hazards) == "0") o.check_hazards = false;
    return o;
  }();
  return initial;
}
thread_local Options t_options = initial_options();
thread_local Block* t_block = nullptr;
thread_local Thread* t_thread = nullptr;

std::string thread_name(const Thread& thread) {
  const dim3& t = thread.index.thread_idx;
  std::ostringstream out;
  out << "thread (" << t.x << "," << t.y << "," << t.z << ")";
  return out.str();
}

std::string where(const Block& block, const Thread* thread) {
  const ThreadIndex& i = block.threads.front().index;
  std::ostringstream out;
  out << "kernel " << block.kernel << ", block (" << i.block_idx.x << "," << i.block_idx.y << "," << i.block_idx.z << ")";
  if (thread) out << ", " << thread_name(*thread);
  return out.str();
}

[[noreturn, gnu::cold, gnu::noinline]] void report_outside_kernel(const char* what) {
  FRUGAL_THROW(KernelError, what, " called outside an emulated kernel");
}

// Called for every index and shared-memory access, hence the report out of line (see report_hazard).
Thread& running_thread(const char* what) {
  if (t_thread == nullptr) [[unlikely]]
    report_outside_kernel(what);
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
    // Note [Stack colouring]. The base, sp - size, is what the pool frees, so both move together.
    // The colour follows from the address, so a reused stack always has the same layout: under
    // AddressSanitizer a fiber that ended leaves its last frames' redzones poisoned, and the next
    // fiber's record (which Boost places at the top) must not land on them.
    const auto base = reinterpret_cast<std::uintptr_t>(stack.sp) - stack.size;
    const std::size_t colour = base / kPooledStackBytes % kStackColours * kCacheLine;
    stack.sp = static_cast<char*>(stack.sp) - colour;
    stack.size -= colour;
    *last_ = {static_cast<char*>(stack.sp) - stack.size, stack.size};  // stacks grow down from sp
    return stack;
  }
  void deallocate(ctx::stack_context& stack) noexcept { pool_->deallocate(stack); }

 private:
  ctx::pooled_fixedsize_stack* pool_;
  StackBounds* last_;
};

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
    if (leader.op == WarpOp::sync) block.hazards.warp_sync(static_cast<int>(first), present);
    completed = true;
  }
  return completed;
}

// ---- the scheduler

// The order in which a pass resumes the block's threads, written into `order` (kept across passes:
// a block of 1024 threads makes hundreds of passes in a kernel with shuffles).
void fill_pass_order(const Block& block, std::uint64_t pass, std::vector<std::size_t>& order) {
  order.resize(block.threads.size());
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

std::string site_name(const std::source_location& site) {
  std::ostringstream out;
  out << std::filesystem::path(site.file_name()).filename().string() << ":" << site.line() << ":" << site.column();
  return out.str();
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() && std::string_view(a.file_name()) == b.file_name();
}

// Opens the barrier if every live thread waits at it; threads that returned are not waited for, as
// on a GPU. Live threads waiting at different __syncthreads calls are a divergent barrier, undefined
// on a GPU (it may hang, or let threads through each other's barrier), so an error here.
bool try_open_barrier(Block& block) {
  const Thread* first = nullptr;
  for (const Thread& t : block.threads) {
    if (t.wait == Wait::runnable || t.wait == Wait::warp) return false;
    if (t.wait == Wait::barrier && !first) first = &t;
  }
  if (!first) return false;
  for (const Thread& t : block.threads)
    if (t.wait == Wait::barrier && !same_site(t.barrier, first->barrier))
      FRUGAL_THROW(KernelError, where(block, nullptr), ": divergent __syncthreads: ", thread_name(*first), " waits at ",
                   site_name(first->barrier), " and ", thread_name(t), " at ", site_name(t.barrier),
                   "; every live thread of a block must reach the same __syncthreads");
  for (Thread& t : block.threads)
    if (t.wait == Wait::barrier) t.wait = Wait::runnable;
  block.hazards.barrier();
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
  static thread_local ctx::pooled_fixedsize_stack stacks(kPooledStackBytes);
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
  std::vector<std::size_t> order;
  for (std::uint64_t pass = 0;; ++pass) {
    bool ran = false;
    if (pass == 0 || t_options.schedule == Schedule::shuffle) fill_pass_order(block, pass, order);
    for (std::size_t t : order) {
      Thread& thread = block.threads[t];
      if (thread.wait != Wait::runnable) continue;
      resume(thread);
      ran = true;
      if (thread.error) rethrow_with_place(block, thread);
    }
    bool warps = false;
    for (std::size_t first = 0; first < block.threads.size(); first += kWarpSize) warps |= complete_warps(block, first);
    if (std::all_of(block.threads.begin(), block.threads.end(), [](const Thread& t) { return t.wait == Wait::done; })) return;
    if (!ran && !warps && !try_open_barrier(block))
      FRUGAL_THROW(KernelError, where(block, nullptr), " is stuck: ", describe_waits(block));
  }
}

std::size_t static_shared_bytes() {
  return __start_frugal_shared ? static_cast<std::size_t>(__stop_frugal_shared - __start_frugal_shared) : 0;
}

// Dynamic shared memory and every static shared array poisoned, and no access recorded yet.
void prepare_shared_memory(Block& block) {
  std::fill(block.shared.begin(), block.shared.end(), t_options.poison_shared ? kPoisonByte : 0);
  if (t_options.poison_shared && static_shared_bytes() > 0)
    std::memset(__start_frugal_shared, kPoisonByte, static_shared_bytes());
  block.hazards.start_block(static_cast<int>(block.threads.size()), block.shared.size(), static_shared_bytes());
}

std::string span_name(const SharedSpan& span) {
  return span.name ? std::string("static shared array ") + span.name : std::string("dynamic shared memory");
}

const char* access_verb(SharedAccess kind) {
  switch (kind) {
    case SharedAccess::read: return "reads";
    case SharedAccess::write: return "writes";
    case SharedAccess::atomic: return "atomically updates";
  }
  return "?";
}

// The reports below are out of line and cold on purpose: check_shared_access runs for every
// shared-memory word a kernel touches, and an error message built inline gives it a frame of
// string temporaries that AddressSanitizer poisons and unpoisons on every call (measured: 53% of
// an ASan emulated training step, 2026-12-05, before they moved here).

// Written as memcheck would: who, how many bytes, where, and which end of the span.
[[noreturn, gnu::cold, gnu::noinline]] void report_out_of_bounds(const Block& block, const Thread& thread,
                                                                 const SharedSpan& span, std::ptrdiff_t offset,
                                                                 std::size_t bytes, SharedAccess kind) {
  FRUGAL_THROW(KernelError, where(block, &thread), " ", access_verb(kind), " ", bytes, " bytes at offset ", offset, " of ",
               span_name(span), ", ", offset < 0 ? "before its start" : "past its end", " (", span.bytes, " bytes)");
}

// Written as compute-sanitizer's racecheck would: the kind, where, and both threads.
[[noreturn, gnu::cold, gnu::noinline]] void report_hazard(const Block& block, const Thread& thread, SharedAccess kind, const Hazard& hazard,
                                const SharedSpan& span, std::ptrdiff_t offset) {
  const Thread& earlier = block.threads[static_cast<std::size_t>(hazard.earlier_thread)];
  const int warp = thread.linear / kWarpSize;
  std::ostringstream ordering;
  if (earlier.linear / kWarpSize == warp)
    ordering << ", and no __syncwarp ordered them (both in warp " << warp << ")";
  else
    ordering << " (different warps: only __syncthreads orders them)";
  FRUGAL_THROW(KernelError, where(block, nullptr), ": ", hazard_name(hazard.kind), " hazard on ", span_name(span),
               " at offset ", offset, ": ", thread_name(thread), " ", access_verb(kind), " a word that ", thread_name(earlier),
               hazard.kind == HazardKind::write_after_read ? " read" : " wrote", " since the last __syncthreads",
               ordering.str());
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

void block_barrier(const std::source_location& site) {
  Thread& thread = running_thread("__syncthreads");
  thread.wait = Wait::barrier;
  thread.barrier = site;
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

SharedSpan dynamic_shared_span() {
  running_thread("dynamic shared memory");
  return {t_block->shared.data(), t_block->shared.size(), nullptr};
}

void* check_shared_access(const SharedSpan& span, std::ptrdiff_t offset, std::size_t bytes, SharedAccess kind) {
  const Thread& thread = running_thread("a shared-memory access");
  const Block& block = *t_block;
  if (offset < 0 || static_cast<std::size_t>(offset) + bytes > span.bytes) [[unlikely]]
    report_out_of_bounds(block, thread, span, offset, bytes, kind);
  unsigned char* address = span.begin + offset;
  if (!block.check_hazards) return address;
  // Static arrays share one region, the section; dynamic shared memory is its own.
  const bool dynamic = span.name == nullptr;
  const std::ptrdiff_t span_start = dynamic ? 0 : span.begin - reinterpret_cast<unsigned char*>(__start_frugal_shared);
  const auto region = dynamic ? HazardChecker::dynamic_region : HazardChecker::static_region;
  const auto hazard = t_block->hazards.access(thread.linear, region, static_cast<std::size_t>(span_start + offset), bytes, kind);
  if (hazard) {
    // The word's offset in the span; an unaligned access may start inside it, and names its own.
    const std::ptrdiff_t word = static_cast<std::ptrdiff_t>(hazard->offset) - span_start;
    report_hazard(block, thread, kind, *hazard, span, std::max(word, offset));
  }
  return address;
}

void run_grid(const char* kernel, dim3 grid, dim3 block_dim, std::size_t shared_bytes, const std::function<void()>& body) {
  FRUGAL_CHECK_AS(KernelError, t_block == nullptr, "launch of ", kernel, " from inside an emulated kernel");
  check_launch(kernel, grid, block_dim, shared_bytes);
  std::lock_guard lock(g_launch_mutex);
  Block block;
  block.kernel = kernel;
  block.check_hazards = t_options.check_hazards;
  block.shared.resize(shared_bytes);
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
