// The caching allocator's rules, one test each, counting backing calls; then a randomized test of
// 100,000+ operations checked against a reference model after every step. Most cases run on the
// SimulatedBacking (deterministic addresses, no memory); the HostBacking cases write the memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/caching_allocator.h"
#include "core/tensor.h"

using namespace frugal;

namespace {
constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

CachingOptions fixed_segments() {
  CachingOptions options;
  options.expandable_segments = false;
  return options;
}

std::unique_ptr<CachingAllocator> simulated(CachingOptions options = fixed_segments(), std::size_t capacity = kUnlimited) {
  auto backing = std::make_unique<SimulatedBacking>();
  backing->set_capacity(capacity);
  return std::make_unique<CachingAllocator>(std::move(backing), options);
}

std::int64_t backing_calls(CachingAllocator& a) {
  const auto c = a.backing().counters();
  return c.allocs + c.frees + c.maps + c.unmaps + c.reserves + c.releases;
}

// A backing whose events complete only when the test says so, to check the stream rule.
class ManualEventBacking final : public Backing {
 public:
  ManualEventBacking() : Backing(Device::cpu()) {}
  std::string_view name() const override { return "manual-events"; }
  Event record_event(Stream) override { return reinterpret_cast<Event>(++last_event); }
  bool event_done(Event event) override { return done.count(reinterpret_cast<std::uintptr_t>(event)) > 0; }
  void wait_event(Event event) override {  // as if the stream's work finished while the host waited
    done.insert(reinterpret_cast<std::uintptr_t>(event));
    ++waits;
  }
  std::uintptr_t last_event = 0;
  int waits = 0;
  std::set<std::uintptr_t> done;

 protected:
  void* do_allocate(std::size_t bytes, Stream) override {
    const std::uintptr_t address = next;
    next += bytes;
    return reinterpret_cast<void*>(address);
  }
  void do_free(void*, std::size_t) override {}
  MemoryInfo device_memory() const override { return {kUnlimited, kUnlimited}; }

 private:
  std::uintptr_t next = std::uintptr_t{1} << 40;
};
}  // namespace

TEST_CASE("a freed block is reused with zero backing calls") {
  auto a = simulated();
  void* first = a->allocate(3000).get();  // the DataPtr dies at once: freed
  const auto calls = backing_calls(*a);
  DataPtr again = a->allocate(3000);
  CHECK(again.get() == first);
  CHECK(backing_calls(*a) == calls);
  a->check_invariants();
}

TEST_CASE("requests are rounded up to 512 bytes") {
  auto a = simulated();
  DataPtr one = a->allocate(1), odd = a->allocate(1025);
  CHECK(round_block_size(1) == 512);
  CHECK(round_block_size(1025) == 1536);
  CHECK(a->caching_stats().allocated_bytes.current == 512 + 1536);
  CHECK(a->stats().requested_bytes.current == 1 + 1025);
  const auto offset = static_cast<char*>(odd.get()) - static_cast<char*>(one.get());
  CHECK(offset == 512);  // carved from the same small segment, side by side
  a->check_invariants();
}

TEST_CASE("segment sizes: 2 MiB small, 20 MiB medium, large rounded to 2 MiB") {
  CHECK(segment_size_for(4 * KiB) == 2 * MiB);
  CHECK(segment_size_for(1 * MiB) == 2 * MiB);
  CHECK(segment_size_for(5 * MiB) == 20 * MiB);
  CHECK(segment_size_for(21 * MiB) == 22 * MiB);
  auto a = simulated();
  std::vector<DataPtr> small;
  for (int i = 0; i < 1000; ++i) small.push_back(a->allocate(4 * KiB));
  CHECK(a->backing().counters().allocs == 2);  // 512 blocks of 4 KiB per 2 MiB segment
  DataPtr medium = a->allocate(5 * MiB);
  DataPtr large = a->allocate(21 * MiB);
  CHECK(a->caching_stats().reserved_bytes.current == static_cast<std::int64_t>(2 * 2 * MiB + 20 * MiB + 22 * MiB));
  CHECK(a->caching_stats().segments.current == 4);
  a->check_invariants();
}

TEST_CASE("best fit: the smallest free block that is large enough") {
  auto a = simulated();
  void* p10 = a->allocate(10 * MiB).get();
  void* p12 = a->allocate(12 * MiB).get();
  void* p16 = a->allocate(16 * MiB).get();
  CHECK(p10 != p12);
  CHECK(p12 != p16);
  const auto calls = backing_calls(*a);
  DataPtr p = a->allocate(11 * MiB);  // 10 is too small, 16 is larger than needed
  CHECK(p.get() == p12);
  CHECK(backing_calls(*a) == calls);
  CHECK(a->caching_stats().allocated_bytes.current == static_cast<std::int64_t>(12 * MiB));  // 1 MiB rest: not split
  a->check_invariants();
}

