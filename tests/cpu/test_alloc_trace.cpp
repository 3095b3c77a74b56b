// Allocation traces: both formats, every parse error with its line, replay figures on small traces
// whose peaks follow by hand from the allocator's rules (core/caching_allocator.h), OOM stops.
// Replays of the MobileNetV2 training trace, determinism among them: test_training_trace.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "memory/alloc_trace.h"
#include "core/error.h"
#include "tests/skip.h"

using namespace frugal;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

ReplayResult replay_text(std::string_view text, ReplayOptions options = {}) {
  return replay(parse_trace_text(text, "t.txt"), options);
}

ReplayOptions fixed_segments() {
  ReplayOptions options;
  options.expandable = false;
  return options;
}

// The message() of the ValueError that parsing `text` throws ("" if none).
std::string parse_error(std::string_view text) {
  try {
    parse_trace_text(text, "t.txt");
  } catch (const ValueError& error) {
    return error.message();
  }
  return "";
}

// A file in a fresh temporary directory, removed with it.
struct TempFile {
  std::filesystem::path dir, path;
  explicit TempFile(std::string_view contents) {
    dir = std::filesystem::temp_directory_path() / ("frugal-trace-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    path = dir / "trace.txt";
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove_all(dir); }
};

}  // namespace

// ---- parsing

TEST_CASE("frugal's format: allocations with optional stream and tag, frees, comments, blank lines") {
  const Trace trace = parse_trace_text(
      "# a comment\n"
      "\n"
      "+ a 1024\n"
      "+ b 2KiB 3 grad   # a trailing comment\n"
      "+ c 512 activation\n"
      "  - a\r\n"
      "+ d 1MiB 0x10 workspace\n",
      "t.txt");
  CHECK(trace.format == Trace::Format::frugal);
  REQUIRE(trace.events.size() == 5);
  const TraceEvent& a = trace.events[0];
  CHECK((a.is_alloc && a.bytes == 1024 && a.stream == 0 && a.tag == MemoryTag::other && a.line == 3));
  const TraceEvent& b = trace.events[1];
  CHECK((b.bytes == 2048 && b.stream == 3 && b.tag == MemoryTag::grad && b.line == 4));
  CHECK((trace.events[2].tag == MemoryTag::activation && trace.events[2].stream == 0));
  CHECK((!trace.events[3].is_alloc && trace.events[3].slot == a.slot && trace.events[3].line == 6));
  const TraceEvent& d = trace.events[4];
  CHECK((d.bytes == MiB && d.stream == 16 && d.tag == MemoryTag::workspace));
  CHECK(d.slot == a.slot);  // a's slot was free again
  CHECK(trace.slots == 3);
}

TEST_CASE("RMM's CSV log: detected by its header, allocate failures are skipped and counted") {
  const Trace trace = parse_trace_text(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "140,10.5,allocate,0x7f0000,4096,0x0\n"
      "140,10.6,allocate failure,0x0,1099511627776,0x0\n"
      "141,10.7,allocate,0x7f1000,256,0x5a\n"
      "140,10.8,free,0x7f0000,4096,0x0\n"
      "141,10.9,free,0x7f1000,256,90\n",
      "log.csv");
  CHECK(trace.format == Trace::Format::rmm_csv);
  CHECK(trace.allocate_failures == 1);
  REQUIRE(trace.events.size() == 4);
  CHECK((trace.events[0].bytes == 4096 && trace.events[0].stream == 0 && trace.events[0].line == 2));
  CHECK((trace.events[1].bytes == 256 && trace.events[1].stream == 0x5a && trace.events[1].line == 4));
  CHECK((!trace.events[2].is_alloc && trace.events[2].slot == trace.events[0].slot));
  const ReplayResult result = replay(trace);
  CHECK(result.peak_live_bytes == 4096 + 256);
  CHECK(result.final_allocated_bytes == 0);
}

