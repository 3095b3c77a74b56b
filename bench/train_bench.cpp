// `frugal bench train`: MobileNetV2 (models/registry.h, 10 classes, one input channel) on a batch of
// 64 1x32x32 f32 images, with the standard stem and the CIFAR stem, frugal beside PyTorch.
//   case                                impls            unit        what
//   mobilenet_v2[_cifar]_b64            frugal, pytorch, img/s       training steps: forward (train mode),
//                                       pytorch_nchw,                mean cross-entropy, backward, SGD with
//                                       pytorch_VERSION              momentum 0.9, zero_grad
//   mobilenet_v2[_cifar]_b64_peak       frugal           MiB         the most bytes alive during a step
//   mobilenet_v2[_cifar]_b64_eval       the same and     img/s       forwards in eval mode, no autograd
//                                       pytorch_compile
//   mobilenet_v2[_cifar]_b64_eval_peak  frugal           MiB         the most bytes alive during one
//   activation_bytes_per_sample[_cifar] frugal, pytorch  MiB/sample  what a training forward keeps for
//                                                                    backward, per sample
//   mobilenet_v2[_cifar]_b64_scaling    frugal, pytorch, x           with N > 1 threads on the CPU: a
//                                       openblas_gemm_1024,          step's (a GEMM's, a triad's) time
//                                       triad_64mib                  on 1 thread over its time on N,
//                                                                    alternating in one run (Note
//                                                                    [Scaling in one run]); pytorch:
//                                                                    the newest torch, eager
//   mobilenet_v2[_cifar]_b64_eval_scaling  the same      x           the same for an eval forward
//   mobilenet_v2[_cifar]_b64[_eval]_round_trip  host     ns          with N > 1 threads on the CPU: a
//                                                                    cache line's round trip between
//                                                                    two threads, in the speed case's
//                                                                    rounds (Note [Where the two
//                                                                    cores sit])
// frugal's bytes come from the allocator's books (train/step_memory.h: tag `activation`, and the
// peak of requested bytes, everything alive counted: weights, momentum, the batch). PyTorch's saved
// bytes come from its saved-tensor hooks (bench/pytorch_train_peer.py says how they are counted).
// PyTorch gets no peak rows: its CPU allocator keeps no statistics (torch.cuda.max_memory_allocated is
// for CUDA only), and the process's RSS counts the interpreter and the libraries, not tensors.
//
// Each PyTorch peer is one long-lived process of one Python interpreter running
// bench/pytorch_train_peer.py, started once and asked for one timed step at a time, so that frugal's
// and PyTorch's steps alternate (alternating_median_seconds) under the same load, each timed step
// after an untimed one of its own (Note [A timed run follows one of its own]). It gets frugal's
// weights and batch through safetensors files in a temporary folder and frugal's thread count
// (torch.set_num_threads). The interpreters: each --peer-python, or by default the virtual
// environment scripts/peers.sh makes in the build tree (today's torch from PyPI) and Debian's
// /usr/bin/python3 (python3-torch 1.13), those that exist. The newest torch found is `pytorch`, in
// its fastest setting for CNNs on the CPU (channels_last), beside `pytorch_nchw` (its default layout)
// and, for eval, `pytorch_compile` (torch.compile, channels_last); each older one is
// `pytorch_VERSION`, channels_last. Without an interpreter that imports torch, or on a device other
// than the CPU, the pytorch rows are absent and a note says why.
// Not here: the model (models/mobilenet_v2.h), speed targets (docs/benchmarks.md).
#include <fcntl.h>
#include <omp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "core/allocator_registry.h"
#include "core/cpu/parallel.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "core/random.h"
#include "kernels/cpu_runtime.h"
#include "kernels/gemm.h"
#include "models/registry.h"
#include "train/step_memory.h"
#include "nn/autograd.h"
#include "nn/optim.h"
#include "nn/safetensors.h"

