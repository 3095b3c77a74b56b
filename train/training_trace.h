// The allocation trace of training MobileNetV2, recorded from the real model: what
// `frugal alloc-replay --training-trace`, `frugal bench alloc` and sample 02 replay. The model comes
// from models/registry.h and trains on random images with SGD and momentum, through the trainer's own
// step (train/step.h), while a CachingAllocator
// of this file's own serves the CPU and records every allocation and free; the trace is written from
// that record (training_trace.cpp, Note [Recording the training trace]). So what the trace asks of an
// allocator is what the model asks, never a second description of it.
// Not here: the trace format, parsing and replay (memory/alloc_trace.h), the model
// (models/mobilenet_v2.h), the allocator's own history (CachingAllocator::record_history).
#pragma once

#include <string>

namespace frugal::train {

struct TrainingTraceOptions {
  int batch_size = 32;
  int steps = 8;
  int resolution = 224;    // input images are 3 x resolution x resolution
  int num_classes = 1000;
  bool vary_batch = true;  // steps cycle through 8/8, 6/8, 7/8 and 5/8 of batch_size
  // Trains every step for real instead of repeating a recorded step of the same batch: the reference
  // the repetition is tested against. Costs a real training step per step.
  bool record_every_step = false;
};

// The batch size of step `step` (0-based).
int training_batch_for_step(const TrainingTraceOptions& options, int step);

// The trace as text in frugal's format ("+ ID BYTES STREAM TAG" / "- ID", memory/alloc_trace.h),
// with comments naming the load and each step with its batch. Parameters and buffers are allocated
// at load (tag param); each step allocates its images and labels (tag data), activations, gradients
// and, at the first step, the momentum buffers (tag optimizer). Deterministic: the same options give
// the same text. Throws ValueError for a size that is not positive, and what the training throws
// (a batch of 1 at 32x32 leaves the last BatchNorm one value per channel: a ValueError). No other
// thread may make CPU tensors meanwhile: the CPU's allocator is replaced while this runs.
std::string record_training_trace(const TrainingTraceOptions& options = {});

}  // namespace frugal::train
