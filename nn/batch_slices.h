// Running a forward on slices of the batch shared among OpenMP's threads: for inference, where a
// model's layers are too small to share among the threads one at a time (Note [Inference across the
// batch on the CPU] in models/mobilenet_v2.cpp). Here: the thread's modes a slice must run under,
// carried from the calling thread to the others, and the loop over the slices.
// Not here: which layers may run on slices without changing their results (the model knows: a
// BatchNorm in training mode takes its statistics from the whole batch, and a GEMM over a different
// number of samples may round differently), and training (the autograd graph is one thread's).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/allocator.h"
#include "core/device.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/saved_activations.h"

namespace frugal::nn {

// The per-thread modes an inference forward reads: what the calling thread has in force, for
// another thread to take on. A new thread starts with the defaults (grad mode on, no autocast, the
// CPU as default device, tag `other`), which would make a slice record an autograd graph, or count
// its memory under no layer. Not carried, because for_each_batch_slice refuses to run under them:
// recording autograd (grad mode on), module call observers, a checkpoint's first run or
// recomputation (their graphs, observers and saved state are the calling thread's).
struct ThreadModes {
  bool grad_mode = true;
  bool anomaly_mode = false;
  std::optional<DType> autocast;
  ActivationSaving saving;
  MemoryTag tag = MemoryTag::other;
  MemoryContextId context = kNoMemoryContext;
  Device default_device = Device::cpu();

  static ThreadModes current();  // this thread's
};

// Puts `modes` in force on this thread while it lives, and the thread's own back after.
class ThreadModesScope {
 public:
  explicit ThreadModesScope(const ThreadModes& modes);
  ThreadModesScope(const ThreadModesScope&) = delete;
  ThreadModesScope& operator=(const ThreadModesScope&) = delete;

 private:
  autograd::GradModeGuard grad_mode_;
  autograd::AnomalyModeGuard anomaly_mode_;
  AutocastGuard autocast_;
  ActivationSavingGuard saving_;
  MemoryTagScope tag_;
  MemoryContextScope context_;
  DefaultDeviceScope default_device_;
};

// Calls body(first, count) for each slice [first, first + count) of a batch of `batch` samples cut
// every `slice` samples (the last slice may be shorter), the slices side by side on OpenMP's
// threads, each claimed by whichever thread is free (Note [Threads claim pieces of a loop] in
// core/cpu/parallel.h), each under the calling thread's ThreadModes and with OpenMP's thread count set to 1 for
// what it runs: the kernels inside a slice, OpenBLAS's GEMMs included, stay on the slice's thread,
// and so does its memory: a slice's host tensors reuse the blocks its own thread freed (Note [A
// thread's own host blocks] in core/allocator.h).
// With one thread, or one slice, the slices run in order on the calling thread. An exception from a
// slice is rethrown here (the first one, by slice order) once every slice has finished.
// ValueError: a batch below 0 or a slice below 1; grad mode on, module calls observed, or inside a
// checkpoint (the modes ThreadModes does not carry).
void for_each_batch_slice(std::int64_t batch, std::int64_t slice,
                          const std::function<void(std::int64_t first, std::int64_t count)>& body);

}  // namespace frugal::nn