TEST_CASE("split and merge: freeing every block of a segment in any order leaves one free block") {
  std::mt19937 rng(3);
  for (int round = 0; round < 20; ++round) {
    auto a = simulated();
    std::vector<DataPtr> blocks;
    for (int i = 0; i < 24; ++i) blocks.push_back(a->allocate(512 * (1 + rng() % 60)));
    CHECK(a->caching_stats().segments.current == 1);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    while (!blocks.empty()) {
      blocks.pop_back();
      a->check_invariants();
      if (!blocks.empty()) CHECK(a->caching_stats().inactive_split_bytes.current > 0);
    }
    const auto snapshot = a->snapshot();
    REQUIRE(snapshot["segments"].size() == 1);
    CHECK(snapshot["segments"][0]["blocks"].size() == 1);
    CHECK(a->caching_stats().inactive_split_bytes.current == 0);
  }
}

TEST_CASE("large blocks split only when more than 1 MiB remains") {
  auto a = simulated();
  DataPtr first = a->allocate(5 * MiB);  // a 20 MiB segment: 15 MiB remain, split off
  CHECK(a->snapshot()["segments"][0]["blocks"].size() == 2);
  DataPtr second = a->allocate(14 * MiB + 512 * KiB);  // 512 KiB would remain: not split
  CHECK(a->caching_stats().allocated_bytes.current == static_cast<std::int64_t>(20 * MiB));
  CHECK(a->caching_stats().segments.current == 1);
  a->check_invariants();
}

TEST_CASE("max_split: big blocks are never split nor given to smaller requests") {
  CachingOptions options = fixed_segments();
  options.max_split_size = 24 * MiB;
  auto a = simulated(options);
  void* big = a->allocate(32 * MiB).get();  // freed at once, cached
  auto allocs = a->backing().counters().allocs;
  DataPtr small = a->allocate(4 * MiB);
  CHECK(small.get() != big);  // a new 20 MiB segment, not a piece of the 32 MiB block
  CHECK(a->backing().counters().allocs == allocs + 1);
  DataPtr oversize = a->allocate(30 * MiB);  // an oversize request may take the 32 MiB block whole
  CHECK(oversize.get() == big);
  CHECK(a->caching_stats().allocated_bytes.current == static_cast<std::int64_t>(4 * MiB + 32 * MiB));
  oversize = DataPtr();
  void* huge = a->allocate(60 * MiB).get();
  allocs = a->backing().counters().allocs;
  DataPtr modest = a->allocate(26 * MiB);  // best fit among oversize blocks within 20 MiB of waste
  CHECK(modest.get() == big);
  DataPtr fourty = a->allocate(40 * MiB);  // the 60 MiB block would waste 20 MiB: refused
  CHECK(fourty.get() != huge);
  CHECK(a->backing().counters().allocs == allocs + 1);
  a->check_invariants();
}

TEST_CASE("the capacity is checked before the backing is called") {
  auto a = simulated(fixed_segments(), 8 * MiB);
  CHECK_THROWS_AS(a->allocate(10 * MiB), OutOfMemoryError);
  CHECK(a->backing().counters().allocs == 0);
  CHECK(a->backing().counters().refused >= 1);
  a->check_invariants();
}

TEST_CASE("on failure the cache is emptied and the request retried") {
  auto a = simulated(fixed_segments(), 64 * MiB);
  { DataPtr x = a->allocate(30 * MiB), y = a->allocate(30 * MiB); }
  CHECK(a->caching_stats().reserved_bytes.current == static_cast<std::int64_t>(60 * MiB));
  DataPtr z = a->allocate(40 * MiB);  // 60 + 40 > 64: both cached segments go back, then it fits
  CHECK(a->caching_stats().alloc_retries == 1);
  CHECK(a->caching_stats().reserved_bytes.current == static_cast<std::int64_t>(40 * MiB));
  CHECK(a->backing().counters().frees == 2);
  a->check_invariants();
}

