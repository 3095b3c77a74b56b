// Which of a model's repeated blocks run through nn::checkpoint: none, all, or a set written as the
// user writes it on the command line ("2-7", "1,3,5-9", "all").
//
// Blocks are numbered as a user reads the model's module names, from 1:
//   mobilenet_v2  blocks 1-17 are features.1 .. features.17 (the inverted residuals; features.0 is the
//                 stem and features.18 the head, never checkpointed)
//   resnet18      blocks 1-8  are layer1.0, layer1.1, layer2.0 .. layer4.1 (layer by layer, block by block)
//   resnet50      blocks 1-16 are layer1.0 .. layer1.2, layer2.0 .. layer2.3, layer3.0 .. 3.5, layer4.0 .. 4.2
//   cnn           blocks 1-3  are its conv units: features.0-2, features.3-5, features.6-7
// models/registry.h block_names(model) lists them. Parsing knows no model; check() holds a selection
// against one, so "0-99" parses and is then refused with the model's range.
// Not here: running a block checkpointed (nn/checkpoint.h, CheckpointedSequential), choosing blocks (the planner).
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace frugal::models {

class BlockSelection {
 public:
  // No model here has more than 17 blocks; a fixed-size set keeps the options plain values.
  static constexpr std::int64_t kMaxBlock = 1023;

  BlockSelection() = default;  // no block
  static BlockSelection all();
  static BlockSelection first(std::int64_t count);  // blocks 1..count
  // "all", or comma-separated block numbers and inclusive ranges ("1,3,5-9"). ValueError naming the
  // text and the token that is not a number, a range that runs backwards, or an empty text.
  static BlockSelection parse(std::string_view text);

  bool empty() const { return !all_ && blocks_.none(); }
  bool is_all() const { return all_; }
  bool contains(std::int64_t block) const;  // block numbered from 1
  // How many of a model's `count` blocks are selected.
  std::int64_t count(std::int64_t blocks_in_model) const;
  // ValueError unless every selected block is one of `block_names` (block i is block_names[i - 1]);
  // the message gives the model's valid range, e.g. "mobilenet_v2 has blocks 1-17".
  void check(std::string_view model, const std::vector<std::string>& block_names) const;
  // "none", "all", or ranges merged and sorted: parse("5,1-3,4") prints "1-5".
  std::string str() const;
  bool operator==(const BlockSelection&) const = default;

 private:
  bool all_ = false;
  std::bitset<kMaxBlock + 1> blocks_;  // bit b: block b selected; none when all_
};

// What a model runs checkpointed: every block when `all_blocks` (checkpoint_activations), else `blocks`.
BlockSelection checkpointed_blocks(bool all_blocks, const BlockSelection& blocks);

}  // namespace frugal::models
