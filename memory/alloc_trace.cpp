// Allocation traces (see alloc_trace.h): parsing both formats into slots, and replaying them through
// a CachingAllocator.
// Not here: timing against other allocators (bench/alloc_bench.cpp), the command (cli/alloc_replay.cpp).
#include "memory/alloc_trace.h"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"

namespace frugal {

namespace {

// ---- parsing

constexpr std::string_view kRmmHeader = "Thread,Time,Action,Pointer,Size,Stream";
constexpr std::size_t kRmmFields = 6;
constexpr std::string_view kWhitespace = " \t\r\n\v\f";
// No real trace comes near this: it is thousands of times the memory of the largest GPU. Rejecting
// bigger sizes, and more bytes than this alive at once, keeps every sum of live sizes and every
// rounding of a size far from overflowing 64 bits, whatever the input.
constexpr std::size_t kMaxTraceBytes = std::size_t{1} << 50;  // 1 PiB

std::string_view trim(std::string_view text) {
  const std::size_t first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kWhitespace) - first + 1);
}

// Whitespace-separated tokens up to a token that starts with '#' (the rest is a comment).
std::vector<std::string_view> tokens(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while ((at = line.find_first_not_of(kWhitespace, at)) != std::string_view::npos) {
    const std::size_t end = std::min(line.find_first_of(kWhitespace, at), line.size());
    if (line[at] == '#') break;
    out.push_back(line.substr(at, end - at));
    at = end;
  }
  return out;
}

std::vector<std::string_view> csv_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  for (std::size_t comma; (comma = line.find(',', at)) != std::string_view::npos; at = comma + 1)
    out.push_back(trim(line.substr(at, comma - at)));
  out.push_back(trim(line.substr(at)));
  return out;
}

bool is_rmm_header(std::string_view line) {
  const std::vector<std::string_view> fields = csv_fields(line);
  std::string joined;
  for (std::string_view field : fields) joined += (joined.empty() ? "" : ",") + std::string(field);
  return joined == kRmmHeader;
}

// Text for messages: printable ASCII as is, anything else (a binary file's bytes) as \xNN, and long
// tokens cut, so an error message stays one readable line.
std::string quoted(std::string_view text) {
  constexpr std::size_t kMaxShown = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > kMaxShown) out += "...";
  return out + "'";
}

std::optional<std::uint64_t> parse_unsigned(std::string_view text, int base) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<MemoryTag> parse_tag(std::string_view text) {
  for (int i = 0; i < kNumMemoryTags; ++i)
    if (memory_tag_name(static_cast<MemoryTag>(i)) == text) return static_cast<MemoryTag>(i);
  return std::nullopt;
}

// Reads events line by line into a Trace; knows where it is, so every error names FILE:LINE.
class Parser {
 public:
  explicit Parser(std::string_view source) { trace_.source = source; }