TEST_CASE("OOM: a message that explains, an observer, and an allocator that still works") {
  auto a = simulated(fixed_segments(), 64 * MiB);
  std::vector<OomReport> seen;
  a->add_oom_observer([&](const OomReport& r) { seen.push_back(r); });
  DataPtr hold = a->allocate(40 * MiB);
  std::string message;
  try {
    a->allocate(100 * MiB);
    FAIL("no OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  // Each fact the message must state, as a pattern.
  for (const char* fact : {R"(out of memory on cpu \(simulated backing\): tried to allocate 100\.00 MiB \(asked 104857600 bytes)",
                           R"(\(capacity limit 64\.00 MiB\), free 24\.00 MiB)", R"(; allocated 40\.00 MiB,)",
                           R"(reserved but unallocated 0 B)", R"(largest free block 0 B\.)", R"(Hint: a real shortage)"})
    CHECK_MESSAGE(std::regex_search(message, std::regex(fact)), fact << " in: " << message);
  CHECK(message.find("Hint: a real shortage") != std::string::npos);
  CHECK(a->caching_stats().num_ooms == 1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].requested == 100 * MiB);
  CHECK(seen[0].allocated == 40 * MiB);
  CHECK_FALSE(seen[0].fragmentation);
  DataPtr after = a->allocate(20 * MiB);  // still serves what fits
  CHECK(after.get() != nullptr);
  a->check_invariants();
}

TEST_CASE("OOM: fragmentation is told apart from a shortage") {
  auto a = simulated(fixed_segments(), 40 * MiB);
  std::vector<DataPtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a->allocate(5 * MiB));  // two 20 MiB segments, four blocks each
  CHECK(a->caching_stats().segments.current == 2);
  for (int i = 0; i < 8; i += 2) blocks[i] = DataPtr();  // four 5 MiB holes: 20 MiB cached, none larger than 5
  try {
    a->allocate(12 * MiB);
    FAIL("no OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    CHECK(message.find("reserved but unallocated 20.00 MiB, largest free block 5.00 MiB") != std::string::npos);
    CHECK(message.find("Hint: fragmentation") != std::string::npos);
    CHECK(message.find("expandable:on") != std::string::npos);
  }
  a->check_invariants();
}

TEST_CASE("OOM: a request that fits but whose rounded segment does not names the rounding") {
  // An empty 8 MiB device: 3 MiB fit, but fixed segments serve 1-10 MiB requests from 20 MiB ones.
  auto a = simulated(fixed_segments(), 8 * MiB);
  std::vector<OomReport> seen;
  a->add_oom_observer([&](const OomReport& r) { seen.push_back(r); });
  std::string message;
  try {
    a->allocate(3 * MiB);
    FAIL("no OutOfMemoryError");
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  for (const char* fact : {R"(Hint: rounding: the request \(3\.00 MiB\) fits in the 8\.00 MiB free, but fixed segments round it up to a 20\.00 MiB segment, which does not;)",
                           R"(enable expandable segments \(FRUGAL_ALLOC_CONF=expandable:on\), which map 2\.00 MiB chunks)",
                           R"(or raise the memory limit to at least 20\.00 MiB)"})
    CHECK_MESSAGE(std::regex_search(message, std::regex(fact)), fact << " in: " << message);
  CHECK(message.find("real shortage") == std::string::npos);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].rounding);
  CHECK_FALSE(seen[0].fragmentation);
  // The same request with expandable segments fits: 4 MiB of chunks are mapped.
  CachingOptions expandable;
  auto e = simulated(expandable, 8 * MiB);
  CHECK(e->allocate(3 * MiB).get() != nullptr);
  // Expandable segments round too, to whole chunks: 2.5 MiB on a 3 MiB device needs two.
  auto tight = simulated(expandable, 3 * MiB);
  try {
    tight->allocate(5 * MiB / 2);
    FAIL("no OutOfMemoryError");
  } catch (const OutOfMemoryError& error) {
    message = error.what();
  }
  const char* chunks = R"(Hint: rounding: the request \(2\.50 MiB\) fits in the 3\.00 MiB free, but expandable segments map whole 2\.00 MiB chunks, 4\.00 MiB for it, which does not; raise the memory limit to at least 4\.00 MiB\.)";
  CHECK_MESSAGE(std::regex_search(message, std::regex(chunks)), message);
  CHECK(message.find("enable expandable segments") == std::string::npos);
  a->check_invariants();
  tight->check_invariants();
}

TEST_CASE("empty_cache returns every releasable segment, and only those") {
  auto a = simulated();
  DataPtr keep = a->allocate(1000);  // pins one small segment: split, not releasable
  { DataPtr x = a->allocate(2000), y = a->allocate(30 * MiB), z = a->allocate(5 * MiB); }
  const auto s = a->caching_stats();
  CHECK(a->empty_cache() == 30 * MiB + 20 * MiB);
  const auto after = a->caching_stats();
  CHECK(after.reserved_bytes.current == after.allocated_bytes.current + after.inactive_split_bytes.current);
  CHECK(after.reserved_bytes.current == static_cast<std::int64_t>(2 * MiB));
  const auto calls = backing_calls(*a);
  CHECK(a->empty_cache() == 0);
  CHECK(backing_calls(*a) == calls);
  CHECK(s.reserved_bytes.peak == after.reserved_bytes.peak);
  a->check_invariants();
}

