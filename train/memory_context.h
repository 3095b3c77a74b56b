// Which layer made each allocation. LayerMemoryContexts is a ModuleCallObserver (nn/module.h) that
// sets this thread's memory context (core/allocator.h, MemoryContextScope) to the called module's
// dotted name and class for the length of its call, so the caching allocator records
// "features.3.conv.1 (Conv2d)" on every block that layer allocates. The trainer installs it around
// the whole run; the leak check and the OOM explanation read it back.
//
//   train::LayerMemoryContexts contexts(*model);
//   nn::ModuleCallObserverScope observe(contexts);   // this thread's module calls now name their memory
//
// Not here: the allocator's bookkeeping (core/caching_allocator.h: live_blocks), the reports that
// read it (train/leak_check.h, train/oom_explainer.h).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "nn/module.h"

namespace frugal::train {

class LayerMemoryContexts final : public nn::ModuleCallObserver {
 public:
  // Interns a label for every module of `root` (root.named_modules()): "features.3.conv.1 (Conv2d)",
  // and the root itself by its class alone ("MobileNetV2"). `root` must outlive the observer.
  explicit LayerMemoryContexts(const nn::Module& root);
  void before_call(const nn::Module& module) override;
  void after_call(const nn::Module& module, const Tensor* output) override;

 private:
  std::unordered_map<const nn::Module*, MemoryContextId> ids_;
  // The context in force before each open call, innermost last. A module outside the root's tree
  // keeps its caller's context (it still pushes, so the stack stays balanced).
  std::vector<MemoryContextId> enclosing_;
};

// What a report says made a block: its context's label, or "outside any layer" for none.
std::string made_by(MemoryContextId context);

// One live tensor as the reports list it.
struct LiveTensor {
  std::size_t bytes = 0;  // as the caller asked (the block may be rounded up to 512 B)
  MemoryTag tag = MemoryTag::other;
  std::string made_by;
};
LiveTensor live_tensor(const LiveBlock& block);

// Orders tensors largest first, ties by tag and then by maker, so a report reads the same every run.
bool larger_first(const LiveTensor& a, const LiveTensor& b);

}  // namespace frugal::train
