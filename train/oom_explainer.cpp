// The explanation of an out-of-memory during training (see oom_explainer.h).
#include "train/oom_explainer.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace frugal::train {

namespace {

constexpr auto kActivation = static_cast<std::size_t>(MemoryTag::activation);

// The activation bytes by maker, largest first, the tail folded into one "N other layers" row.
std::vector<LayerBytes> activation_layers(const LiveBlocks& live) {
  std::map<std::string, std::size_t> by_maker;
  for (const LiveBlock& block : live.blocks)
    if (block.tag == MemoryTag::activation) by_maker[made_by(block.context)] += block.size;
  std::vector<LayerBytes> layers;
  for (const auto& [maker, bytes] : by_maker) layers.push_back({maker, bytes});
  std::stable_sort(layers.begin(), layers.end(), [](const LayerBytes& a, const LayerBytes& b) { return a.bytes > b.bytes; });
  if (layers.size() > OomExplanation::kLayers) {
    LayerBytes rest{std::to_string(layers.size() - OomExplanation::kLayers) + " other layers", 0};
    for (std::size_t i = OomExplanation::kLayers; i < layers.size(); ++i) rest.bytes += layers[i].bytes;
    layers.resize(OomExplanation::kLayers);
    layers.push_back(rest);
  }
  return layers;
}

std::string row(const std::string& name, std::size_t bytes, int indent) {
  char line[256];
  std::snprintf(line, sizeof line, "%*s%-*s %12s\n", indent, "", 44 - indent, name.c_str(), format_size(bytes).c_str());
  return line;
}

}  // namespace

OomExplanation explain_oom(const OomReport& report, const LiveBlocks& live, MemoryTag request_tag,
                           MemoryContextId request_context) {
  OomExplanation e;
  e.allocator = report;
  e.request_tag = request_tag;
  e.request_made_by = made_by(request_context);
  std::vector<LiveTensor> tensors;
  for (const LiveBlock& block : live.blocks) {
    e.tag_bytes[static_cast<std::size_t>(block.tag)] += block.size;
    e.tag_requested[static_cast<std::size_t>(block.tag)] += block.requested;
    tensors.push_back(live_tensor(block));
  }
  e.allocated = live.allocated;
  e.reserved = live.reserved;
  e.fragmentation = live.inactive_split;
  e.cache = live.reserved - live.allocated - live.inactive_split;  // free outside split segments, and pending
  e.activation_layers = activation_layers(live);
  const std::size_t largest = std::min(tensors.size(), OomExplanation::kLargest);
  std::partial_sort(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(largest), tensors.end(), larger_first);
  tensors.resize(largest);
  e.largest = std::move(tensors);
  return e;
}

std::vector<MemoryFix> measured_fixes(const OomExplanation& e, const TrainOptions& failing) {
  // Activation memory is made per sample: a batch of b instead of B holds b/B of it. The failing
  // request counts when it was an activation too, since the smaller batch asks for less of it.
  const std::size_t activations = e.tag_bytes[kActivation] + (e.request_tag == MemoryTag::activation ? e.allocator.rounded : 0);
  std::vector<MemoryFix> fixes;
  const std::int64_t batch = failing.batch_size;
  for (const std::int64_t factor : {2, 4}) {
    const std::int64_t smaller = batch / factor;
    if (smaller < 1 || activations == 0) continue;
    const auto saving = static_cast<std::size_t>(static_cast<double>(activations) *
                                                 static_cast<double>(batch - smaller) / static_cast<double>(batch));
    fixes.push_back({"--batch-size " + std::to_string(smaller) + " --accum " + std::to_string(failing.accum * factor) +
                         " (the same effective batch): holds " + std::to_string(smaller) + "/" + std::to_string(batch) +
                         " of the " + format_size(activations) + " of activations measured at the failure" +
                         (e.request_tag == MemoryTag::activation ? ", the failing request included" : ""),
                     saving, true});
  }
  return fixes;
}

bool fragmented(const OomExplanation& e) {
  return e.reserved > 0 && e.fragmentation >= e.allocator.rounded &&
         static_cast<double>(e.fragmentation) >= kFragmentedShare * static_cast<double>(e.reserved);
}