TEST_CASE("streams: a block used by another stream is not reused until that stream's event is done") {
  auto backing = std::make_unique<ManualEventBacking>();
  ManualEventBacking& events = *backing;
  CachingAllocator a(std::move(backing), fixed_segments());
  const Stream first{reinterpret_cast<void*>(1)}, second{reinterpret_cast<void*>(2)};
  void* used = nullptr;
  {
    DataPtr block = a.allocate(4096, first);
    used = block.get();
    a.record_stream(used, second);
  }  // freed: an event is recorded on `second`
  CHECK(a.caching_stats().active_bytes.current == 4096);  // still active: waiting
  DataPtr other = a.allocate(4096, first);
  CHECK(other.get() != used);
  other = DataPtr();
  events.done.insert(events.last_event);
  DataPtr reused = a.allocate(4096, first);
  CHECK(reused.get() == used);
  // Free blocks serve only their own stream.
  DataPtr on_second = a.allocate(4096, second);
  CHECK(on_second.get() != reused.get());
  CHECK(a.caching_stats().segments.current == 2);
  a.check_invariants();
}

// Note [A thread's own host blocks] (core/allocator.h). The two threads live side by side, so their
// thread-local streams cannot share an address.
TEST_CASE("a thread's own host blocks: inside ThreadOwnBlocksScope a freed block comes back to its thread only") {
  auto a = simulated();  // a host device: its Stream{} allocations follow host_allocation_stream()
  CHECK(host_allocation_stream() == Stream{});
  void *freed_by_first = nullptr, *taken_by_second = nullptr, *taken_again_by_first = nullptr;
  void *shared_freed = nullptr, *shared_taken = nullptr;
  std::barrier step(2);
  std::thread first([&] {
    shared_freed = a->allocate(MiB).get();  // Stream{}: freed at once, into the shared pool
    step.arrive_and_wait();                 // 1: the second thread takes it
    step.arrive_and_wait();                 // 2
    {
      const ThreadOwnBlocksScope own;
      CHECK(host_allocation_stream() != Stream{});
      freed_by_first = a->allocate(MiB).get();  // freed at once, under this thread's stream
      step.arrive_and_wait();                   // 3: the second thread allocates as much
      step.arrive_and_wait();                   // 4
      taken_again_by_first = a->allocate(MiB).get();
    }
    CHECK(host_allocation_stream() == Stream{});  // the scope put the default back
  });
  std::thread second([&] {
    step.arrive_and_wait();  // 1
    shared_taken = a->allocate(MiB).get();
    step.arrive_and_wait();  // 2
    const ThreadOwnBlocksScope own;
    step.arrive_and_wait();  // 3
    DataPtr kept = a->allocate(MiB);
    taken_by_second = kept.get();
    step.arrive_and_wait();  // 4: held while the first thread allocates again
  });
  first.join();
  second.join();
  CHECK(shared_taken == shared_freed);            // outside the scope a freed block goes to whoever asks
  CHECK(taken_by_second != freed_by_first);       // inside, not to another thread
  CHECK(taken_again_by_first == freed_by_first);  // but back to the thread that freed it
  a->check_invariants();
}

TEST_CASE("a thread's own host blocks: short of memory, another thread's cached blocks are released for this one") {
  auto a = simulated(fixed_segments(), 16 * MiB);  // room for one 12 MiB block, not two
  std::barrier step(2);
  std::thread first([&] {
    const ThreadOwnBlocksScope own;
    a->allocate(12 * MiB);   // freed at once: cached under this thread's stream
    step.arrive_and_wait();  // the second thread allocates while this one is alive
    step.arrive_and_wait();
  });
  std::thread second([&] {
    step.arrive_and_wait();
    const ThreadOwnBlocksScope own;
    CHECK_NOTHROW(a->allocate(12 * MiB));
    step.arrive_and_wait();
  });
  first.join();
  second.join();
  CHECK(a->caching_stats().num_ooms == 0);
  CHECK(a->caching_stats().alloc_retries == 1);  // the first thread's segment went back to make room
  a->check_invariants();
}

TEST_CASE("streams: out of memory, the allocator waits for blocks pending on other streams before it gives up") {
  auto backing = std::make_unique<ManualEventBacking>();
  ManualEventBacking& events = *backing;
  events.set_capacity(2 << 20);  // room for one 2 MiB small-pool segment and nothing else
  CachingAllocator a(std::move(backing), fixed_segments());
  const Stream side{reinterpret_cast<void*>(1)}, other{reinterpret_cast<void*>(2)};
  void* used = nullptr;
  {
    DataPtr batch = a.allocate(1 << 20, side);
    used = batch.get();
    a.record_stream(used, other);
    DataPtr rest = a.allocate(1 << 20, side);  // the segment is full
  }  // `batch` is pending on `other`'s event; `rest` is free
  CHECK(events.waits == 0);
  DataPtr first = a.allocate(1 << 20, side);  // `rest`'s half: no waiting needed
  CHECK(events.waits == 0);
  DataPtr second = a.allocate(1 << 20, side);  // only the pending half is left: wait for it
  CHECK(second.get() == used);
  CHECK(events.waits == 1);
  CHECK(a.caching_stats().num_ooms == 0);
  CHECK(a.caching_stats().segments.current == 1);
  CHECK_THROWS_AS(a.allocate(1 << 20, side), OutOfMemoryError);  // nothing pending now: a real shortage
  a.check_invariants();
}

