// LayerMemoryContexts and the words reports use for a block's maker (see memory_context.h).
#include "train/memory_context.h"

#include <tuple>

namespace frugal::train {

LayerMemoryContexts::LayerMemoryContexts(const nn::Module& root) {
  for (const auto& [name, module] : root.named_modules()) {
    const std::string label = name.empty() ? module->type_name() : name + " (" + module->type_name() + ")";
    ids_.emplace(module, intern_memory_context(label));
  }
}

void LayerMemoryContexts::before_call(const nn::Module& module) {
  const auto found = ids_.find(&module);
  const MemoryContextId current = current_memory_context();
  enclosing_.push_back(current);
  set_memory_context(found == ids_.end() ? current : found->second);
}

void LayerMemoryContexts::after_call(const nn::Module&, const Tensor*) {
  set_memory_context(enclosing_.back());
  enclosing_.pop_back();
}

std::string made_by(MemoryContextId context) {
  return context == kNoMemoryContext ? "outside any layer" : memory_context_label(context);
}

LiveTensor live_tensor(const LiveBlock& block) { return {block.requested, block.tag, made_by(block.context)}; }

bool larger_first(const LiveTensor& a, const LiveTensor& b) {
  return std::tie(b.bytes, a.tag, a.made_by) < std::tie(a.bytes, b.tag, b.made_by);
}

}  // namespace frugal::train