namespace {

// The line that names fragmentation as the cause, and what the fixes say about the allocator's
// settings: one that needs less is among them, or the planner tried them all (it lists its
// predictions, settings included) and none does, or there is no prediction to speak for.
std::string fragmentation_line(const OomExplanation& e) {
  const auto any = [&e](const std::string& prefix) {
    return std::any_of(e.fixes.begin(), e.fixes.end(), [&](const MemoryFix& f) { return f.text.rfind(prefix, 0) == 0; });
  };
  const bool planned = std::any_of(e.fixes.begin(), e.fixes.end(), [](const MemoryFix& f) { return !f.measured; });
  const std::string settings =
      any("FRUGAL_ALLOC_CONF=") ? "the allocator setting among the fixes needs less, found by replaying the planned run's requests under it"
      : planned ? "none of the allocator's settings (FRUGAL_ALLOC_CONF: expandable, max_split) needs less for this run, "
                  "replayed under each"
                : "the allocator's settings (FRUGAL_ALLOC_CONF: expandable, max_split) change how blocks are split and reused";
  return "  fragmentation is " +
         std::to_string(static_cast<int>(100.0 * static_cast<double>(e.fragmentation) / static_cast<double>(e.reserved) + 0.5)) +
         "% of what is reserved, more than the request: free, but in pieces between live blocks that it cannot use; " +
         settings + "\n";
}

}  // namespace

std::string describe(const OomExplanation& e) {
  std::string text = "the failing request: " + format_size(e.allocator.rounded) + " of " +
                     std::string(memory_tag_name(e.request_tag)) + ", made by " + e.request_made_by + "\n";
  text += "memory at the failure, " + format_size(e.reserved) + " reserved (blocks as allocated):\n";
  for (int t = 0; t < kNumMemoryTags; ++t) {
    const auto tag = static_cast<MemoryTag>(t);
    text += row(std::string(memory_tag_name(tag)), e.tag_bytes[static_cast<std::size_t>(t)], 2);
    if (tag == MemoryTag::activation)
      for (const LayerBytes& layer : e.activation_layers) text += row(layer.made_by, layer.bytes, 4);
  }
  text += row("cache (reserved but free)", e.cache, 2);
  text += row("fragmentation (inactive split)", e.fragmentation, 2);
  if (fragmented(e)) text += fragmentation_line(e);
  text += "largest live tensors:\n";
  for (const LiveTensor& t : e.largest) {
    const std::string tag(memory_tag_name(t.tag));
    char line[256];
    std::snprintf(line, sizeof line, "  %12s  %-10s  made by ", format_size(t.bytes).c_str(), tag.c_str());
    text += line + t.made_by + "\n";
  }
  if (e.fixes.empty()) return text;
  text += "fixes, largest saving first:\n";
  for (const MemoryFix& fix : e.fixes)
    text += "  saves " + format_size(fix.bytes) + (fix.measured ? " (measured): " : " (predicted): ") + fix.text + "\n";
  return text;
}

TrainingOutOfMemoryError::TrainingOutOfMemoryError(const OutOfMemoryError& cause, OomExplanation explanation)
    : OutOfMemoryError(cause.message(), cause.file(), cause.line(), cause.expression()),
      explanation_(std::make_shared<const OomExplanation>(std::move(explanation))) {}

OomExplainer::OomExplainer(CachingAllocator& allocator) : allocator_(allocator) {
  observer_ = allocator_.add_oom_observer([this](const OomReport& report) { observe(report); });
}

OomExplainer::~OomExplainer() { allocator_.remove_oom_observer(observer_); }

// Runs on the thread whose request failed, with the allocator's lock released and nothing freed yet,
// so this thread's tag and context are the request's.
void OomExplainer::observe(const OomReport& report) {
  try {
    OomExplanation explanation = explain_oom(report, allocator_.live_blocks(), current_memory_tag(), current_memory_context());
    const std::lock_guard lock(mutex_);
    latest_ = std::move(explanation);
  } catch (const std::exception&) {
    // Without memory for the walk there is no explanation; the allocator's own message still goes out.
  }
}

void OomExplainer::rethrow_explained(const OutOfMemoryError& error, const TrainOptions& failing,
                                     const FixPlanner& planner) const {
  std::optional<OomExplanation> explanation;
  {
    const std::lock_guard lock(mutex_);
    explanation = latest_;
  }
  if (!explanation || explanation->allocator.message != error.message()) throw;  // not an OOM this explainer saw
  explanation->fixes = measured_fixes(*explanation, failing);
  if (planner)
    for (MemoryFix& fix : planner(failing)) explanation->fixes.push_back(std::move(fix));
  std::stable_sort(explanation->fixes.begin(), explanation->fixes.end(),
                   [](const MemoryFix& a, const MemoryFix& b) { return a.bytes > b.bytes; });
  throw TrainingOutOfMemoryError(error, std::move(*explanation));
}

}  // namespace frugal::train