TEST_CASE("expandable segments grow in place instead of leaving slivers") {
  // A batch that grows by one sample each step: fixed segments leave a sliver per step, one
  // expandable segment per pool just maps a little more.
  auto run = [](bool expandable) {
    CachingOptions options;
    options.expandable_segments = expandable;
    auto a = simulated(options);
    for (std::size_t batch = 8; batch <= 40; ++batch) {
      std::vector<DataPtr> activations;
      for (int layer = 0; layer < 6; ++layer) activations.push_back(a->allocate(batch * 300 * KiB));
      a->check_invariants();
    }
    return a->caching_stats();
  };
  const CachingStats fixed = run(false), expandable = run(true);
  CHECK(expandable.segments.peak == 1);
  CHECK(expandable.reserved_bytes.peak < fixed.reserved_bytes.peak);
  CHECK(expandable.backing_maps > 0);
  CHECK(expandable.backing_allocs == 0);
}

TEST_CASE("expandable segments: growing and trimming look at the tail only, however many blocks the segment holds") {
  // 2 MiB blocks in the large pool: every allocation maps one more chunk, every trim unmaps one.
  // Finding the tail by walking the block list would visit about n^2/2 blocks (12.5 million here).
  CachingOptions options;  // expandable, the default
  auto a = simulated(options);
  constexpr std::int64_t kBlocks = 5000;
  std::vector<DataPtr> live;
  for (std::int64_t i = 0; i < kBlocks; ++i) live.push_back(a->allocate(2 * MiB));
  CachingStats s = a->caching_stats();
  CHECK(s.backing_maps == kBlocks);
  CHECK(s.segments.current == 1);
  CHECK(s.blocks_visited <= kBlocks);  // the tail, once per growth
  while (!live.empty()) {  // free from the end, trimming after each: the tail goes back every time
    live.pop_back();
    a->empty_cache();
  }
  s = a->caching_stats();
  CHECK(s.backing_unmaps == kBlocks);
  CHECK(s.blocks_visited <= 4 * kBlocks);  // per free and trim: the neighbours and the tail
  a->check_invariants();
}

TEST_CASE("expandable segments on host memory: mapped chunks are real, trimmed ones go back") {
  CachingAllocator a(std::make_unique<HostBacking>());
  REQUIRE(a.backing().supports_expandable());
  {
    DataPtr x = a.allocate(3 * MiB), y = a.allocate(5 * MiB);
    std::memset(x.get(), 1, 3 * MiB);
    std::memset(y.get(), 2, 5 * MiB);
    CHECK(static_cast<unsigned char*>(y.get())[5 * MiB - 1] == 2);
    CHECK(a.caching_stats().reserved_bytes.current == static_cast<std::int64_t>(8 * MiB));
  }
  CHECK(a.empty_cache() == 8 * MiB);
  CHECK(a.caching_stats().backing_unmaps >= 1);
  CHECK(a.caching_stats().segments.current == 0);
  a.check_invariants();
}

TEST_CASE("bypass sends every request straight to the backing") {
  CachingOptions options;
  options.bypass = true;
  auto a = simulated(options);
  CHECK(a->name() == "direct");
  for (int i = 0; i < 10; ++i) DataPtr p = a->allocate(1000);
  CHECK(a->backing().counters().allocs == 10);
  CHECK(a->backing().counters().frees == 10);
  DataPtr kept = a->allocate(1000);
  CHECK(a->caching_stats().reserved_bytes.current == 1000);
  CHECK(a->snapshot()["segments"][0]["pool"] == "direct");
  a->check_invariants();
}

TEST_CASE("statistics: peaks, totals and reset") {
  auto a = simulated();
  { DataPtr x = a->allocate(10 * MiB), y = a->allocate(10 * MiB); }
  auto s = a->caching_stats();
  CHECK(s.allocated_bytes.current == 0);
  CHECK(s.allocated_bytes.peak == static_cast<std::int64_t>(20 * MiB));
  CHECK(s.allocated_bytes.allocated == static_cast<std::int64_t>(20 * MiB));
  CHECK(s.allocated_bytes.freed == static_cast<std::int64_t>(20 * MiB));
  a->reset_peak_stats();
  s = a->caching_stats();
  CHECK(s.allocated_bytes.peak == 0);
  CHECK(s.reserved_bytes.peak == s.reserved_bytes.current);
  const std::string summary = a->memory_summary();
  for (const char* row : {"allocated (blocks)", "requested (as asked)", "reserved", "inactive split (cached)", "tag activation"})
    CHECK_MESSAGE(summary.find(row) != std::string::npos, row);
}

