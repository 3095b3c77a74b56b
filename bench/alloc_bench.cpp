// `frugal bench alloc`: what an allocation plus its free costs, and how much memory the allocator holds
// for what is alive, on allocation traces.
//   case                     impls                                            unit
//   training_trace           caching, direct, jemalloc, mimalloc              ns/op (per trace event)
//   random_mix               caching, direct, jemalloc, mimalloc              ns/op
//   peak_reserved_over_live  caching-expandable, pytorch-rules                ratio
// training_trace is MobileNetV2's trace recorded while it trains (train/training_trace.h); random_mix
// is a seeded mix of small, medium and large requests, alive for random stretches. `caching` is
// frugal's CachingAllocator and `direct` the same allocator in bypass mode, both over host memory, or
// over cudaMalloc with --device cuda. jemalloc and mimalloc (host only) are loaded from their Debian
// packages with dlopen, so they never replace the process's malloc; a library that cannot be loaded is
// left out with a note on stderr. The ratio case replays the training trace on a simulated device:
// frugal's default policy (expandable segments) against PyTorch's rules (`--expandable off
// --max-split none`); with expandable segments off, frugal's policy *is* PyTorch's, so there is no
// third, "caching-fixed", figure.
// Not here: thresholds (docs/benchmarks.md), the replay itself (memory/alloc_trace.cpp).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <utility>

#include "bench/bench.h"
#include "core/error.h"
#include "memory/alloc_trace.h"
#include "train/training_trace.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal::bench {

namespace {

struct Sizes {
  train::TrainingTraceOptions training;
  int mix_events;
  int min_runs;
  double min_seconds;
};

// Full: the trace the docs quote (batch 32 at 224x224, two cycles of batch sizes). Quick: a tiny
// network input and few events, to check the harness in a second.
const Sizes kFullSizes{{.batch_size = 32, .steps = 8, .resolution = 224}, 200'000, 3, 1.0};
const Sizes kQuickSizes{{.batch_size = 2, .steps = 2, .resolution = 64}, 2'000, 1, 0.0};

// ---- the random mix

// Sizes drawn log-uniformly from three classes, in the proportions a training step shows: many small
// tensors (biases, BatchNorm statistics, scalars), fewer medium ones, a few large activations and
// workspaces. At most kMaxLive allocations are alive; each step allocates with probability 1/2
// while that allows.
struct SizeClass {
  double share;
  std::size_t low, high;
};
constexpr SizeClass kSizeClasses[] = {{0.6, 64, 256 << 10}, {0.3, 256 << 10, 8 << 20}, {0.1, 8 << 20, 128 << 20}};
constexpr std::size_t kMaxLive = 512;
constexpr std::uint64_t kMixSeed = 42;

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library, unlike
// std::uniform_real_distribution.
double unit_draw(std::mt19937_64& engine) { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }

std::size_t draw_size(std::mt19937_64& engine) {
  double pick = unit_draw(engine);
  for (const SizeClass& c : kSizeClasses) {
    if (pick < c.share || &c == &kSizeClasses[std::size(kSizeClasses) - 1]) {
      const double log_span = std::log2(static_cast<double>(c.high) / static_cast<double>(c.low));
      const auto bytes = static_cast<std::size_t>(static_cast<double>(c.low) * std::exp2(unit_draw(engine) * log_span));
      return bytes / 4 * 4;  // whole floats
    }
    pick -= c.share;
  }
  return 0;  // unreachable: the last class catches every draw
}

std::string random_mix_trace(int events) {
  std::mt19937_64 engine(kMixSeed);
  std::ostringstream out;
  std::vector<int> live;
  int next_id = 0;
  for (int i = 0; i < events; ++i) {
    const bool allocate = live.empty() || (live.size() < kMaxLive && (engine() & 1));
    if (allocate) {
      out << "+ r" << next_id << ' ' << draw_size(engine) << '\n';
      live.push_back(next_id++);
    } else {
      const std::size_t victim = engine() % live.size();
      out << "- r" << live[victim] << '\n';
      live[victim] = live.back();
      live.pop_back();
    }
  }
  for (int id : live) out << "- r" << id << '\n';
  return out.str();
}

// ---- peers loaded with dlopen

struct Peer {
  std::string name;
  void* (*allocate)(std::size_t bytes);
  void (*free)(void* ptr, std::size_t bytes);
};

using MallocX = void* (*)(std::size_t, int);
using SdallocX = void (*)(void*, std::size_t, int);
using MiMalloc = void* (*)(std::size_t);
using MiFree = void (*)(void*);
MallocX je_mallocx = nullptr;
SdallocX je_sdallocx = nullptr;
MiMalloc mi_malloc = nullptr;
MiFree mi_free = nullptr;

// Note [jemalloc and static TLS]: Debian's libjemalloc.so.2 uses initial-exec thread-local storage
// (2.6 KiB of it), which a library loaded by dlopen must find in glibc's small static TLS reserve
// (512 bytes by default), so dlopen fails with "cannot allocate memory in static TLS block". glibc
// sizes that reserve only at program start, from the GLIBC_TUNABLES environment variable. So the
// benchmark starts itself again, once, with a larger reserve; the variable also marks the second run,
// which never tries again.
constexpr const char* kStaticTlsTunable = "glibc.rtld.optional_static_tls=16384";

bool static_tls_tunable_set() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables && std::string(tunables).find("glibc.rtld.optional_static_tls") != std::string::npos;
}

// Replaces this process with a fresh run of the same command line and a larger static TLS reserve.
// Returns only if that cannot be done.
void restart_with_static_tls() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(cmdline, arg, '\0');) args.push_back(arg);
  if (args.empty()) return;
  const char* old = std::getenv("GLIBC_TUNABLES");
  const std::string tunables = old && *old ? std::string(old) + ":" + kStaticTlsTunable : kStaticTlsTunable;
  if (setenv("GLIBC_TUNABLES", tunables.c_str(), 1) != 0) return;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  execv("/proc/self/exe", argv.data());
}