TEST_CASE("every parse error is a ValueError that starts with FILE:LINE and says what is wrong") {
  const std::pair<const char*, const char*> cases[] = {
      {"+ a 1\n- b\n", "t.txt:2: free of unknown id 'b'"},
      {"+ a 1\n- a\n- a\n", "t.txt:3: free of unknown id 'a'"},
      {"# c\n+ a 1\n+ a 2\n", "t.txt:3: id 'a' is already allocated (at line 2)"},
      {"+ a 12QB\n", "t.txt:1: bad size '12QB'"},
      {"+ a -5\n", "t.txt:1: bad size '-5'"},
      {"+ a 99999999999999999999\n", "t.txt:1: size '99999999999999999999' overflows"},
      {"+ a 2000TiB\n", "t.txt:1: size '2000TiB' is over 1 PiB"},
      {"+ a 600TiB\n+ b 600TiB\n", "t.txt:2: more than 1 PiB alive at once"},
      {"\n+ a\n", "t.txt:2: an allocation is '+ ID BYTES [STREAM] [TAG]', got 2 fields"},
      {"+ a 1 0 param extra\n", "t.txt:1: an allocation is '+ ID BYTES [STREAM] [TAG]', got 6 fields"},
      {"+ a 1\n- a b\n", "t.txt:2: a free is '- ID', got 3 fields"},
      {"+ a 1 0 weights\n", "t.txt:1: unknown tag 'weights'"},
      {"+ a 1 param 0\n", "t.txt:1: expected the tag last, got '0'"},
      {"+ a 1 12abc\n", "t.txt:1: stream '12abc' is not a number"},
      {"* a 1\n", "t.txt:1: expected '+' (allocate) or '-' (free), got '*'"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,10\n", "t.txt:2: expected 6 comma-separated fields"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,realloc,0x1,10,0\n", "t.txt:2: unknown action 'realloc'"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,ten,0\n", "t.txt:2: bad size 'ten'"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,free,0x1,10,0\n", "t.txt:2: free of unknown id '0x1'"},
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,,10,0\n", "t.txt:2: empty id"},
  };
  for (const auto& [text, expected] : cases) {
    CAPTURE(text);
    const std::string message = parse_error(text);
    CHECK(message.starts_with(expected));
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("files: read from disk, a missing file, a directory and a device are errors at line 0") {
  const TempFile file("+ a 1\n- a\n");
  CHECK(read_trace_file(file.path.string()).events.size() == 2);
  CHECK_THROWS_WITH_AS(read_trace_file((file.dir / "missing.txt").string()),
                       doctest::Contains("missing.txt:0: cannot open the file"), ValueError);
  CHECK_THROWS_WITH_AS(read_trace_file(file.dir.string()), doctest::Contains(":0: not a regular file"), ValueError);
  CHECK_THROWS_WITH_AS(read_trace_file("/dev/zero"), doctest::Contains("/dev/zero:0: not a regular file"), ValueError);
}

TEST_CASE("a line past 4096 bytes is refused where it starts, not read whole") {
  const std::string no_newline(5000, 'x');
  CHECK_THROWS_WITH_AS(parse_trace_text("+ a 1\n" + no_newline, "t"), doctest::Contains("t:2: line longer than 4096 bytes"),
                       ValueError);
  std::istringstream stream("+ a 1\n- a\n" + no_newline);
  CHECK_THROWS_WITH_AS(parse_trace(stream, "s"), doctest::Contains("s:3: line longer than 4096 bytes"), ValueError);
  std::istringstream fits("+ a 1\n# " + std::string(4000, 'c') + "\n- a");  // a long comment that fits, no final newline
  CHECK(parse_trace(fits, "f").events.size() == 2);
}

TEST_CASE("garbage and binary input never crash: it parses (and replays) or throws ValueError") {
  std::string binary;
  for (int i = 0; i < 4096; ++i) binary += static_cast<char>(i * 37 % 256);
  const TempFile file(binary);
  CHECK_THROWS_AS(read_trace_file(file.path.string()), ValueError);

  // Lines built from the characters that matter to the parser, so some of them are valid.
  const std::string alphabet = "+-# ,\t\r0123456789abKMGiBx\xff";
  std::mt19937 engine(7);
  int parsed = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = static_cast<int>(engine() % 64);
    for (int i = 0; i < length; ++i) text += engine() % 8 == 0 ? '\n' : alphabet[engine() % alphabet.size()];
    if (trial % 3 == 0) text = "Thread,Time,Action,Pointer,Size,Stream\n" + text;
    try {
      const Trace trace = parse_trace_text(text, "fuzz");
      ReplayOptions options;
      options.limit = 64 * MiB;
      replay(trace, options);
      ++parsed;
    } catch (const ValueError&) {
    }
  }
  CHECK(parsed > 0);  // the fuzz reached the replay, not only the errors
}

TEST_CASE("the fuzz seeds, written by fuzz/make_corpus.py from the formats' description, parse as expected") {
  const std::filesystem::path corpus = std::filesystem::path(FRUGAL_SOURCE_DIR) / "fuzz/corpus/fuzz_alloc_trace";
  if (!std::filesystem::exists(corpus)) FRUGAL_SKIP("fuzz/corpus/fuzz_alloc_trace not found beside the tests' sources");
  const auto read = [&](const char* name) { return read_trace_file((corpus / name).string()); };

  const Trace small = read("frugal_small");  // a, b, free a, c in a's slot, free b
  CHECK((small.format == Trace::Format::frugal && small.events.size() == 5 && small.slots == 2));
  CHECK(small.events[3].slot == small.events[0].slot);
  const Trace tags = read("frugal_every_tag");
  REQUIRE(tags.events.size() == static_cast<std::size_t>(kNumMemoryTags));
  for (std::size_t i = 0; i < tags.events.size(); ++i) {
    CHECK(tags.events[i].tag == static_cast<MemoryTag>(i));
    CHECK((tags.events[i].bytes == std::size_t{512} << i && tags.events[i].stream == i));
  }
  const Trace units = read("frugal_units");  // after a byte order mark: 1.5KiB, 2MB, 1G, free, 1T
  REQUIRE(units.events.size() == 5);
  CHECK((units.events[0].bytes == 1536 && units.events[1].bytes == 2'000'000 && units.events[2].bytes == 1024 * MiB));
  CHECK((units.events[4].bytes == std::size_t{1} << 40 && units.slots == 3));
  const Trace rmm = read("rmm_small");
  CHECK((rmm.format == Trace::Format::rmm_csv && rmm.events.size() == 4 && rmm.allocate_failures == 1));
  CHECK(read("long_comment").events.size() == 2);

  const std::pair<const char*, const char*> bad[] = {
      {"bad_double_free", ":3: free of unknown id 'a'"},
      {"bad_over_1pib", ":2: more than 1 PiB alive at once"},
      {"bad_tag_before_stream", ":1: expected the tag last, got '0'"},
      {"bad_rmm_fields", ":2: expected 6 comma-separated fields"},
      {"bad_long_line", ":2: line longer than 4096 bytes"},
  };
  for (const auto& [name, expected] : bad) {
    const std::string message = std::string(name) + expected;  // the file's path, then FILE:LINE's rest
    CHECK_THROWS_WITH_AS(read(name), doctest::Contains(message.c_str()), ValueError);
  }
}

// ---- replay

TEST_CASE("two 1 KiB blocks alive at once: 2 KiB live and allocated, one 2 MiB segment reserved") {
  const char* trace = "+ a 1KiB\n+ b 1KiB\n- a\n- b\n";
  for (const bool expandable : {false, true}) {
    CAPTURE(expandable);
    ReplayOptions options;
    options.expandable = expandable;
    const ReplayResult r = replay_text(trace, options);
    CHECK(r.events == 4);
    CHECK(r.peak_live_bytes == 2048);
    CHECK(r.peak_allocated_bytes == 2048);  // 1024 is a multiple of 512: no rounding
    // Fixed: one small-pool segment of kSmallBuffer. Expandable: one mapped chunk of the same size.
    CHECK(r.peak_reserved_bytes == 2 * MiB);
    CHECK(r.backing_allocs == 1);
    CHECK(r.backing_frees == 0);  // cached, not given back
    CHECK(r.final_allocated_bytes == 0);
    CHECK(r.final_reserved_bytes == 2 * MiB);
    CHECK(!r.oom);
  }
}

TEST_CASE("segment sizes by hand: 100 B rounds to 512, 5 MiB takes a 20 MiB segment or 6 MiB of chunks") {
  const ReplayResult small = replay_text("+ a 100\n", fixed_segments());
  CHECK((small.peak_live_bytes == 100 && small.peak_allocated_bytes == 512 && small.final_allocated_bytes == 512));

  const ReplayResult fixed = replay_text("+ a 5MiB\n", fixed_segments());
  CHECK(fixed.peak_reserved_bytes == 20 * MiB);  // 1 MiB < request < 10 MiB: a kLargeBuffer segment
  const ReplayResult expandable = replay_text("+ a 5MiB\n");
  CHECK(expandable.peak_reserved_bytes == 6 * MiB);  // three 2 MiB chunks
  CHECK(expandable.backing_allocs == 1);             // mapped in one call

  // 21 MiB is over 10 MiB: its own segment, rounded up to a multiple of 2 MiB.
  CHECK(replay_text("+ a 21MiB\n", fixed_segments()).peak_reserved_bytes == 22 * MiB);
}

TEST_CASE("a freed block is reused: the second 4 MiB costs no backing call") {
  const ReplayResult r = replay_text("+ a 4MiB\n- a\n+ b 4MiB\n- b\n", fixed_segments());
  CHECK(r.backing_allocs == 1);
  CHECK(r.peak_reserved_bytes == 20 * MiB);
  CHECK(r.peak_live_bytes == 4 * MiB);
}

TEST_CASE("direct sends every request to the backing, caching makes one call for the same trace") {
  const char* trace = "+ a 1000\n+ b 1000\n- a\n+ c 1000\n- b\n- c\n";
  ReplayOptions direct;
  direct.direct = true;
  const ReplayResult d = replay_text(trace, direct);
  CHECK(d.backing_allocs == 3);
  CHECK(d.backing_frees == 3);
  CHECK(d.peak_live_bytes == 2000);
  CHECK(d.peak_reserved_bytes == 2000);  // exactly what was asked: no rounding, no segments
  CHECK(d.final_reserved_bytes == 0);
  const ReplayResult c = replay_text(trace, fixed_segments());
  CHECK(c.backing_allocs == 1);
  CHECK(c.backing_frees == 0);
  CHECK(c.peak_allocated_bytes == 2048);  // two blocks of 1024 (1000 rounded to 512s)
}

TEST_CASE("under a limit, the cache is given back and the request retried before an OOM") {
  // a takes a 20 MiB segment, freed but cached. b (21 MiB) needs a 22 MiB segment: 42 MiB would
  // exceed 24 MiB, so the cached segment is returned and the request retried, which succeeds.
  ReplayOptions options = fixed_segments();
  options.limit = 24 * MiB;
  const ReplayResult r = replay_text("+ a 8MiB\n- a\n+ b 21MiB\n", options);
  CHECK(!r.oom);
  CHECK(r.alloc_retries == 1);
  CHECK(r.backing_allocs == 2);
  CHECK(r.backing_frees == 1);
  CHECK(r.peak_reserved_bytes == 22 * MiB);
  CHECK(r.final_reserved_bytes == 22 * MiB);
}

TEST_CASE("an OOM stops the replay at the failing event's line, with the allocator's message") {
  // Two 1 MiB blocks fill one 2 MiB small segment; 3 MiB then needs a large segment (20 MiB fixed,
  // 4 MiB of chunks expandable), over the 4 MiB limit either way, and nothing cached can be returned.
  const char* trace = "# limit 4 MiB\n+ a 1MiB\n\n+ b 1MiB\n+ c 3MiB\n- a\n";
  for (const bool expandable : {false, true}) {
    CAPTURE(expandable);
    ReplayOptions options;
    options.expandable = expandable;
    options.limit = 4 * MiB;
    const ReplayResult r = replay_text(trace, options);
    REQUIRE(r.oom);
    CHECK(r.oom->event == 5);
    CHECK(r.oom->requested_bytes == 3 * MiB);
    CHECK(r.oom->message.find("out of memory") != std::string::npos);
    CHECK(r.events == 2);  // the two before it
    CHECK(r.num_ooms == 1);
    CHECK(r.final_allocated_bytes == 2 * MiB);
    const auto json = to_json(r);
    CHECK(json["oom"]["event"] == 5);
  }
}

TEST_CASE("to_json has exactly the documented fields, oom only after an OOM") {
  const auto json = to_json(replay_text("+ a 1\n"));
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"events", "peak_live_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
                                         "backing_allocs", "backing_frees", "alloc_retries", "num_ooms",
                                         "final_allocated_bytes", "final_reserved_bytes", "ns_per_op"});
}
