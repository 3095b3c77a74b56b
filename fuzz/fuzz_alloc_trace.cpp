// libFuzzer target: arbitrary bytes as an allocation trace (memory/alloc_trace.h), what `frugal
// alloc-replay` reads. parse_trace_text must accept the bytes or throw a ValueError of one line that
// starts with `fuzz input:LINE: `; the stream reader (parse_trace) must agree with it, event for event
// or message for message. A trace it accepts must be one a replay can trust: sizes within 1 PiB, lines
// in order, every free naming a live slot, `slots` the most allocations alive at once. It is then
// replayed as `frugal alloc-replay` would, on an unlimited simulated device and on a 64 MiB one (the
// retry and OOM paths); a replay may stop on an OOM, but throw nothing else.
// Not here: replay figures checked by hand (tests/cpu/test_alloc_trace.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "memory/alloc_trace.h"

using namespace frugal;

namespace {

constexpr std::string_view kSource = "fuzz input";

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_alloc_trace: %s\n", what);
  std::abort();
}

// "fuzz input:LINE: what", one line.
bool well_formed(const std::string& message) {
  const std::string prefix = std::string(kSource) + ":";
  if (!message.starts_with(prefix) || message.find('\n') != std::string::npos) return false;
  std::size_t at = prefix.size();
  while (at < message.size() && message[at] >= '0' && message[at] <= '9') ++at;
  return at > prefix.size() && message.compare(at, 2, ": ") == 0 && message.size() > at + 2;
}

// The trace, or the message of the ValueError it throws ("" and a trace when it parses).
template <typename Parse>
std::string parse_or_message(Parse parse, Trace& trace) {
  try {
    trace = parse();
  } catch (const ValueError& error) {
    if (!well_formed(error.message())) fail(("an error message not of the form FILE:LINE: " + error.message()).c_str());
    return error.message();
  }
  return "";
}

bool same_events(const Trace& a, const Trace& b) {
  if (a.format != b.format || a.slots != b.slots || a.allocate_failures != b.allocate_failures ||
      a.events.size() != b.events.size())
    return false;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent &x = a.events[i], &y = b.events[i];
    if (x.is_alloc != y.is_alloc || x.slot != y.slot || x.bytes != y.bytes || x.stream != y.stream || x.tag != y.tag ||
        x.line != y.line)
      return false;
  }
  return true;
}

// What alloc_trace.h promises of a trace it accepted; the live bytes at the peak, for the replay.
std::size_t check_accepted(const Trace& trace) {
  constexpr std::size_t kPiB = std::size_t{1} << 50;
  std::vector<std::size_t> live(trace.slots, 0);
  std::vector<bool> alive(trace.slots, false);
  std::size_t alive_count = 0, most_alive = 0, live_bytes = 0, peak_bytes = 0, last_line = 0;
  for (const TraceEvent& event : trace.events) {
    if (event.slot >= trace.slots) fail("an event's slot is past the trace's slot count");
    if (event.line < 1 || event.line < last_line) fail("events out of line order");
    last_line = event.line;
    if (event.is_alloc) {
      if (alive[event.slot]) fail("an allocation into a slot that is still alive");
      if (event.bytes > kPiB) fail("an allocation over 1 PiB was accepted");
      alive[event.slot] = true;
      live[event.slot] = event.bytes;
      live_bytes += event.bytes;
      if (live_bytes > kPiB) fail("more than 1 PiB alive at once was accepted");
      most_alive = std::max(most_alive, ++alive_count);
      peak_bytes = std::max(peak_bytes, live_bytes);
    } else {
      if (!alive[event.slot]) fail("a free of a slot that is not alive");
      alive[event.slot] = false;
      live_bytes -= live[event.slot];
      --alive_count;
    }
  }
  if (most_alive != trace.slots) fail("slots is not the most allocations alive at once");
  return peak_bytes;
}

void check_replay(const Trace& trace, std::size_t peak_bytes, std::size_t limit) {
  ReplayOptions options;
  options.limit = limit;
  const ReplayResult result = replay(trace, options);  // anything but an OOM escapes, and is a crash
  if (result.events > trace.events.size() || (!result.oom && result.events != trace.events.size()))
    fail("a replay that ran more events than the trace has, or stopped without an OOM");
  if (!result.oom && result.peak_live_bytes != peak_bytes) fail("the replay's peak live bytes are not the trace's");
  if (result.peak_live_bytes > result.peak_allocated_bytes || result.peak_allocated_bytes > result.peak_reserved_bytes)
    fail("peaks out of order: live <= allocated <= reserved");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Trace from_text, from_stream;
  const std::string text_error = parse_or_message([&] { return parse_trace_text(text, kSource); }, from_text);
  const std::string stream_error = parse_or_message(
      [&] {
        std::istringstream in(text);
        return parse_trace(in, kSource);
      },
      from_stream);
  if (text_error != stream_error) fail(("the two readers disagree: '" + text_error + "' against '" + stream_error + "'").c_str());
  if (!text_error.empty()) return 0;  // bad input, reported as it should be
  if (!same_events(from_text, from_stream)) fail("the two readers accepted different traces");
  const std::size_t peak_bytes = check_accepted(from_text);
  check_replay(from_text, peak_bytes, kUnlimited);
  check_replay(from_text, peak_bytes, std::size_t{64} << 20);
  return 0;
}