// The handle is never closed: an allocator library cannot be unloaded while its memory may be in use.
void* open_library(const char* name, const char* impl) {
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle) return handle;
  const std::string error = dlerror();
  if (error.find("static TLS") != std::string::npos && !static_tls_tunable_set()) {
    restart_with_static_tls();  // Note [jemalloc and static TLS]
  }
  std::cerr << "frugal bench alloc: " << impl << " left out: " << error << "\n";
  return nullptr;
}

std::vector<Peer> load_peers() {
  std::vector<Peer> peers;
  if (void* jemalloc = open_library("libjemalloc.so.2", "jemalloc")) {
    je_mallocx = reinterpret_cast<MallocX>(dlsym(jemalloc, "mallocx"));
    je_sdallocx = reinterpret_cast<SdallocX>(dlsym(jemalloc, "sdallocx"));
    if (je_mallocx && je_sdallocx)  // the sized free, as a framework that knows every size would call it
      peers.push_back({"jemalloc", [](std::size_t n) { return je_mallocx(n, 0); },
                       [](void* p, std::size_t n) { je_sdallocx(p, n, 0); }});
    else
      std::cerr << "frugal bench alloc: jemalloc left out: mallocx/sdallocx not found\n";
  }
  if (void* mimalloc = open_library("libmimalloc.so.2", "mimalloc")) {
    mi_malloc = reinterpret_cast<MiMalloc>(dlsym(mimalloc, "mi_malloc"));
    mi_free = reinterpret_cast<MiFree>(dlsym(mimalloc, "mi_free"));
    if (mi_malloc && mi_free)
      peers.push_back({"mimalloc", [](std::size_t n) { return mi_malloc(n); }, [](void* p, std::size_t) { mi_free(p); }});
    else
      std::cerr << "frugal bench alloc: mimalloc left out: mi_malloc/mi_free not found\n";
  }
  return peers;
}

