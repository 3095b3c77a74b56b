// train/training_trace.h: MobileNetV2 trained under a recording allocator, and the trace written
// from what it recorded.
#include "train/training_trace.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/optim.h"
#include "train/step.h"

namespace frugal::train {

// Note [Recording the training trace]
// The trace is what MobileNetV2 (models/mobilenet_v2.h) asks of an allocator while it trains:
//   load     make_model builds the model; its parameters and BatchNorm buffers are allocated
//            under MemoryTag::param, as every layer allocates them.
//   a step   the trainer's step (train/step.h): random images [N, 3, R, R] and i64 labels [N] (tag
//            data), the forward (activations kept for backward), cross-entropy, backward (gradients,
//            tag grad), the loss and accuracy read back, SGD with momentum 0.9 (its momentum
//            buffers, tag optimizer, made at the first step and kept), then zero_grad(), which frees
//            the gradients, as PyTorch >= 2.0 does by default.
// A CachingAllocator of this file's own serves the CPU meanwhile (set_allocator), so nothing the
// program allocated before appears (and no other thread may make CPU tensors while it records: their
// allocations would), and records its history one phase (the load, a step) at a time;
// only allocations and frees go into the trace, never the allocator's own segment calls, so any
// allocator can replay it. Sizes are what the caller requested, before any rounding.
//
// What a step allocates depends only on the shapes, never on the values or the number of threads
// (the same trace with 1, 2 and 4): the same batch size gives the same sequence of sizes, tags,
// allocations and frees. A real step costs about 5 s of CPU (224x224, batch 32), so only these
// steps are trained:
//   step 0                which also makes the momentum buffers, and
//   one later step per    the first step after step 0 with that batch: with the batch cycling 8/8,
//   batch size            6/8, 7/8, 5/8 of batch_size that is steps 1 to 4,
// and every other step repeats the recorded step of its batch with fresh ids. That is sound because
// such a step is self-contained: everything it allocates it frees, and it frees nothing older (checked
// as each is recorded). A 1000-step trace costs at most five real steps; tests/cpu/test_training_trace.cpp
// compares a trace built this way with one whose every step was trained, event for event.

namespace {

// The learning rate and momentum of torchvision's reference recipe for MobileNetV2 (its weight decay
// left out); the learning rate changes values only, never what is allocated.
constexpr double kLearningRate = 0.045, kMomentum = 0.9;
// The events one phase (the load or a step) may record. A step of MobileNetV2 makes about 1,300
// allocations and frees, whatever the batch (1,450 at step 0); the ring buffer this reserves is a
// few MiB.
constexpr std::size_t kMaxPhaseEvents = std::size_t{1} << 16;
// Seeds the weights and the batches, so that the same options give the same trace.
constexpr std::uint64_t kSeed = 0;

// Serves `device` from `allocator` while alive, then restores whichever allocator served it before,
// also when an exception leaves the scope.
class InstalledAllocator {
 public:
  InstalledAllocator(Device device, Allocator& allocator)
      : device_(device), previous_(set_allocator(device, &allocator)) {}
  ~InstalledAllocator() { set_allocator(device_, previous_); }
  InstalledAllocator(const InstalledAllocator&) = delete;
  InstalledAllocator& operator=(const InstalledAllocator&) = delete;

 private:
  Device device_;
  Allocator* previous_;
};

// One allocation or free. `key` names the allocation over the whole recording: a free finds its
// allocation by it, and the writer gives each allocation it writes a fresh id.
struct Event {
  bool is_alloc = true;
  std::size_t key = 0;
  std::size_t bytes = 0;
  std::uintptr_t stream = 0;
  MemoryTag tag = MemoryTag::other;
};
using Phase = std::vector<Event>;

// Turns the allocator's history, one phase at a time, into events with keys instead of addresses.
class Recorder {
 public:
  explicit Recorder(CachingAllocator& allocator) : allocator_(allocator) {}

  Phase record(const std::function<void()>& run) {
    allocator_.record_history(kMaxPhaseEvents);
    run();
    const std::vector<AllocEvent> history = allocator_.history();
    allocator_.record_history(0);
    FRUGAL_CHECK(history.size() < kMaxPhaseEvents, "training trace: a phase made ", kMaxPhaseEvents,
                 " allocator events or more; raise kMaxPhaseEvents");
    Phase phase;
    for (const AllocEvent& e : history) {
      const auto stream = reinterpret_cast<std::uintptr_t>(e.stream.handle);
      if (e.kind == AllocEvent::Kind::alloc) {
        live_[e.address] = next_key_;
        phase.push_back({true, next_key_++, e.requested, stream, e.tag});
      } else if (e.kind == AllocEvent::Kind::free) {
        const auto found = live_.find(e.address);
        FRUGAL_CHECK(found != live_.end(), "training trace: a free of memory allocated before recording began");
        phase.push_back({false, found->second, e.requested, stream, e.tag});
        live_.erase(found);
      }
    }
    return phase;
  }