TEST_CASE("tags follow the scope into the allocator") {
  auto a = simulated();
  {
    MemoryTagScope scope(MemoryTag::grad);
    DataPtr g = a->allocate(4096);
    CHECK(a->stats().tag_bytes[static_cast<int>(MemoryTag::grad)].current == 4096);
    CHECK(a->snapshot()["segments"][0]["blocks"][0]["tag"] == "grad");
  }
  CHECK(a->stats().tag_bytes[static_cast<int>(MemoryTag::grad)].peak == 4096);
}

TEST_CASE("recording: a ring buffer, a replayable trace and a Chrome trace") {
  auto a = simulated();
  a->record_history(1000);
  {
    MemoryTagScope scope(MemoryTag::activation);
    DataPtr x = a->allocate(1000);
    DataPtr y = a->allocate(3 * MiB);
  }
  std::ostringstream trace, chrome;
  a->write_trace(trace);
  for (const char* line : {"\n+ 0 1000 0 activation\n", "\n+ 1 3145728 0 activation\n", "\n- 1\n- 0\n",
                           "\n# segment_alloc 2097152 bytes\n"})
    CHECK_MESSAGE(trace.str().find(line) != std::string::npos, line);
  a->write_chrome_trace(chrome);
  const auto json = nlohmann::json::parse(chrome.str());
  int begins = 0, ends = 0;
  for (const auto& e : json["traceEvents"]) {
    begins += e["ph"] == "b";
    ends += e["ph"] == "e";
  }
  CHECK(begins == 2);
  CHECK(ends == 2);
  a->record_history(3);  // a small ring keeps only the newest events
  for (int i = 0; i < 5; ++i) DataPtr p = a->allocate(512 * (i + 1));
  const auto events = a->history();
  REQUIRE(events.size() == 3);
  CHECK(events.back().kind == AllocEvent::Kind::free);
  CHECK(events.back().requested == 2560);
}

TEST_CASE("sizes parse with units, and bad ones are named") {
  CHECK(parse_size("512") == 512);
  CHECK(parse_size("4096B") == 4096);
  CHECK(parse_size("1.5KiB") == 1536);
  CHECK(parse_size("512MiB") == 512 * MiB);
  CHECK(parse_size("2GiB") == 2048 * MiB);
  CHECK(parse_size("1GB") == 1000000000);
  CHECK_THROWS_WITH_AS(parse_size("12XB"), doctest::Contains("unknown unit 'XB'"), ValueError);
  CHECK_THROWS_AS(parse_size(""), ValueError);
  CHECK_THROWS_AS(parse_size("-5"), ValueError);
  CHECK_THROWS_AS(parse_size("0.3B"), ValueError);
  CHECK_THROWS_WITH_AS(parse_size("99999999TiB"), doctest::Contains("too large"), ValueError);
  CHECK(format_size(512) == "512 B");
  CHECK(format_size(3 * MiB / 2) == "1.50 MiB");
}

TEST_CASE("options come from FRUGAL_ALLOC and FRUGAL_ALLOC_CONF") {
  setenv("FRUGAL_ALLOC", "direct", 1);
  setenv("FRUGAL_ALLOC_CONF", "expandable:off,max_split:64MiB", 1);
  const CachingOptions options = CachingOptions::from_environment();
  CHECK(options.bypass);
  CHECK_FALSE(options.expandable_segments);
  CHECK(options.max_split_size == 64 * MiB);
  setenv("FRUGAL_ALLOC_CONF", "colour:blue", 1);
  CHECK_THROWS_WITH_AS(CachingOptions::from_environment(), doctest::Contains("unknown key 'colour'"), ValueError);
  setenv("FRUGAL_ALLOC", "pool", 1);
  CHECK_THROWS_WITH_AS(CachingOptions::from_environment(), doctest::Contains("FRUGAL_ALLOC='pool'"), ValueError);
  unsetenv("FRUGAL_ALLOC");
  unsetenv("FRUGAL_ALLOC_CONF");
}

TEST_CASE("the CPU's default allocator is a caching allocator with a settable memory limit") {
  CachingAllocator& cpu = default_caching_allocator(Device::cpu());
  CHECK(&allocator_for(Device::cpu()) == &cpu);
  set_memory_limit(Device::cpu(), cpu.backing().held_bytes() + 16 * MiB);
  CHECK_THROWS_AS(empty({64 * 1024 * 1024}), OutOfMemoryError);  // 256 MiB on a simulated device of ~16 MiB free
  CHECK(zeros({1024}).numel() == 1024);                           // what fits still works
  set_memory_limit(Device::cpu(), kUnlimited);
  CHECK(empty({64 * 1024 * 1024}).numel() == 64 * 1024 * 1024);
  cpu.check_invariants();
  // The registry has a slot per device index (a table read without a lock); others are refused.
  CHECK_THROWS_WITH_AS(allocator_for(Device::cuda(kMaxDevicesPerType)), doctest::Contains("device indices run from 0 to 63"),
                       DeviceError);
  CHECK_THROWS_WITH_AS(allocator_for(Device::cuda(-1)), doctest::Contains("device indices run from 0"), DeviceError);
}