namespace frugal::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Sizes {
  std::int64_t batch;
  int min_runs;        // timed rounds of each case, frugal and PyTorch in turn
  double min_seconds;  // and rounds until this long has passed, for the cases of short steps
};
// Full: at least 7 rounds and 3 s of each case keep the whole run near 2 minutes on 1 core and 2.5
// on 2, where the scaling cases run too (the CIFAR stem's training steps take most of it). Quick: a
// batch of 4 (BatchNorm needs more than one value per channel at the 1x1 last feature map) and one
// round.
constexpr Sizes kFullSizes{64, 7, 3.0};
constexpr Sizes kQuickSizes{4, 1, 0.0};

constexpr std::int64_t kSide = 32, kClasses = 10;
constexpr std::uint64_t kSeed = 6;  // the weights and the batch
constexpr double kMiB = 1024.0 * 1024.0;
constexpr const char* kDebianPython = "/usr/bin/python3";  // where Debian's python3-torch installs

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- the PyTorch peer process

// Note [A peer that ends]: writing to the pipe of a peer that has ended raises SIGPIPE, which would
// end frugal too; while a peer runs, SIGPIPE is ignored, so the write fails with EPIPE instead and
// the next read reports the peer gone.
class Peer {
 public:
  // Starts the peer in `python`; nullptr with `why` filled in when it cannot run here.
  static std::unique_ptr<Peer> start(const std::string& python, int threads, std::string& why) {
    if (::access(python.c_str(), X_OK) != 0) {
      why = python + " not found";
      return nullptr;
    }
    auto peer = std::unique_ptr<Peer>(new Peer(python, threads));
    const std::string hello = peer->read_line();  // "ready torch VERSION threads N"
    if (hello.rfind("ready torch ", 0) == 0) {
      peer->version_ = hello.substr(12, hello.find(' ', 12) - 12);
      return peer;
    }
    if (hello.rfind("unavailable ", 0) == 0)
      why = python + " cannot import torch: " + hello.substr(12);
    else
      why = python + " " + FRUGAL_TRAIN_PEER + (hello.empty() ? " ended before it was ready" : " said '" + hello + "'");
    return nullptr;
  }

  const std::string& python() const { return python_; }
  const std::string& version() const { return version_; }  // torch.__version__, e.g. 2.15.0+cu132

