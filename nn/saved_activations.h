// How the autograd graph keeps the tensors it saves for backward, when a run asks for fewer bytes
// than the standard graph's minimum (docs/memory-guide.md, "Saving less than the minimum"):
//   bn_from_output  BatchNorm saves its normalised input x-hat instead of its input, and its output
//                   (what the next layer saves) is rebuilt from x-hat in backward instead of kept:
//                   one tensor per Conv-BN(-ReLU6) where the standard graph keeps two.
//   bit_masks       a ReLU6 whose mask can no longer be read exactly from what is saved (a
//                   compressed x-hat) keeps it as 1 bit per element.
//   compress        saved activations kept in bf16, or as 8-bit codes per channel, while every op
//                   still computes in f32; decompressed when backward needs them.
// The choice is this thread's, set by a guard around a forward (as autocast is), so a model needs
// no flag of its own; the planner runs the same code on the meta device and so predicts each choice.
// Not here: how a tensor is rebuilt or compressed (nn/node.h's SavedTensor), BatchNorm's kernels
// (kernels/batch_norm.h), the codes (kernels/activation_codec.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace frugal::nn {

enum class SavedCompression : std::uint8_t { none, bf16, int8 };
std::string_view saved_compression_name(SavedCompression compression);  // "none", "bf16", "int8"
SavedCompression parse_saved_compression(std::string_view name);         // ValueError if unknown

struct ActivationSaving {
  bool bn_from_output = false;
  bool bit_masks = false;
  SavedCompression compress = SavedCompression::none;

  bool standard() const { return !bn_from_output && !bit_masks && compress == SavedCompression::none; }
  std::string str() const;  // "standard", or the options joined by '+': "bn-from-output+bf16"
};

// This thread's choice; standard unless a guard says otherwise.
const ActivationSaving& activation_saving();

class ActivationSavingGuard {
 public:
  explicit ActivationSavingGuard(const ActivationSaving& saving);
  ~ActivationSavingGuard();
  ActivationSavingGuard(const ActivationSavingGuard&) = delete;
  ActivationSavingGuard& operator=(const ActivationSavingGuard&) = delete;

 private:
  ActivationSaving previous_;
};

}  // namespace frugal::nn