TEST_CASE("many threads at once") {
  CachingOptions options;  // expandable, the default
  CachingAllocator a(std::make_unique<SimulatedBacking>(), options);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, t] {
      std::mt19937 rng(t);
      std::vector<DataPtr> held;
      for (int i = 0; i < 5000; ++i) {
        if (held.size() > 20 || (rng() % 3 == 0 && !held.empty())) held.erase(held.begin() + rng() % held.size());
        else held.push_back(a.allocate(1 + rng() % (3 * MiB), Stream{reinterpret_cast<void*>(std::uintptr_t(t % 2))}));
      }
    });
  for (auto& thread : threads) thread.join();
  a.check_invariants();
  CHECK(a.caching_stats().allocated_bytes.current == 0);
}

TEST_CASE("the statistics of what callers asked for agree with the blocks while other threads allocate") {
  // Counted under the allocator's one lock, in the same critical section as the block itself, so the
  // invariant checker (which compares them) never sees one without the other.
  CachingAllocator a(std::make_unique<SimulatedBacking>());
  std::atomic<int> running{2};
  std::atomic<int> checks{0};
  std::atomic<bool> checker_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&a, &running, &checks, &checker_done, t] {
      std::mt19937 rng(t);
      MemoryTagScope scope(t == 0 ? MemoryTag::activation : MemoryTag::data);
      std::vector<DataPtr> held;
      for (int i = 0; i < 20000; ++i) {
        if (held.size() > 16 || (rng() % 2 == 0 && !held.empty())) held.pop_back();
        else held.push_back(a.allocate(1 + rng() % (64 * KiB)));
      }
      // On a loaded machine both threads could finish before the checker's first look: each waits,
      // still holding its blocks, until at least one check has run beside it.
      while (checks.load() == 0 && !checker_done.load()) std::this_thread::yield();
      running -= 1;
    });
  std::string broken;
  while (running > 0 && broken.empty()) {
    try {
      a.check_invariants();
      ++checks;
    } catch (const Error& e) {
      broken = e.what();
    }
  }
  checker_done = true;
  for (auto& thread : threads) thread.join();
  CHECK_MESSAGE(broken.empty(), broken);
  CHECK(checks > 0);
  a.check_invariants();
}

namespace {
// The reference model: what must hold after every operation, whatever the policy.
void check_against_model(CachingAllocator& a, const std::map<std::uintptr_t, std::size_t>& live,
                         CachingStats& previous) {
  a.check_invariants();
  std::size_t requested = 0;
  std::uintptr_t end = 0;
  for (const auto& [address, bytes] : live) {
    REQUIRE_MESSAGE(address >= end, "live ranges overlap at " << address);  // address order, so a gap or contact
    end = address + bytes;
    requested += bytes;
  }
  const CachingStats now = a.caching_stats();
  REQUIRE(a.stats().requested_bytes.current == static_cast<std::int64_t>(requested));
  REQUIRE(now.allocated_bytes.current >= static_cast<std::int64_t>(requested));
  REQUIRE(now.allocated_bytes.current <= now.reserved_bytes.current);
  REQUIRE(now.allocated_bytes.peak >= previous.allocated_bytes.peak);  // peaks never fall without a reset
  REQUIRE(now.reserved_bytes.peak >= previous.reserved_bytes.peak);
  previous = now;
}
}  // namespace

