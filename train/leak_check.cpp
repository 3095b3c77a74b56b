// LeakCheck (see leak_check.h).
#include "train/leak_check.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace frugal::train {

std::size_t LeakCheck::watched_bytes() const {
  const AllocatorStats stats = allocator_.stats();
  const std::int64_t data = stats.tag_bytes[static_cast<std::size_t>(MemoryTag::data)].current;
  return static_cast<std::size_t>(stats.requested_bytes.current - data);
}

std::optional<LeakReport> LeakCheck::after_step(std::int64_t step) {
  if (report_) return std::nullopt;  // reported once: the rest of the run is not watched
  const std::size_t bytes = watched_bytes();
  if (measured_ && bytes > bytes_) {
    LeakReport report;
    report.step = step;
    report.before = bytes_;
    report.after = bytes;
    std::vector<LiveTensor> survivors;
    for (const LiveBlock& block : allocator_.live_blocks().blocks)
      if (block.serial > last_serial_ && block.tag != MemoryTag::data) survivors.push_back(live_tensor(block));
    std::sort(survivors.begin(), survivors.end(), larger_first);
    report.survivor_count = survivors.size();
    for (const LiveTensor& t : survivors) report.survivor_bytes += t.bytes;
    survivors.resize(std::min(survivors.size(), LeakReport::kListed));
    report.survivors = std::move(survivors);
    report_ = std::move(report);
    return report_;
  }
  measured_ = true;
  bytes_ = bytes;
  last_serial_ = allocator_.last_serial();
  return std::nullopt;
}

std::string describe(const LeakReport& r, std::size_t lines) {
  std::string text = "memory grew by " + format_size(r.after - r.before) + " between the ends of steps " +
                     std::to_string(r.step - 1) + " and " + std::to_string(r.step) + " (" + format_size(r.before) +
                     " to " + format_size(r.after) + ", the loader's batches left out): " +
                     std::to_string(r.survivor_count) + " tensors made during step " + std::to_string(r.step) + ", " +
                     format_size(r.survivor_bytes) + ", are still alive; the largest:\n";
  const std::size_t shown = std::min(lines, r.survivors.size());
  for (std::size_t i = 0; i < shown; ++i) {
    const LiveTensor& t = r.survivors[i];
    text += "  " + format_size(t.bytes) + "  " + std::string(memory_tag_name(t.tag)) + "  made by " + t.made_by + "\n";
  }
  if (r.survivor_count > shown) text += "  ... and " + std::to_string(r.survivor_count - shown) + " more\n";
  text += "A tensor kept from one step to the next keeps everything it was computed from: keep loss.item(), "
          "or detach() what you keep.";
  return text;
}

nlohmann::ordered_json to_json(const LeakReport& r) {
  nlohmann::ordered_json survivors = nlohmann::ordered_json::array();
  for (const LiveTensor& t : r.survivors)
    survivors.push_back({{"bytes", t.bytes}, {"tag", memory_tag_name(t.tag)}, {"made_by", t.made_by}});
  return {{"step", r.step},
          {"before_bytes", r.before},
          {"after_bytes", r.after},
          {"grown_bytes", r.after - r.before},
          {"survivor_count", r.survivor_count},
          {"survivor_bytes", r.survivor_bytes},
          {"survivors", survivors}};
}

}  // namespace frugal::train