 private:
  CachingAllocator& allocator_;
  std::unordered_map<std::uintptr_t, std::size_t> live_;  // address -> key of the allocation there
  std::size_t next_key_ = 0;
};

// Everything the phase allocates it frees, and it frees nothing it did not allocate: it can be repeated.
bool self_contained(const Phase& phase) {
  std::unordered_set<std::size_t> live;
  for (const Event& e : phase)
    if (e.is_alloc)
      live.insert(e.key);
    else if (live.erase(e.key) == 0)
      return false;
  return live.empty();
}

// frugal's trace format; ids are numbers in the order allocations are written.
class TraceWriter {
 public:
  void comment(const std::string& text) { out_ << "# " << text << '\n'; }
  void write(const Phase& phase) {
    for (const Event& e : phase) {
      if (e.is_alloc) {
        ids_[e.key] = next_id_;
        out_ << "+ " << next_id_++ << ' ' << e.bytes << ' ' << e.stream << ' ' << memory_tag_name(e.tag) << '\n';
        continue;
      }
      const auto found = ids_.find(e.key);
      FRUGAL_CHECK(found != ids_.end(), "training trace: a free written before its allocation");
      out_ << "- " << found->second << '\n';
      ids_.erase(found);
    }
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::unordered_map<std::size_t, std::size_t> ids_;  // key -> id of the allocation written last for it
  std::size_t next_id_ = 0;
};

// The model, its optimizer and the random batches.
class Training {
 public:
  explicit Training(const TrainingTraceOptions& options)
      : options_(options),
        model_(models::make_model("mobilenet_v2", {.num_classes = options.num_classes, .generator = &generator_})),
        optimizer_(model_->parameters(), kLearningRate, kMomentum) {
    model_->train();
  }

  void step(int batch) {
    const StepHooks hooks{.next_batch = [&] {
      MemoryTagScope data(MemoryTag::data);
      Tensor images = uniform({batch, 3, options_.resolution, options_.resolution}, -1.0, 1.0, {}, &generator_);
      return data::Batch{std::move(images), randint(0, options_.num_classes, {batch}, {.dtype = DType::i64}, &generator_), {}};
    }};
    optimizer_step({.model = *model_, .optimizer = &optimizer_}, {}, 1, batch, hooks);
  }

 private:
  TrainingTraceOptions options_;
  Generator generator_{kSeed};  // before model_, which draws its weights from it
  std::shared_ptr<nn::Module> model_;
  nn::SGD optimizer_;
};

}  // namespace

int training_batch_for_step(const TrainingTraceOptions& options, int step) {
  // Eighths of the batch size, mixed up and down so that steps both grow and shrink the shapes.
  constexpr int kEighths[] = {8, 6, 7, 5};
  if (!options.vary_batch) return options.batch_size;
  return std::max(1, options.batch_size * kEighths[step % 4] / 8);
}

std::string record_training_trace(const TrainingTraceOptions& options) {
  FRUGAL_CHECK_VALUE(options.batch_size > 0 && options.steps > 0 && options.resolution > 0 && options.num_classes > 0,
                     "training trace: batch size, steps, resolution and classes must be positive, got batch ",
                     options.batch_size, ", ", options.steps, " steps, resolution ", options.resolution, ", ",
                     options.num_classes, " classes");
  // Declared in this order so that they go in reverse: the model and its tensors first, then the
  // previous allocator comes back, then this one, with nothing of its own left alive, is destroyed.
  CachingAllocator allocator(std::make_unique<HostBacking>(), CachingOptions::from_environment());
  const InstalledAllocator installed(Device::cpu(), allocator);
  Recorder recorder(allocator);
  std::optional<Training> training;

  TraceWriter writer;
  writer.comment(detail::str("MobileNetV2 training recorded by train/training_trace.cpp: resolution ",
                             options.resolution, ", ", options.num_classes, " classes, ", options.steps, " steps"));
  writer.comment("load: parameters and buffers");
  writer.write(recorder.record([&] { training.emplace(options); }));
  std::map<int, std::pair<int, Phase>> recorded;  // batch -> a recorded step after step 0 and its events
  for (int step = 0; step < options.steps; ++step) {
    const int batch = training_batch_for_step(options, step);
    const auto found = recorded.find(batch);
    if (step > 0 && found != recorded.end() && !options.record_every_step) {
      writer.comment(detail::str("step ", step, ": batch ", batch, " (step ", found->second.first, " repeated)"));
      writer.write(found->second.second);
      continue;
    }
    writer.comment(detail::str("step ", step, ": batch ", batch));
    Phase phase = recorder.record([&] { training->step(batch); });
    writer.write(phase);
    if (step == 0 || found != recorded.end()) continue;
    FRUGAL_CHECK(self_contained(phase), "training trace: step ", step,
                 " keeps memory past its end or frees memory of an earlier step, so it cannot be repeated");
    recorded.emplace(batch, std::pair{step, std::move(phase)});
  }
  return writer.text();
}

}  // namespace frugal::train