TEST_CASE("randomized: 100,000 operations against a reference model, checked after every one") {
  struct Config {
    const char* name;
    bool expandable;
    std::size_t max_split;
    std::size_t capacity;
    bool manual_events;  // random record_stream, events completed at random later
  };
  const Config configs[] = {{"fixed", false, kUnlimited, kUnlimited, false},
                            {"expandable, max_split 24 MiB", true, 24 * MiB, kUnlimited, false},
                            {"fixed, max_split 24 MiB, 256 MiB cap", false, 24 * MiB, 256 * MiB, false},
                            {"expandable, 128 MiB cap", true, kUnlimited, 128 * MiB, false},
                            {"fixed, streams with events", false, kUnlimited, kUnlimited, true}};
  for (const Config& config : configs) {
    CAPTURE(config.name);
    CachingOptions options;
    options.expandable_segments = config.expandable;
    options.max_split_size = config.max_split;
    ManualEventBacking* events = nullptr;
    std::unique_ptr<CachingAllocator> a;
    if (config.manual_events) {
      auto backing = std::make_unique<ManualEventBacking>();
      events = backing.get();
      a = std::make_unique<CachingAllocator>(std::move(backing), options);
    } else {
      a = simulated(options, config.capacity);
    }
    std::mt19937_64 rng(42);
    std::map<std::uintptr_t, std::size_t> live;
    std::vector<DataPtr> held;
    CachingStats previous = a->caching_stats();
    constexpr int kOperations = 20000;  // per configuration: 100,000 in all
    int ooms = 0;
    for (int op = 0; op < kOperations; ++op) {
      const bool allocate = held.empty() || (held.size() < 400 && rng() % 100 < 53);
      if (allocate) {
        // A training-like mix: many small, some medium, a few large.
        const auto kind = rng() % 100;
        const std::size_t bytes = kind < 70 ? 1 + rng() % (64 * KiB) : kind < 95 ? 1 + rng() % (8 * MiB) : 1 + rng() % (48 * MiB);
        const Stream stream{reinterpret_cast<void*>(std::uintptr_t(rng() % 2))};
        try {
          held.push_back(a->allocate(bytes, stream));
          live[reinterpret_cast<std::uintptr_t>(held.back().get())] = bytes;
          if (events && rng() % 4 == 0) a->record_stream(held.back().get(), Stream{reinterpret_cast<void*>(std::uintptr_t(7))});
        } catch (const OutOfMemoryError&) {
          ++ooms;
        }
      } else {
        const std::size_t index = rng() % held.size();
        live.erase(reinterpret_cast<std::uintptr_t>(held[index].get()));
        held[index] = std::move(held.back());
        held.pop_back();
      }
      if (events && rng() % 3 == 0 && events->last_event > 0) events->done.insert(1 + rng() % events->last_event);
      check_against_model(*a, live, previous);
      if (op % 5000 == 4999) a->empty_cache();
    }
    CHECK(a->caching_stats().num_ooms == ooms);
    if (config.capacity != kUnlimited) CHECK(a->caching_stats().reserved_bytes.peak <= static_cast<std::int64_t>(config.capacity));
  }
}

TEST_CASE("requests too large for any device are OOMs, not wrapped sizes") {
  for (bool bypass : {false, true}) {
    CachingOptions options;
    options.bypass = bypass;
    auto a = simulated(options);
    for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - 1000, std::size_t{1} << 63})
      CHECK_THROWS_AS(a->allocate(bytes), OutOfMemoryError);
    CHECK(a->caching_stats().num_ooms == 3);
    a->check_invariants();
    CachingAllocator host(std::make_unique<HostBacking>(), options);
    CHECK_THROWS_AS(host.allocate(SIZE_MAX - 10), OutOfMemoryError);
    host.check_invariants();
  }
}

TEST_CASE("max_split: requests below it split medium segments, and expandable blocks are split whatever their size") {
  CachingOptions options = fixed_segments();
  options.max_split_size = 24 * MiB;
  auto a = simulated(options);
  std::vector<DataPtr> four;
  for (int i = 0; i < 4; ++i) four.push_back(a->allocate(5 * MiB));
  CHECK(a->caching_stats().reserved_bytes.current == static_cast<std::int64_t>(20 * MiB));  // one shared segment
  CHECK_THROWS_AS(simulated([] { CachingOptions o; o.max_split_size = 8 * MiB; return o; }()), ValueError);
  // PyTorch's floor is strict: at exactly 20 MiB the medium segments would all count as oversize.
  CHECK_THROWS_AS(simulated([] { CachingOptions o; o.max_split_size = 20 * MiB; return o; }()), ValueError);
  CachingOptions expandable;
  expandable.max_split_size = 24 * MiB;
  auto e = simulated(expandable);
  void* tail = nullptr;
  {
    DataPtr big = e->allocate(24 * MiB);  // freed: a 24 MiB free tail, oversize
    tail = big.get();
  }
  // An expandable block is split to the request, so the rule does not apply: the tail serves it,
  // where refusing it would leave 24 MiB mapped and unused beside a new fixed segment.
  DataPtr smaller = e->allocate(23 * MiB);
  CHECK(smaller.get() == tail);
  CHECK(e->caching_stats().segments.current == 1);
  CHECK(e->caching_stats().backing_maps == 1);
  e->check_invariants();
}

TEST_CASE("an allocator destroyed with live bypass allocations frees them without touching freed blocks") {
  CachingOptions options;
  options.bypass = true;
  auto a = simulated(options);
  DataPtr freed = a->allocate(1000);
  alignas(DataPtr) unsigned char storage[sizeof(DataPtr)];
  new (storage) DataPtr(a->allocate(2000));  // its destructor never runs: leaked on purpose
  freed = DataPtr();
  CHECK(a->caching_stats().allocations.current == 1);
  a.reset();  // frees the leaked block; the sanitizer build would report any use of a freed block
}