  // One request line, one reply line; an Error for a reply "error ..." or a peer that ended.
  std::string ask(const std::string& request) {
    const std::string line = request + "\n";
    const bool sent = ::write(to_peer_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    const std::string reply = read_line();
    FRUGAL_CHECK(sent && !reply.empty() && reply.rfind("error ", 0) != 0, "bench train: the PyTorch peer in ", python_,
                 " failed on '", request, "': ", reply.empty() ? "it ended" : reply);
    return reply;
  }

  ~Peer() {
    ::close(to_peer_);  // the peer ends at the end of its input
    ::close(from_peer_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::sigaction(SIGPIPE, &old_sigpipe_, nullptr);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

 private:
  Peer(std::string interpreter, int threads) : python_(std::move(interpreter)) {
    int in[2], out[2];
    // Close-on-exec: a peer started later must not inherit this one's pipe ends, or this peer would
    // never see the end of its input and ~Peer would wait for it forever. (dup2 onto stdin and
    // stdout clears the flag for the two ends this peer itself gets.)
    FRUGAL_CHECK(::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0, "bench train: pipe failed: ",
                 std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    std::string script = FRUGAL_TRAIN_PEER, python = python_, flag = "--threads", count = std::to_string(threads);
    char* argv[] = {python.data(), script.data(), flag.data(), count.data(), nullptr};
    // The peer runs as PyTorch's users run it, without the settings frugal made for itself.
    std::vector<std::string> environment = user_environment();
    std::vector<char*> envp;
    for (std::string& variable : environment) envp.push_back(variable.data());
    envp.push_back(nullptr);
    const int failed = ::posix_spawn(&pid_, python_.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    if (failed != 0) {
      ::close(in[1]);
      ::close(out[0]);
      FRUGAL_THROW(Error, "bench train: cannot start ", python_, ": ", std::strerror(failed));
    }
    to_peer_ = in[1];
    from_peer_ = out[0];
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_sigpipe_);  // Note [A peer that ends]
  }

  // The next line the peer prints, without its newline; "" when the peer has ended.
  std::string read_line() {
    std::string line;
    char c = 0;
    while (::read(from_peer_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }

  std::string python_, version_;
  pid_t pid_ = -1;
  int to_peer_ = -1, from_peer_ = -1;
  struct sigaction old_sigpipe_ {};
};

// ---- which peers, in which settings

// The newest torch's eager channels_last row: the peer the targets name, and the one that takes
// turns in the scaling cases.
constexpr const char* kNewestEagerImpl = "pytorch";

// One PyTorch row: a peer process, the setting its model runs in, the impl name it reports.
struct PeerSetting {
  Peer* peer;
  std::string impl;          // pytorch, pytorch_nchw, pytorch_compile, pytorch_1.13.0a0
  std::string layout;        // nchw or channels_last, of the model and the batch
  bool compile = false;      // eval through torch.compile; no training rows
  bool saved_bytes = false;  // also reports what a training forward saves (the newest torch's row)
};

struct Peers {
  std::vector<std::unique_ptr<Peer>> processes;
  std::vector<PeerSetting> settings;
};

// The numbers of a version, in order: 2.15.0+cu132 -> {2, 15, 0}; 1.13.0a0 -> {1, 13, 0}.
std::vector<int> version_numbers(const std::string& version) {
  std::vector<int> numbers;
  for (std::size_t at = 0; at < version.size() && std::isdigit(static_cast<unsigned char>(version[at]));) {
    std::size_t end = at;
    while (end < version.size() && std::isdigit(static_cast<unsigned char>(version[end]))) ++end;
    numbers.push_back(std::stoi(version.substr(at, end - at)));
    if (end >= version.size() || version[end] != '.') break;
    at = end + 1;
  }
  return numbers;
}

// The interpreters to try: the --peer-python ones, else the peers.sh environment and Debian's python3.
std::vector<std::string> peer_pythons(const Options& options) {
  if (!options.peer_pythons.empty()) return options.peer_pythons;
  return {FRUGAL_PEERS_PYTHON, kDebianPython};
}

// Starts every interpreter that imports torch and gives each its rows; a note for each left out.
Peers start_peers(const Options& options, std::vector<std::string>& notes) {
  Peers peers;
  if (!options.device.is_cpu()) {
    notes.push_back("pytorch left out: its peers run on the CPU here, and these rows are " + options.device.str());
    return peers;
  }
  for (const std::string& python : peer_pythons(options)) {
    std::string why;
    if (auto peer = Peer::start(python, options.threads, why))
      peers.processes.push_back(std::move(peer));
    else
      notes.push_back("pytorch left out from " + why);
  }
  if (peers.processes.empty()) return peers;
  std::stable_sort(peers.processes.begin(), peers.processes.end(), [](const auto& a, const auto& b) {
    return version_numbers(a->version()) > version_numbers(b->version());
  });
  Peer* newest = peers.processes.front().get();
  peers.settings.push_back({newest, kNewestEagerImpl, "channels_last", false, true});
  peers.settings.push_back({newest, "pytorch_nchw", "nchw", false, false});
  if (!options.quick)  // compiling takes a minute or more; --quick only checks the harness
    peers.settings.push_back({newest, "pytorch_compile", "channels_last", true, false});
  for (std::size_t i = 1; i < peers.processes.size(); ++i) {
    Peer* older = peers.processes[i].get();
    peers.settings.push_back({older, "pytorch_" + older->version().substr(0, older->version().find('+')), "channels_last"});
  }
  for (const PeerSetting& setting : peers.settings)
    notes.push_back(setting.impl + ": torch " + setting.peer->version() + " (" + setting.peer->python() + "), " +
                    setting.layout + (setting.compile ? ", torch.compile, eval rows only" : ", eager"));
  notes.push_back("pytorch has no peak MiB rows: its CPU allocator keeps no statistics of live bytes (only CUDA's does)");
  return peers;
}

// ---- the cases

struct Stem {
  std::string name;  // the cases' prefix, and the peers' key for its model
  bool cifar;
};

double per_second(const Sizes& sizes, double seconds) { return static_cast<double>(sizes.batch) / seconds; }

// Note [Where the two cores sit]
// This host's hypervisor runs the machine's two vCPUs either on two cores that share an L3 or on two
// that do not, and moves them between the two placements from minute to minute: a cache line's
// round trip between two threads took 50-60 ns in the first and 310-370 ns in the second, measured
// back to back on 2026-12-07 (docs/benchmarks.md). Two threads that split a layer's work, or
// reuse each other's memory, move cache lines between their cores, so a 2-thread cell depends on
// the placement its case ran in, and a run can catch either. So each speed case on more than one
// CPU thread times, in the same rounds as the steps, a round trip between the first two threads
// of OpenMP's team (the threads frugal's kernels run on), and reports its median: the
// `_round_trip` row says which placement the case's numbers come from.
constexpr int kRoundTrips = 20000;   // 1-7 ms a round at 50-350 ns each
constexpr int kSpinsBeforeYield = 4096;  // then yield: two threads on one core would spin a whole time slice

// Seconds for one round trip of a cache line between OpenMP threads 0 and 1: each waits for the
// other's write, then writes back.
double core_round_trip_seconds() {
  std::atomic<std::int64_t> turn{0};
  double seconds = 0;
#pragma omp parallel num_threads(2)
  if (omp_get_num_threads() == 2) {  // OpenMP may give fewer (OMP_THREAD_LIMIT): then there is nothing to time
    const std::int64_t me = omp_get_thread_num();
    const auto wait_for = [&](std::int64_t value) {
      for (int spins = 0; turn.load(std::memory_order_acquire) != value; ++spins)
        if (spins >= kSpinsBeforeYield) std::this_thread::yield();
    };
    const auto start = Clock::now();
    for (std::int64_t i = 0; i < kRoundTrips; ++i) {  // thread 0 writes the odd values, thread 1 the even
      if (me == 1) wait_for(2 * i + 1);
      turn.store(2 * i + 1 + me, std::memory_order_release);
      if (me == 0) wait_for(2 * i + 2);
    }
    if (me == 0) seconds = seconds_since(start) / kRoundTrips;
  }
  return seconds;
}

// The name a peer process knows this stem's model by in `setting` (its `load` request's KEY).
std::string peer_key(const Stem& stem, const PeerSetting& setting) { return stem.name + "/" + setting.impl; }

// Timed rounds of `frugal_run` and of each peer setting's `verb` ("train" or "eval") on this stem's
// model, in turn; the rows of `case_name`, and with `round_trip` the row `case_name`_round_trip
// (Note [Where the two cores sit]).
void speed_case(const std::string& case_name, const Sizes& sizes, const std::function<double()>& frugal_run,
                const std::vector<PeerSetting>& peers, const std::string& verb, const Stem& stem, bool round_trip,
                std::vector<Result>& results) {
  std::vector<std::function<double()>> runs = {frugal_run};
  std::vector<std::string> impls = {"frugal"};
  for (const PeerSetting& setting : peers) {
    if (setting.compile && verb == "train") continue;
    const std::string request = verb + " " + peer_key(stem, setting);
    runs.push_back([peer = setting.peer, request] { return std::stod(peer->ask(request)); });
    impls.push_back(setting.impl);
  }
  if (round_trip) runs.push_back(core_round_trip_seconds);
  // Note [A timed run follows one of its own] (bench/harness.cpp): the runs are in different processes.
  const std::vector<double> seconds = alternating_median_seconds(runs, sizes.min_runs, sizes.min_seconds, Warm::every_run);
  for (std::size_t i = 0; i < impls.size(); ++i)
    results.push_back({case_name, impls[i], per_second(sizes, seconds[i]), "img/s", true});
  if (round_trip) results.push_back({case_name + "_round_trip", "host", seconds.back() * 1e9, "ns", false});
}

// Loads this stem's weights and batch into every peer setting; a setting that cannot load (an old
// torch without torch.compile, a compiler missing) is left out of this stem with a note.
std::vector<PeerSetting> load_peers(const std::vector<PeerSetting>& settings, const Stem& stem,
                                    const std::string& weights, const std::string& batch,
                                    std::vector<std::string>& notes) {
  std::vector<PeerSetting> loaded;
  for (const PeerSetting& setting : settings) {
    try {
      setting.peer->ask("load " + peer_key(stem, setting) + (stem.cifar ? " 1 " : " 0 ") + weights + " " +
                        batch + " " + setting.layout + (setting.compile ? " 1" : " 0"));
      loaded.push_back(setting);
    } catch (const Error& e) {
      if (!setting.compile) throw;  // an eager model that cannot load is a broken peer, not a missing feature
      notes.push_back(setting.impl + " left out of " + stem.name + ": " + e.message());
    }
  }
  return loaded;
}

// Note [Scaling in one run]
// This machine's two cores are shared with other virtual machines, and what a second thread gains
// changes from minute to minute: the same 512x512 OpenBLAS GEMM ran 1.2x and 1.9x faster on two
// threads than on one, a few seconds apart. Two runs (--threads 1, then --threads 2) compare different
// minutes, so a ratio between them says as much about the neighbours as about frugal. Here 1 thread
// and N threads alternate step by step in one run, and two loops of known character alternate with
// them: an OpenBLAS GEMM, compute-bound (it works from the caches of its own core), and a triad over
// arrays larger than any cache, memory-bound (a[i] = b[i] + 1.5 c[i], shared by parallel_for like
// frugal's own loops). Their ratios are what this machine gave each kind of work in the same
// minutes: a model step, which is partly each, gains at most the first and where the caches stop
// holding its layers, nearer the second. The newest PyTorch's step, eager and channels_last, takes its
// turns too (its thread count set before each step): what today's library gains here in the same
// minutes. Each ratio is a round's 1-thread time over the same round's N-thread time, the median over
// the rounds: a minute in which the machine is slower for both cancels in the round's ratio, where a
// ratio of the two medians mixes minutes. Each timed run follows an untimed one of its own (Note [A
// timed run follows one of its own], bench/harness.cpp): after a 1-thread step the team's second
// thread has slept for tens of milliseconds and may wake beside the first on one core (the standard
// stem's training read 1.09-1.13x in seven of nine runs without these runs; with them 1.51-1.68x in
// seven of ten and 1.00-1.06x in three: measured 2026-12-06, docs/benchmarks.md); and the triad
// leaves nothing of a step's tensors in the caches.
constexpr std::int64_t kGemmSide = 1024;  // ~2 GFLOP: ~10 ms on 2 threads, long beside timer noise
// 64 MiB an array, 192 MiB moved a pass: six times a 32 MiB L3, so every pass comes from memory.
constexpr std::int64_t kTriadFloats = std::int64_t{1} << 24;
constexpr std::int64_t kTriadChunk = std::int64_t{1} << 16;  // floats a claimed piece covers at least

// The triad's arrays (192 MiB, std::vector: outside frugal's allocator, so no peak row counts them),
// made once per run and shared by the four _scaling cases.
struct TriadArrays {
  std::vector<float> out, left, right;

  TriadArrays() : out(kTriadFloats), left(kTriadFloats, 1.0f), right(kTriadFloats, 2.0f) {}
  // out[i] = left[i] + 1.5 right[i] over the whole arrays, on the threads omp_set_num_threads gave
  // this thread.
  void run() {
    cpu::parallel_for_chunks(kTriadFloats, kTriadChunk, kTriadFloats, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = left[i] + 1.5f * right[i];
    });
  }
};

// The peer's thread count (torch.set_num_threads) for the steps that follow.
void set_peer_threads(Peer& peer, int threads) { peer.ask("threads " + std::to_string(threads)); }

// A peer's timed step ("train" or "eval", `verb`) of this stem on `threads` threads: the thread count
// set first, in the same request stream, so the step runs with it.
std::function<double()> peer_step_on(const PeerSetting& setting, const std::string& verb, const Stem& stem, int threads) {
  return [peer = setting.peer, request = verb + " " + peer_key(stem, setting), threads] {
    set_peer_threads(*peer, threads);
    return std::stod(peer->ask(request));
  };
}

// The `case_name` rows: `step`'s, a GEMM's and a triad's time on 1 thread over their time on
// `threads`, and with `peer` (the newest torch, eager) its `verb` step's the same way. Each ratio is
// a round's 1-thread time over the same round's N-thread time, the median over rounds
// (AlternatingTimes::median_ratio). The GEMM's operands are tensors, made here and freed at the end,
// so that the speed cases' peaks (every byte alive counted) never hold them.
void scaling_case(const std::string& case_name, const Sizes& sizes, int threads, const std::function<void()>& step,
                  TriadArrays& triad, const PeerSetting* peer, const std::string& verb, const Stem& stem,
                  std::vector<Result>& results) {
  Generator generator(kSeed);
  const Tensor a = normal({kGemmSide, kGemmSide}, 0.0, 1.0, {}, &generator);
  const Tensor b = normal({kGemmSide, kGemmSide}, 0.0, 1.0, {}, &generator);
  const std::function<void()> gemm = [&] { matmul(a, b); };
  const std::function<void()> memory = [&] { triad.run(); };
  const auto on = [](int count, const std::function<void()>& work) {
    return std::function<double()>([count, &work] {
      omp_set_num_threads(count);
      const auto start = Clock::now();
      work();
      return seconds_since(start);
    });
  };
  // Each impl's two runs side by side: runs[2 i] on 1 thread, runs[2 i + 1] on `threads`.
  std::vector<std::function<double()>> runs;
  std::vector<std::string> impls;
  const auto add = [&](const std::string& impl, std::function<double()> one, std::function<double()> many) {
    impls.push_back(impl);
    runs.push_back(std::move(one));
    runs.push_back(std::move(many));
  };
  add("frugal", on(1, step), on(threads, step));
  add("openblas_gemm_1024", on(1, gemm), on(threads, gemm));
  add("triad_64mib", on(1, memory), on(threads, memory));
  if (peer) add(peer->impl, peer_step_on(*peer, verb, stem, 1), peer_step_on(*peer, verb, stem, threads));
  const AlternatingTimes times = alternating_seconds(runs, sizes.min_runs, sizes.min_seconds, Warm::every_run);
  omp_set_num_threads(threads);
  if (peer) set_peer_threads(*peer->peer, threads);  // the speed cases after this one
  for (std::size_t i = 0; i < impls.size(); ++i)
    results.push_back({case_name, impls[i], times.median_ratio(2 * i, 2 * i + 1), "x", true});
}

// The newest torch's eager setting among a stem's loaded peers (impl `pytorch`), or null.
const PeerSetting* newest_eager_peer(const std::vector<PeerSetting>& peers) {
  for (const PeerSetting& setting : peers)
    if (setting.impl == kNewestEagerImpl) return &setting;
  return nullptr;
}

// Every case of one stem: frugal's model, batch and optimizer, and the same in the peer; the
// _scaling and _round_trip cases where `triad` is given (on the CPU, with more than one thread).
void stem_cases(const Stem& stem, const Options& options, const Sizes& sizes, const Peers& all_peers,
                const TempDir& temp, TriadArrays* triad, Report& report) {
  std::vector<Result>& results = report.results;
  const Device device = options.device;
  Generator generator(kSeed);
  const auto model = models::make_model(
      "mobilenet_v2", {.num_classes = kClasses, .in_channels = 1, .cifar_stem = stem.cifar, .generator = &generator});
  const Tensor images = normal({sizes.batch, 1, kSide, kSide}, 0.0, 1.0, {}, &generator);
  const Tensor labels = randint(0, kClasses, {sizes.batch}, {.dtype = DType::i64}, &generator);
  std::vector<PeerSetting> peers;
  if (!all_peers.settings.empty()) {  // the same weights and batch, before frugal's steps change them
    const std::string weights = (temp.path / (stem.name + ".weights.safetensors")).string();
    const std::string batch = (temp.path / (stem.name + ".batch.safetensors")).string();
    nn::write_safetensors(weights, model->state_dict());
    nn::write_safetensors(batch, {{"images", images}, {"labels", labels}});
    peers = load_peers(all_peers.settings, stem, weights, batch, report.notes);
  }
  const PeerSetting* newest_eager = newest_eager_peer(peers);  // takes turns in the scaling cases
  model->to(device);
  const Tensor x = images.to(device), y = labels.to(device);
  const auto sync = [&] {
    if (device.is_cuda()) cuda_synchronize(device.index());
  };
  Allocator& allocator = allocator_for(device);

  const bool round_trip = triad != nullptr;  // Note [Where the two cores sit]
  model->train();
  nn::SGD optimizer(model->parameters(), 0.01, 0.9);
  train::StepMemory step;
  speed_case(stem.name + "_b64", sizes, [&] {
    const auto start = Clock::now();
    step = train::training_step(*model, optimizer, x, y);
    sync();
    return seconds_since(start);
  }, peers, "train", stem, round_trip, results);
  results.push_back({stem.name + "_b64_peak", "frugal", static_cast<double>(step.peak_bytes) / kMiB, "MiB", false});
  if (triad)
    scaling_case(stem.name + "_b64_scaling", sizes, options.threads,
                 [&] { train::training_step(*model, optimizer, x, y); }, *triad, newest_eager, "train",
                 stem, results);

  model->eval();
  const auto forward = [&] {
    {
      const autograd::NoGradGuard no_grad;
      (*model)(x);
    }
    sync();
  };
  std::int64_t eval_peak = 0;
  speed_case(stem.name + "_b64_eval", sizes, [&] {
    const auto start = Clock::now();
    allocator.reset_peak_stats();
    forward();
    eval_peak = allocator.stats().requested_bytes.peak;
    return seconds_since(start);
  }, peers, "eval", stem, round_trip, results);
  results.push_back({stem.name + "_b64_eval_peak", "frugal", static_cast<double>(eval_peak) / kMiB, "MiB", false});
  if (triad)
    scaling_case(stem.name + "_b64_eval_scaling", sizes, options.threads, forward, *triad, newest_eager,
                 "eval", stem, results);

  // The saved bytes of the last training step above; PyTorch's from one more forward of its own.
  const std::string saved_case = stem.cifar ? "activation_bytes_per_sample_cifar" : "activation_bytes_per_sample";
  const auto per_sample = [&](double bytes) { return bytes / static_cast<double>(sizes.batch) / kMiB; };
  results.push_back({saved_case, "frugal", per_sample(static_cast<double>(step.activation_bytes)), "MiB/sample", false});
  for (const PeerSetting& setting : peers)
    if (setting.saved_bytes)
      results.push_back({saved_case, setting.impl,
                         per_sample(std::stod(setting.peer->ask("saved " + peer_key(stem, setting)))),
                         "MiB/sample", false});
}

}  // namespace

Report train_benchmark(const Options& options) {
  const Sizes& sizes = options.quick ? kQuickSizes : kFullSizes;
  Report report;
  const Peers peers = start_peers(options, report.notes);
  const TempDir temp("frugal-train-bench");
  std::optional<TriadArrays> triad;
  if (options.device.is_cpu() && options.threads > 1) triad.emplace();
  for (const Stem& stem : {Stem{"mobilenet_v2", false}, Stem{"mobilenet_v2_cifar", true}})
    stem_cases(stem, options, sizes, peers, temp, triad ? &*triad : nullptr, report);
  return report;
}

}  // namespace frugal::bench