  void line(std::string_view text) {
    ++line_;
    if (line_ == 1 && text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
    if (!format_known_ && !trim(text).empty() && !trim(text).starts_with('#')) {
      format_known_ = true;
      if (is_rmm_header(text)) {
        trace_.format = Trace::Format::rmm_csv;
        return;
      }
    }
    if (trace_.format == Trace::Format::rmm_csv)
      rmm_line(text);
    else
      frugal_line(text);
  }

  Trace finish() { return std::move(trace_); }
  std::string where() const { return detail::str(trace_.source, ':', line_, ": "); }

 private:
  void frugal_line(std::string_view text) {
    const std::vector<std::string_view> fields = tokens(text);
    if (fields.empty()) return;
    const std::string_view action = fields[0];
    if (action == "-") {
      FRUGAL_CHECK_VALUE(fields.size() == 2, where(), "a free is '- ID', got ", fields.size(), " fields");
      free(fields[1]);
      return;
    }
    FRUGAL_CHECK_VALUE(action == "+", where(), "expected '+' (allocate) or '-' (free), got ", quoted(action));
    FRUGAL_CHECK_VALUE(fields.size() >= 3 && fields.size() <= 5, where(),
                       "an allocation is '+ ID BYTES [STREAM] [TAG]', got ", fields.size(), " fields");
    TraceEvent event;
    event.bytes = bytes(fields[2]);
    std::size_t next = 3;
    // A fourth field is the stream when it starts with a digit, else the tag: "+ a 512 activation".
    if (next < fields.size() && (fields[next][0] >= '0' && fields[next][0] <= '9')) event.stream = stream(fields[next++]);
    if (next < fields.size()) event.tag = tag(fields[next++]);
    FRUGAL_CHECK_VALUE(next == fields.size(), where(), "expected the tag last, got ", quoted(fields.back()));
    allocate(fields[1], event);
  }

  void rmm_line(std::string_view text) {
    if (trim(text).empty()) return;
    const std::vector<std::string_view> fields = csv_fields(text);
    FRUGAL_CHECK_VALUE(fields.size() == kRmmFields, where(), "expected ", kRmmFields,
                       " comma-separated fields (Thread,Time,Action,Pointer,Size,Stream), got ", fields.size());
    const std::string_view action = fields[2], pointer = fields[3];
    if (action == "free") {
      free(pointer);
    } else if (action == "allocate") {
      TraceEvent event;
      event.bytes = bytes(fields[4]);
      event.stream = stream(fields[5]);
      allocate(pointer, event);
    } else if (action == "allocate failure") {
      ++trace_.allocate_failures;  // the logged allocator refused it; nothing to replay
    } else {
      FRUGAL_THROW(ValueError, where(), "unknown action ", quoted(action),
                   " (expected allocate, free or allocate failure)");
    }
  }

  void allocate(std::string_view id, TraceEvent event) {
    FRUGAL_CHECK_VALUE(!id.empty(), where(), "empty id");
    const auto found = live_.find(std::string(id));
    // (The message is only built when the check fails, so found->second is valid there.)
    FRUGAL_CHECK_VALUE(found == live_.end(), where(), "id ", quoted(id), " is already allocated (at line ",
                       line_of_[found->second], ") and not freed");
    FRUGAL_CHECK_VALUE(event.bytes <= kMaxTraceBytes - live_bytes_, where(), "more than 1 PiB alive at once (",
                       live_bytes_, " bytes live, ", event.bytes, " more asked): not a real trace");
    if (free_slots_.empty()) {
      event.slot = slot_bytes_.size();
      slot_bytes_.push_back(0);
      line_of_.push_back(0);
    } else {
      event.slot = free_slots_.back();
      free_slots_.pop_back();
    }
    live_.emplace(id, event.slot);
    event.is_alloc = true;
    event.line = line_;
    slot_bytes_[event.slot] = event.bytes;
    line_of_[event.slot] = line_;
    live_bytes_ += event.bytes;
    trace_.slots = slot_bytes_.size();
    trace_.events.push_back(event);
  }

  void free(std::string_view id) {
    const auto found = live_.find(std::string(id));
    FRUGAL_CHECK_VALUE(found != live_.end(), where(), "free of unknown id ", quoted(id),
                       " (never allocated, or already freed)");
    TraceEvent event;
    event.is_alloc = false;
    event.slot = found->second;
    event.line = line_;
    live_bytes_ -= slot_bytes_[event.slot];
    free_slots_.push_back(event.slot);
    live_.erase(found);
    trace_.events.push_back(event);
  }

  // Plain digits are read here (fast, and overflow is told apart); anything else goes to parse_size.
  std::size_t bytes(std::string_view text) const {
    std::size_t value = 0;
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
      const auto parsed = parse_unsigned(text, 10);
      FRUGAL_CHECK_VALUE(parsed.has_value(), where(), "size ", quoted(text), " overflows 64 bits");
      value = *parsed;
    } else {
      try {
        value = parse_size(text);
      } catch (const ValueError& error) {
        FRUGAL_THROW(ValueError, where(), "bad size ", quoted(text), ": ", error.message());
      }
    }
    FRUGAL_CHECK_VALUE(value <= kMaxTraceBytes, where(), "size ", quoted(text), " is over 1 PiB: not a real trace");
    return value;
  }

  std::uintptr_t stream(std::string_view text) const {
    const bool hex = text.starts_with("0x") || text.starts_with("0X");
    const auto parsed = parse_unsigned(hex ? text.substr(2) : text, hex ? 16 : 10);
    FRUGAL_CHECK_VALUE(parsed.has_value(), where(), "stream ", quoted(text),
                       " is not a number (decimal, or hex with 0x)");
    return static_cast<std::uintptr_t>(*parsed);
  }

  MemoryTag tag(std::string_view text) const {
    const std::optional<MemoryTag> found = parse_tag(text);
    FRUGAL_CHECK_VALUE(found.has_value(), where(), "unknown tag ", quoted(text),
                       " (expected param, grad, optimizer, activation, workspace, data or other)");
    return *found;
  }

  Trace trace_;
  std::size_t line_ = 0;
  bool format_known_ = false;
  std::unordered_map<std::string, std::size_t> live_;  // id -> slot, for allocations alive now
  std::vector<std::size_t> slot_bytes_, line_of_, free_slots_;
  std::size_t live_bytes_ = 0;
};

// The longest line a trace may have: frugal's lines are ~30 bytes, RMM's CSV lines ~100. A file with
// no newline (a binary file, /dev/zero) would otherwise be read whole into one line.
constexpr std::size_t kMaxTraceLine = 4096;

// Reads line `number` into `line` (without its newline); false at the end of the input. ValueError
// past kMaxTraceLine bytes, so an endless line is one message, not a read that grows until memory
// runs out.
bool read_line(std::streambuf& in, std::string& line, std::size_t number, std::string_view source) {
  line.clear();
  using Traits = std::char_traits<char>;
  for (Traits::int_type c = in.sbumpc(); !Traits::eq_int_type(c, Traits::eof()); c = in.sbumpc()) {
    if (Traits::to_char_type(c) == '\n') return true;
    FRUGAL_CHECK_VALUE(line.size() < kMaxTraceLine, source, ":", number, ": line longer than ", kMaxTraceLine,
                       " bytes: not a trace");
    line.push_back(Traits::to_char_type(c));
  }
  return !line.empty();
}

}  // namespace