// ---- timing

std::unique_ptr<Backing> make_backing(Device device) {
#if FRUGAL_WITH_CUDA
  if (device.is_cuda()) return cuda::make_cuda_backing(device.index());
#endif
  FRUGAL_CHECK_DEVICE(device.is_cpu(), "bench alloc: ", device.str(), " needs a CUDA build");
  return std::make_unique<HostBacking>();
}

// One allocator for all runs: after the warm-up its cache is what a long training run's would be.
double caching_ns(const Trace& trace, const Options& options, bool bypass, const Sizes& sizes) {
  CachingOptions caching;
  caching.bypass = bypass;
  CachingAllocator allocator(make_backing(options.device), caching);
  const double seconds = median_seconds([&] { replay_on(allocator, trace); }, [] {}, sizes.min_runs, sizes.min_seconds);
  return seconds * 1e9 / static_cast<double>(trace.events.size());
}

// The same events as replay_on, through a peer's allocate and free; what the trace leaves alive is
// freed at the end of each run, as replay_on does.
double peer_ns(const Trace& trace, const Peer& peer, const Sizes& sizes) {
  std::vector<void*> live(trace.slots, nullptr);
  std::vector<std::size_t> bytes(trace.slots, 0);
  const auto run = [&] {
    for (const TraceEvent& event : trace.events) {
      if (event.is_alloc) {
        live[event.slot] = peer.allocate(event.bytes);
        bytes[event.slot] = event.bytes;
      } else {
        peer.free(live[event.slot], bytes[event.slot]);
        live[event.slot] = nullptr;
      }
    }
    for (std::size_t slot = 0; slot < live.size(); ++slot)
      if (live[slot]) peer.free(std::exchange(live[slot], nullptr), bytes[slot]);
  };
  return median_seconds(run, [] {}, sizes.min_runs, sizes.min_seconds) * 1e9 / static_cast<double>(trace.events.size());
}

void timing_cases(const std::string& case_name, const Trace& trace, const Options& options, const Sizes& sizes,
                  const std::vector<Peer>& peers, std::vector<Result>& results) {
  results.push_back({case_name, "caching", caching_ns(trace, options, false, sizes), "ns/op", false});
  results.push_back({case_name, "direct", caching_ns(trace, options, true, sizes), "ns/op", false});
  for (const Peer& peer : peers) results.push_back({case_name, peer.name, peer_ns(trace, peer, sizes), "ns/op", false});
}

// ---- memory efficiency

void memory_cases(const Trace& trace, std::vector<Result>& results) {
  struct Policy {
    const char* impl;
    ReplayOptions options;
  };
  const Policy policies[] = {{"caching-expandable", {}},
                             {"pytorch-rules", {.max_split = kUnlimited, .expandable = false}}};
  for (const Policy& policy : policies) {
    const ReplayResult result = replay(trace, policy.options);
    const double ratio =
        static_cast<double>(result.peak_reserved_bytes) / static_cast<double>(std::max<std::size_t>(result.peak_live_bytes, 1));
    results.push_back({"peak_reserved_over_live", policy.impl, ratio, "ratio", false});
  }
}

}  // namespace

std::vector<Result> alloc_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  // Peers first: loading jemalloc may start the process again (Note [jemalloc and static TLS]).
  const std::vector<Peer> peers = options.device.is_cpu() ? load_peers() : std::vector<Peer>{};
  const Trace training = parse_trace_text(train::record_training_trace(sizes.training), "training-trace");
  const Trace mix = parse_trace_text(random_mix_trace(sizes.mix_events), "random-mix");
  std::vector<Result> results;
  timing_cases("training_trace", training, options, sizes, peers, results);
  timing_cases("random_mix", mix, options, sizes, peers, results);
  memory_cases(training, results);
  return results;
}

}  // namespace frugal::bench
