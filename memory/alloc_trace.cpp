// Allocation traces (see alloc_trace.h): parsing both formats into slots, replaying them through a
// CachingAllocator, and generating a MobileNetV2 training trace.
// Not here: timing against other allocators (bench/alloc_bench.cpp), the command (cli/alloc_replay.cpp).
#include "memory/alloc_trace.h"

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

// ---- the training trace

// Note [The training trace]
// What a step of training MobileNetV2 (torchvision's, width 1.0) with SGD and momentum asks of the
// allocator, tensor by tensor, in float32, as an eager framework without in-place ops would:
//   once, at load    every parameter and BatchNorm buffer (tag param): per conv a weight; per BN a
//                    weight, a bias, running mean and variance, and an int64 batch counter; the
//                    classifier's weight and bias. 3,504,872 learnable values for 1000 classes.
//   each step        the images (N x 3 x R x R) and int64 labels (tag data), alive the whole step.
//   forward, per     conv, BatchNorm, ReLU6 (ReLU6 absent after the projecting 1x1 conv). Kept for
//   conv unit        backward (tag activation): the conv's output, the BN's output and its saved mean
//                    and inverse std (C values each), the ReLU6's output. Around each conv a workspace
//                    (tag workspace) is allocated and freed, sized like an im2col buffer
//                    (N * Cin * k * k * Hout * Wout floats) but capped, as cuDNN's are.
//   residual blocks  the sum of a block's input and output (tag activation).
//   head             global average pool, dropout (its mask is one byte per value), linear, and the
//                    log-softmax kept for the loss, plus the loss itself.
//   backward, in     per unit: the gradient of each saved tensor (tag other: temporaries), each freed
//   reverse          as soon as the next one is made, and the unit's saved activations freed once its
//                    backward is done. A conv's data and filter gradients each run inside a workspace.
//                    Parameter gradients (tag grad) are allocated the first time they are computed
//                    and kept, as zero_grad(set_to_none=False) keeps them.
//   optimizer        momentum buffers (tag optimizer), allocated at the first step and kept.
// The batch size changes from step to step (vary_batch), as with the short last batch of an epoch or
// a sampler that buckets by size: the shapes change, so blocks cached for one step do not fit the
// next exactly, which is what fragments fixed-size segments.

