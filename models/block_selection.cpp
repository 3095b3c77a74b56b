// models/block_selection.h: parsing block lists, checking them against a model, printing them back.
#include "models/block_selection.h"

#include <algorithm>

#include "core/error.h"

namespace frugal::models {

namespace {

// A block number of `token` ("12"), or -1 when it is not one (empty, a sign, a letter, too large).
std::int64_t block_number(std::string_view token) {
  if (token.empty() || token.size() > 4) return -1;
  std::int64_t value = 0;
  for (const char c : token) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value <= BlockSelection::kMaxBlock ? value : -1;
}

}  // namespace

BlockSelection BlockSelection::all() {
  BlockSelection s;
  s.all_ = true;
  return s;
}

BlockSelection BlockSelection::first(std::int64_t count) {
  FRUGAL_CHECK_VALUE(count >= 0 && count <= kMaxBlock, "BlockSelection::first: ", count, " blocks is out of range");
  BlockSelection s;
  for (std::int64_t b = 1; b <= count; ++b) s.blocks_.set(static_cast<std::size_t>(b));
  return s;
}

BlockSelection BlockSelection::parse(std::string_view text) {
  if (text == "all") return all();
  FRUGAL_CHECK_VALUE(!text.empty(), "checkpoint blocks '': no block given (e.g. 2-7, 1,3,5-9 or all)");
  BlockSelection s;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view token = text.substr(start, comma - start);
    const std::size_t dash = token.find('-');
    const std::int64_t low = block_number(token.substr(0, dash));
    const std::int64_t high = dash == std::string_view::npos ? low : block_number(token.substr(dash + 1));
    FRUGAL_CHECK_VALUE(low >= 0 && high >= 0, "checkpoint blocks '", text, "': '", token,
                       "' is not a block number or a range such as 2-7 (blocks are numbered up to ", kMaxBlock, ")");
    FRUGAL_CHECK_VALUE(low <= high, "checkpoint blocks '", text, "': '", token, "' runs backwards (write ", high, "-", low, ")");
    for (std::int64_t b = low; b <= high; ++b) s.blocks_.set(static_cast<std::size_t>(b));
    start = comma + 1;
  }
  return s;
}

bool BlockSelection::contains(std::int64_t block) const {
  return all_ || (block >= 0 && block <= kMaxBlock && blocks_.test(static_cast<std::size_t>(block)));
}

std::int64_t BlockSelection::count(std::int64_t blocks_in_model) const {
  std::int64_t selected = 0;
  for (std::int64_t b = 1; b <= blocks_in_model; ++b) selected += contains(b) ? 1 : 0;
  return selected;
}

void BlockSelection::check(std::string_view model, const std::vector<std::string>& block_names) const {
  const auto n = static_cast<std::int64_t>(block_names.size());
  FRUGAL_CHECK_VALUE(empty() || n > 0, "checkpoint blocks ", str(), ": ", model, " has no blocks to checkpoint");
  if (all_) return;
  for (std::int64_t b = 0; b <= kMaxBlock; ++b)
    FRUGAL_CHECK_VALUE(!contains(b) || (b >= 1 && b <= n), "checkpoint blocks ", str(), ": block ", b,
                       " is out of range: ", model, " has blocks 1-", n, " (", block_names.front(), " .. ",
                       block_names.back(), ")");
}

std::string BlockSelection::str() const {
  if (all_) return "all";
  if (empty()) return "none";
  std::string out;
  for (std::int64_t b = 0; b <= kMaxBlock; ++b) {
    if (!contains(b)) continue;
    std::int64_t last = b;  // the run of selected blocks from b
    while (last < kMaxBlock && contains(last + 1)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(b);
    if (last > b) out += '-' + std::to_string(last);
    b = last;
  }
  return out;
}

BlockSelection checkpointed_blocks(bool all_blocks, const BlockSelection& blocks) {
  return all_blocks ? BlockSelection::all() : blocks;
}

}  // namespace frugal::models