Trace parse_trace(std::istream& in, std::string_view source) {
  Parser parser(source);
  std::string line;
  for (std::size_t number = 1; in.rdbuf() && read_line(*in.rdbuf(), line, number, source); ++number) parser.line(line);
  return parser.finish();
}

Trace parse_trace_text(std::string_view text, std::string_view source) {
  Parser parser(source);
  for (std::size_t at = 0, number = 1; at < text.size(); ++number) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    FRUGAL_CHECK_VALUE(end - at <= kMaxTraceLine, source, ":", number, ": line longer than ", kMaxTraceLine,
                       " bytes: not a trace");
    parser.line(text.substr(at, end - at));
    at = end + 1;
  }
  return parser.finish();
}

Trace read_trace_file(const std::string& path) {
  struct stat info {};
  FRUGAL_CHECK_VALUE(::stat(path.c_str(), &info) == 0, path, ":0: cannot open the file: ", std::strerror(errno));
  // A device or FIFO could stream forever, and a folder has no lines: a trace is a regular file.
  FRUGAL_CHECK_VALUE(S_ISREG(info.st_mode), path, ":0: not a regular file (a trace is a text file)");
  std::ifstream in(path, std::ios::binary);
  FRUGAL_CHECK_VALUE(in.is_open(), path, ":0: cannot open the file: ", std::strerror(errno));
  return parse_trace(in, path);
}

// ---- replay

CachingOptions caching_options(const ReplayOptions& options) {
  CachingOptions caching;
  caching.bypass = options.direct;
  caching.max_split_size = options.max_split;
  caching.expandable_segments = options.expandable;
  return caching;
}

ReplayResult replay(const Trace& trace, const ReplayOptions& options) {
  auto backing = std::make_unique<SimulatedBacking>();
  backing->set_capacity(options.limit);
  CachingAllocator allocator(std::move(backing), caching_options(options));
  return replay_on(allocator, trace);
}

ReplayResult replay_on(CachingAllocator& allocator, const Trace& trace) {
  using Clock = std::chrono::steady_clock;
  ReplayResult result;
  std::vector<DataPtr> live(trace.slots);
  std::size_t live_bytes = 0;
  const auto start = Clock::now();
  for (const TraceEvent& event : trace.events) {
    if (event.is_alloc) {
      MemoryTagScope scope(event.tag);
      try {
        live[event.slot] = allocator.allocate(event.bytes, Stream{reinterpret_cast<void*>(event.stream)});
      } catch (const OutOfMemoryError& error) {
        result.oom = ReplayOom{event.line, event.bytes, error.message()};
        break;
      }
      live_bytes += event.bytes;
      result.peak_live_bytes = std::max(result.peak_live_bytes, live_bytes);
    } else {
      live_bytes -= live[event.slot].bytes();
      live[event.slot] = DataPtr();
    }
    ++result.events;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.ns_per_op = seconds * 1e9 / static_cast<double>(std::max<std::size_t>(result.events, 1));

  const CachingStats stats = allocator.caching_stats();
  result.peak_allocated_bytes = static_cast<std::size_t>(stats.allocated_bytes.peak);
  result.peak_reserved_bytes = static_cast<std::size_t>(stats.reserved_bytes.peak);
  result.backing_allocs = stats.backing_allocs + stats.backing_maps;
  result.backing_frees = stats.backing_frees + stats.backing_unmaps;
  result.alloc_retries = stats.alloc_retries;
  result.num_ooms = stats.num_ooms;
  result.final_allocated_bytes = static_cast<std::size_t>(stats.allocated_bytes.current);
  result.final_reserved_bytes = static_cast<std::size_t>(stats.reserved_bytes.current);
  return result;
}

nlohmann::ordered_json to_json(const ReplayResult& result) {
  nlohmann::ordered_json out = {
      {"events", result.events},
      {"peak_live_bytes", result.peak_live_bytes},
      {"peak_allocated_bytes", result.peak_allocated_bytes},
      {"peak_reserved_bytes", result.peak_reserved_bytes},
      {"backing_allocs", result.backing_allocs},
      {"backing_frees", result.backing_frees},
      {"alloc_retries", result.alloc_retries},
      {"num_ooms", result.num_ooms},
      {"final_allocated_bytes", result.final_allocated_bytes},
      {"final_reserved_bytes", result.final_reserved_bytes},
      {"ns_per_op", result.ns_per_op},
  };
  if (result.oom)
    out["oom"] = {{"event", result.oom->event}, {"requested_bytes", result.oom->requested_bytes},
                  {"message", result.oom->message}};
  return out;
}

}  // namespace frugal