namespace {

// Workspaces larger than this are not requested: frameworks bound what they let cuDNN pick
// algorithms for, so real workspaces are tens of MiB at most.
constexpr std::size_t kWorkspaceCap = std::size_t{32} << 20;
constexpr std::size_t kFloat = 4, kInt64 = 8;
constexpr int kFirstChannels = 32, kLastChannels = 1280;

struct ConvUnit {
  int in, out, kernel, stride, groups;
  bool relu6;
  int size;  // spatial side of the input
  int out_size() const { return (size + 2 * (kernel / 2) - kernel) / stride + 1; }
  std::int64_t weights() const { return std::int64_t{out} * (in / groups) * kernel * kernel; }
};

struct Block {
  std::vector<ConvUnit> units;
  bool residual = false;
};

// The features of MobileNetV2: a 3x3 stem, the inverted residual blocks, and a 1x1 conv to 1280.
std::vector<Block> mobilenet_v2_blocks(int resolution) {
  struct Setting { int expand, channels, repeats, stride; };  // t, c, n, s in the paper's table 2
  constexpr Setting kSettings[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                   {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  std::vector<Block> blocks;
  ConvUnit stem{3, kFirstChannels, 3, 2, 1, true, resolution};
  blocks.push_back({{stem}, false});
  int channels = kFirstChannels, size = stem.out_size();
  for (const Setting& s : kSettings) {
    for (int i = 0; i < s.repeats; ++i) {
      const int stride = i == 0 ? s.stride : 1, hidden = channels * s.expand;
      Block block;
      if (s.expand != 1) block.units.push_back({channels, hidden, 1, 1, 1, true, size});
      block.units.push_back({hidden, hidden, 3, stride, hidden, true, size});
      const int out_size = block.units.back().out_size();
      block.units.push_back({hidden, s.channels, 1, 1, 1, false, out_size});
      block.residual = stride == 1 && channels == s.channels;
      blocks.push_back(block);
      channels = s.channels;
      size = out_size;
    }
  }
  blocks.push_back({{{channels, kLastChannels, 1, 1, 1, true, size}}, false});
  return blocks;
}

// Writes frugal's trace format; ids are readable names ("s2.u17.bn" is unit 17's BN output in step 2).
class TraceWriter {
 public:
  const std::string& alloc(const std::string& id, std::size_t bytes, MemoryTag tag) {
    out_ << "+ " << id << ' ' << bytes << " 0 " << memory_tag_name(tag) << '\n';
    return id;
  }
  void free(const std::string& id) { out_ << "- " << id << '\n'; }
  void comment(const std::string& text) { out_ << "# " << text << '\n'; }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

// What a conv unit's forward keeps for its backward.
struct Saved {
  std::string conv, bn, mean, invstd, relu;
  const std::string& output() const { return relu.empty() ? bn : relu; }
};

class TrainingTrace {
 public:
  explicit TrainingTrace(const TrainingTraceOptions& options)
      : options_(options), blocks_(mobilenet_v2_blocks(options.resolution)) {}

  std::string generate() {
    w_.comment(detail::str("MobileNetV2 training (memory/alloc_trace.cpp, Note [The training trace]): resolution ",
                           options_.resolution, ", ", options_.steps, " steps"));
    parameters();
    for (step_ = 0; step_ < options_.steps; ++step_) train_step();
    return w_.text();
  }

 private:
  std::size_t activation_bytes(int channels, int size) const {
    return std::size_t(batch_) * std::size_t(channels) * std::size_t(size) * std::size_t(size) * kFloat;
  }
  std::size_t workspace_bytes(const ConvUnit& u) const {
    const std::size_t im2col = activation_bytes(u.in, u.out_size()) * std::size_t(u.kernel * u.kernel);
    return std::min(im2col, kWorkspaceCap);
  }
  static std::string unit_id(int unit) { return detail::str('u', unit); }
  std::string step_id(const std::string& name) const { return detail::str('s', step_, '.', name); }

  // A parameter's gradient, allocated the first time backward computes it, and kept.
  void grad(const std::string& param, std::size_t bytes) {
    if (step_ == 0) w_.alloc(param + ".grad", bytes, MemoryTag::grad);
  }

  void parameters() {
    int unit = 0;
    for (const Block& block : blocks_)
      for (const ConvUnit& u : block.units) {
        const std::string id = unit_id(unit++);
        learnable(id + ".conv.w", std::size_t(u.weights()) * kFloat);
        learnable(id + ".bn.w", std::size_t(u.out) * kFloat);
        learnable(id + ".bn.b", std::size_t(u.out) * kFloat);
        w_.alloc(id + ".bn.mean", std::size_t(u.out) * kFloat, MemoryTag::param);
        w_.alloc(id + ".bn.var", std::size_t(u.out) * kFloat, MemoryTag::param);
        w_.alloc(id + ".bn.count", kInt64, MemoryTag::param);
      }
    learnable("fc.w", std::size_t(options_.num_classes) * kLastChannels * kFloat);
    learnable("fc.b", std::size_t(options_.num_classes) * kFloat);
  }
  void learnable(const std::string& id, std::size_t bytes) {
    learnable_.emplace_back(id, bytes);
    w_.alloc(id, bytes, MemoryTag::param);
  }

  void train_step() {
    batch_ = training_batch_for_step(options_, step_);
    w_.comment(detail::str("step ", step_, ": batch ", batch_));
    const std::string images = w_.alloc(step_id("images"), activation_bytes(3, options_.resolution), MemoryTag::data);
    const std::string labels = w_.alloc(step_id("labels"), std::size_t(batch_) * kInt64, MemoryTag::data);
    std::vector<std::vector<Saved>> saved(blocks_.size());
    std::vector<std::string> block_out(blocks_.size());
    int unit = 0;
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      for (const ConvUnit& u : blocks_[b].units) saved[b].push_back(forward_unit(u, unit++));
      block_out[b] = saved[b].back().output();
      if (blocks_[b].residual) {
        const ConvUnit& last = blocks_[b].units.back();
        block_out[b] = w_.alloc(step_id(detail::str('b', b, ".add")), activation_bytes(last.out, last.out_size()),
                                MemoryTag::activation);
      }
    }
    std::string grad = head(blocks_.back().units.back().out_size());
    for (std::size_t b = blocks_.size(); b-- > 0;) grad = backward_block(b, saved[b], block_out[b], grad, unit);
    optimizer();
    w_.free(images);
    w_.free(labels);
  }

  Saved forward_unit(const ConvUnit& u, int unit) {
    const std::string id = step_id(unit_id(unit));
    const std::size_t out = activation_bytes(u.out, u.out_size()), stats = std::size_t(u.out) * kFloat;
    Saved s;
    w_.alloc(id + ".ws", workspace_bytes(u), MemoryTag::workspace);
    s.conv = w_.alloc(id + ".conv", out, MemoryTag::activation);
    w_.free(id + ".ws");
    s.bn = w_.alloc(id + ".bn", out, MemoryTag::activation);
    s.mean = w_.alloc(id + ".bn.mean", stats, MemoryTag::activation);
    s.invstd = w_.alloc(id + ".bn.invstd", stats, MemoryTag::activation);
    if (u.relu6) s.relu = w_.alloc(id + ".relu", out, MemoryTag::activation);
    return s;
  }

  // Pool, dropout, linear and loss, forward then backward; returns the gradient of the features.
  std::string head(int size) {
    const std::size_t n = std::size_t(batch_), pooled = n * kLastChannels * kFloat;
    const std::size_t logits_bytes = n * std::size_t(options_.num_classes) * kFloat;
    const std::string pool = w_.alloc(step_id("pool"), pooled, MemoryTag::activation);
    const std::string mask = w_.alloc(step_id("dropout.mask"), n * kLastChannels, MemoryTag::activation);
    const std::string drop = w_.alloc(step_id("dropout"), pooled, MemoryTag::activation);
    const std::string logits = w_.alloc(step_id("fc"), logits_bytes, MemoryTag::activation);
    const std::string log_probs = w_.alloc(step_id("log_softmax"), logits_bytes, MemoryTag::activation);
    const std::string loss = w_.alloc(step_id("loss"), kFloat, MemoryTag::activation);

    const std::string d_logits = w_.alloc(step_id("fc.grad_out"), logits_bytes, MemoryTag::other);
    w_.free(loss);
    w_.free(log_probs);
    const std::string d_drop = w_.alloc(step_id("dropout.grad_out"), pooled, MemoryTag::other);
    grad("fc.w", std::size_t(options_.num_classes) * kLastChannels * kFloat);
    grad("fc.b", std::size_t(options_.num_classes) * kFloat);
    w_.free(d_logits);
    w_.free(logits);
    const std::string d_pool = w_.alloc(step_id("pool.grad_out"), pooled, MemoryTag::other);
    w_.free(d_drop);
    w_.free(drop);
    w_.free(mask);
    const std::string d_features = w_.alloc(step_id("features.grad_out"), activation_bytes(kLastChannels, size),
                                            MemoryTag::other);
    w_.free(d_pool);
    w_.free(pool);
    return d_features;
  }

  // Backward through block b, given the gradient of its output; `unit` counts down across blocks.
  std::string backward_block(std::size_t b, const std::vector<Saved>& saved, const std::string& output,
                             const std::string& grad_out, int& unit) {
    const Block& block = blocks_[b];
    if (block.residual) w_.free(output);  // the sum; the units' own outputs are freed by their backward
    std::string grad = grad_out;
    for (std::size_t i = block.units.size(); i-- > 0;) {
      const bool keep_grad = block.residual && i + 1 == block.units.size();  // the skip still needs it
      const bool first_unit = b == 0;  // the stem: no gradient for the images
      grad = backward_unit(block.units[i], saved[i], --unit, grad, keep_grad, !first_unit);
    }
    if (block.residual) {
      const std::string sum = w_.alloc(step_id(detail::str('b', b, ".grad_in")),
                                       activation_bytes(block.units.front().in, block.units.front().size),
                                       MemoryTag::other);
      w_.free(grad);
      w_.free(grad_out);
      grad = sum;
    }
    return grad;
  }

  std::string backward_unit(const ConvUnit& u, const Saved& s, int unit, const std::string& grad_out, bool keep_grad,
                            bool input_grad) {
    const std::string id = step_id(unit_id(unit)), param = unit_id(unit);
    const std::size_t out = activation_bytes(u.out, u.out_size()), stats = std::size_t(u.out) * kFloat;
    std::string d_bn = grad_out;
    if (u.relu6) {
      d_bn = w_.alloc(id + ".relu.grad_in", out, MemoryTag::other);
      w_.free(s.relu);
      if (!keep_grad) w_.free(grad_out);
    }
    const std::string d_conv = w_.alloc(id + ".bn.grad_in", out, MemoryTag::other);
    grad(param + ".bn.w", stats);
    grad(param + ".bn.b", stats);
    if (u.relu6 || !keep_grad) w_.free(d_bn);
    w_.free(s.mean);
    w_.free(s.invstd);
    w_.free(s.bn);
    std::string d_in;
    if (input_grad) {
      w_.alloc(id + ".ws", workspace_bytes(u), MemoryTag::workspace);
      d_in = w_.alloc(id + ".conv.grad_in", activation_bytes(u.in, u.size), MemoryTag::other);
      w_.free(id + ".ws");
    }
    w_.alloc(id + ".ws", workspace_bytes(u), MemoryTag::workspace);
    grad(param + ".conv.w", std::size_t(u.weights()) * kFloat);
    w_.free(id + ".ws");
    w_.free(d_conv);
    w_.free(s.conv);
    return d_in;
  }

  void optimizer() {
    if (step_ != 0) return;
    for (const auto& [id, bytes] : learnable_) w_.alloc(id + ".momentum", bytes, MemoryTag::optimizer);
  }

  TrainingTraceOptions options_;
  std::vector<Block> blocks_;
  std::vector<std::pair<std::string, std::size_t>> learnable_;
  TraceWriter w_;
  int step_ = 0, batch_ = 0;
};

}  // namespace

int training_batch_for_step(const TrainingTraceOptions& options, int step) {
  // Eighths of the batch size, mixed up and down so that steps both grow and shrink the shapes.
  constexpr int kEighths[] = {8, 6, 7, 5};
  if (!options.vary_batch) return options.batch_size;
  return std::max(1, options.batch_size * kEighths[step % 4] / 8);
}

std::string generate_training_trace(const TrainingTraceOptions& options) {
  FRUGAL_CHECK_VALUE(options.batch_size > 0 && options.steps >= 0 && options.num_classes > 0,
                     "training trace: batch size and classes must be positive, steps not negative");
  FRUGAL_CHECK_VALUE(options.resolution >= 32, "training trace: resolution ", options.resolution,
                     " is below 32, which MobileNetV2's five stride-2 stages cannot halve");
  return TrainingTrace(options).generate();
}

std::int64_t mobilenet_v2_parameter_count(int num_classes) {
  std::int64_t count = 0;
  for (const Block& block : mobilenet_v2_blocks(224))
    for (const ConvUnit& u : block.units) count += u.weights() + 2 * u.out;
  return count + std::int64_t{num_classes} * kLastChannels + num_classes;
}

}  // namespace frugal
