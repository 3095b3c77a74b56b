// The thread's activation-saving choice (nn/saved_activations.h).
#include "nn/saved_activations.h"

#include "core/error.h"

namespace frugal::nn {

namespace {
thread_local ActivationSaving t_saving;
}  // namespace

std::string_view saved_compression_name(SavedCompression compression) {
  switch (compression) {
    case SavedCompression::none: return "none";
    case SavedCompression::bf16: return "bf16";
    case SavedCompression::int8: return "int8";
  }
  return "?";
}

SavedCompression parse_saved_compression(std::string_view name) {
  for (SavedCompression c : {SavedCompression::none, SavedCompression::bf16, SavedCompression::int8})
    if (name == saved_compression_name(c)) return c;
  FRUGAL_THROW(ValueError, "unknown compression of saved activations '", name, "' (none, bf16 or int8)");
}

std::string ActivationSaving::str() const {
  if (standard()) return "standard";
  std::string s;
  const auto add = [&](std::string_view part) {
    if (!s.empty()) s += '+';
    s += part;
  };
  if (bn_from_output) add("bn-from-output");
  if (bit_masks) add("bit-masks");
  if (compress != SavedCompression::none) add(saved_compression_name(compress));
  return s;
}

const ActivationSaving& activation_saving() { return t_saving; }

ActivationSavingGuard::ActivationSavingGuard(const ActivationSaving& saving) : previous_(t_saving) { t_saving = saving; }
ActivationSavingGuard::~ActivationSavingGuard() { t_saving = previous_; }

}  // namespace frugal::nn
