// plan_memory (see planner.h). Read top to bottom: marking phases and layers while the run goes on
// the meta device, the run itself, then reading the allocator's record back into a plan.
#include "train/planner.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_map>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "data/loader.h"
#include "models/registry.h"
#include "nn/activation_offload.h"
#include "nn/amp.h"
#include "dist/mirror_communicator.h"
#include "kernels/optimizer.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/recipe.h"
#include "train/step.h"

namespace frugal::train {

namespace {

// Room for every event of the planned steps of a large model (ResNet-50 at batch 256 records about
// 20 000 a step).
constexpr std::size_t kMaxEvents = std::size_t{1} << 22;
// A point in the allocator's record: a phase starts, or a layer's forward starts or ends.
struct Mark {
  enum class Kind : std::uint8_t { phase, enter, exit };
  std::size_t event = 0;  // history index of the first event after the mark
  Kind kind = Kind::phase;
  int index = 0;  // the phase (into kPhases) or the layer (into MemoryPlan::layers)
};

constexpr std::array<const char*, 4> kPhases = {"init", "forward", "backward", "optimizer step"};
enum Phase : int { kInit, kForward, kBackward, kOptimizer };

// Marks the calls of leaf modules (those without children) while `recording` is set.
class LayerMarks final : public nn::ModuleCallObserver {
 public:
  LayerMarks(const CachingAllocator& allocator, std::vector<Mark>& marks, const std::unordered_map<const nn::Module*, int>& leaves)
      : allocator_(allocator), marks_(marks), leaves_(leaves) {}
  bool recording = false;

  void before_call(const nn::Module& module) override { mark(module, Mark::Kind::enter); }
  void after_call(const nn::Module& module, const Tensor*) override { mark(module, Mark::Kind::exit); }

 private:
  void mark(const nn::Module& module, Mark::Kind kind) {
    const auto it = leaves_.find(&module);
    if (recording && it != leaves_.end()) marks_.push_back({allocator_.history_size(), kind, it->second});
  }
  const CachingAllocator& allocator_;
  std::vector<Mark>& marks_;
  const std::unordered_map<const nn::Module*, int>& leaves_;
};

// The state `o`'s optimizer keeps for parameter `p` (nn/optim.h): SGD's momentum buffer, AdamW's two
// moments, AdamW8bit's two code tensors and their block scales, Adafactor's row and column means.
std::int64_t optimizer_state_bytes(const Tensor& p, const TrainOptions& o) {
  const auto bytes = static_cast<std::int64_t>(p.nbytes());
  switch (o.optimizer) {
    case OptimizerKind::sgd: return o.momentum > 0 ? bytes : 0;
    case OptimizerKind::adamw: return 2 * bytes;
    case OptimizerKind::adamw8bit: return 2 * (p.numel() + quant_blocks(p.numel()) * std::int64_t{sizeof(float)});
    case OptimizerKind::adafactor: {  // a value per row and per column of [d0, numel / d0]
      const std::int64_t rows = p.dim() == 0 ? 1 : p.size(0);
      return (rows + (rows == 0 ? 0 : p.numel() / rows)) * static_cast<std::int64_t>(dtype_size(p.dtype()));
    }
  }
  return 0;
}

// The model's leaf modules as plan rows (names, types, parameter bytes), and a look-up from module to row.
std::vector<LayerPlan> leaf_layers(const nn::Module& model, const TrainOptions& o,
                                   std::unordered_map<const nn::Module*, int>& index) {
  std::vector<LayerPlan> layers;
  for (const auto& [name, module] : model.named_modules()) {
    if (!module->named_children().empty()) continue;
    LayerPlan layer{.name = name, .type = module->type_name()};
    for (const Tensor& p : module->parameters()) layer.param_bytes += static_cast<std::int64_t>(p.nbytes());
    layer.grad_bytes = layer.param_bytes;  // gradients have their parameters' shapes and dtypes
    for (const Tensor& p : module->parameters()) {
      const std::int64_t state = optimizer_state_bytes(p, o);
      if (o.offload_optimizer) layer.host_bytes += state + 2 * static_cast<std::int64_t>(p.nbytes());
      else layer.optimizer_bytes += state;
    }
    index[module] = static_cast<int>(layers.size());
    layers.push_back(std::move(layer));
  }
  return layers;
}

// The plan's phase of a step's phase.
int plan_phase(StepPhase phase) {
  switch (phase) {
    case StepPhase::forward: return kForward;
    case StepPhase::backward: return kBackward;
    case StepPhase::optimizer: return kOptimizer;
  }
  FRUGAL_THROW(Error, "unknown step phase ", static_cast<int>(phase));
}

// ---- the run on the meta device ---------------------------------------------------------------------

struct Recorded {
  std::vector<LayerPlan> layers;
  std::vector<Mark> marks;
  std::vector<AllocEvent> events;
  std::int64_t baseline = 0;  // allocated on the meta device before the plan began
  std::int64_t data_bytes = 0;
  std::int64_t activation_host_bytes = 0;  // the most saved activations in host memory at once
};

// The training loader's batches as a run holds them (data/loader.h, Note [Bounded, ordered
// prefetching]): without workers the batch is made when it is asked for; with them, `workers x
// prefetch` batches wait ready, and handing one over lets a worker make the next. On the meta device
// a batch is its images and labels, allocated where a worker would allocate them (tag data).
class PlannedLoader {
 public:
  PlannedLoader(const TrainOptions& o, const PlanShape& shape) : options_(o), shape_(shape) {
    for (std::int64_t b = 0; b + 1 < loader_batches_alive(o.workers); ++b) ready_.push_back(make());
  }
  data::Batch next() {
    if (ready_.empty()) return make();
    data::Batch batch = std::move(ready_.front());
    ready_.pop_front();
    ready_.push_back(make());
    return batch;
  }
  // The bytes of one batch as make() allocates it (images and labels), without allocating one: the
  // meta allocator's record must hold the run's requests only.
  std::int64_t batch_bytes() const {
    const std::int64_t n = options_.batch_size, side = options_.image_size;
    return n * shape_.in_channels * side * side * static_cast<std::int64_t>(dtype_size(kImages)) +
           n * static_cast<std::int64_t>(dtype_size(kLabels));
  }

 private:
  static constexpr DType kImages = DType::f32, kLabels = DType::i64;  // as the loader hands them out

  data::Batch make() const {
    const MemoryTagScope tag(MemoryTag::data);
    const std::int64_t n = options_.batch_size, side = options_.image_size;
    return {empty({n, shape_.in_channels, side, side}, {.dtype = kImages, .device = Device::meta()}),
            empty({n}, {.dtype = kLabels, .device = Device::meta()}), {}};
  }
  const TrainOptions& options_;
  const PlanShape& shape_;
  std::deque<data::Batch> ready_;
};

// `steps` optimizer steps of the run on the meta device, through the trainer's own step
// (train/step.h) with the trainer's own recipe (train/recipe.h), GradScaler and schedule included.
// The layers of the second step's first forward are recorded (the first step makes the optimizer's
// state; the second is what every later step looks like).
Recorded run_on_meta(const TrainOptions& o, const PlanShape& shape, int steps) {
  CachingAllocator& meta = default_caching_allocator(Device::meta());
  meta.empty_cache();
  meta.reset_peak_stats();
  Recorded r;
  r.baseline = meta.caching_stats().allocated_bytes.current;
  meta.record_history(kMaxEvents);
  r.marks.push_back({0, Mark::Kind::phase, kInit});

  Generator generator(o.seed);  // the initial weights do not matter here; the default generator is left alone
  models::ModelOptions model_options_ = model_options(o, shape.in_channels, shape.num_classes);
  model_options_.generator = &generator;
  std::shared_ptr<nn::Module> model;
  {
    // Built straight on the meta device: its parameters take no memory and their initialisation no
    // time, however many classes or how wide the model (core/device.h, DefaultDeviceScope).
    const DefaultDeviceScope on_meta(Device::meta());
    model = models::make_model(o.model, model_options_);
  }
  std::unordered_map<const nn::Module*, int> leaves;
  r.layers = leaf_layers(*model, o, leaves);
  model->train();
  // With --ddp: the buckets and ZeRO's shards of `ranks` ranks, over a simulated world whose
  // collectives move nothing (dist/mirror_communicator.h): what one rank holds.
  std::optional<dist::MirrorCommunicator> world;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (o.ddp) {
    world.emplace(o.ranks);
    ddp = std::make_unique<dist::DistributedDataParallel>(*model, *world, ddp_options(o));
  }
  const Recipe recipe = make_recipe(*model, ddp.get(), o, steps);
  PlannedLoader loader(o, shape);
  r.data_bytes = loader_batches_alive(o.workers) * loader.batch_bytes();

  LayerMarks layer_marks(meta, r.marks, leaves);
  nn::ModuleCallObserverScope observing(layer_marks);

  // With --offload activations the host side of the saved tensors is counted, not allocated (nn/activation_offload.h).
  nn::reset_offloaded_activation_peak();
  const std::int64_t offloaded_before = nn::offloaded_activation_bytes().now;
  int step = 0;
  const StepHooks hooks{.next_batch = [&loader] { return loader.next(); },
                        .on_phase = [&](StepPhase phase, bool begin, std::int64_t micro) {
                          if (begin) r.marks.push_back({meta.history_size(), Mark::Kind::phase, plan_phase(phase)});
                          layer_marks.recording = begin && phase == StepPhase::forward && step == 1 && micro == 0;
                        }};
  for (; step < steps; ++step) optimizer_step(recipe.parts(*model, ddp.get()), step_recipe(o), o.accum, o.accum * o.batch_size, hooks);
  r.events = meta.history();
  meta.record_history(0);
  r.activation_host_bytes = nn::offloaded_activation_bytes().peak - offloaded_before;
  FRUGAL_CHECK(r.events.size() < kMaxEvents, "plan_memory: the run made more than ", kMaxEvents,
               " allocator events, more than the record holds");
  return r;
}

// ---- reading the record -------------------------------------------------------------------------

// Walks the events in order, knowing at each one the phase and the innermost recorded layer.
MemoryPlan read_plan(Recorded r) {
  MemoryPlan plan;
  plan.layers = std::move(r.layers);
  plan.data_bytes = r.data_bytes;
  plan.activation_host_bytes = r.activation_host_bytes;
  plan.host_bytes = plan.activation_host_bytes;
  for (const LayerPlan& layer : plan.layers) plan.host_bytes += layer.host_bytes;
  plan.phases.resize(kPhases.size());
  for (std::size_t p = 0; p < kPhases.size(); ++p) plan.phases[p].name = kPhases[p];
  std::vector<bool> phase_seen(kPhases.size(), false);

  std::array<std::int64_t, kNumMemoryTags> tag_bytes{}, tag_bytes_at_peak{};
  struct Made {
    int layer;
    std::int64_t bytes;
  };
  std::unordered_map<std::uintptr_t, Made> made_by;            // live blocks the recorded forward's layers made
  std::unordered_map<std::uintptr_t, std::int64_t> workspace;  // live workspace blocks of recorded layers
  std::vector<std::int64_t> layer_workspace(plan.layers.size(), 0);
  std::int64_t workspace_live = 0;  // the sum of `workspace`
  std::vector<int> stack;  // recorded layers whose forward is running
  int phase = kInit;
  std::int64_t allocated = 0, reserved = 0;
  std::size_t next_mark = 0;
  auto apply_marks = [&](std::size_t event) {
    for (; next_mark < r.marks.size() && r.marks[next_mark].event <= event; ++next_mark) {
      const Mark& mark = r.marks[next_mark];
      if (mark.kind == Mark::Kind::phase) {
        // The recorded forward ends: what its layers made and is still alive is what they saved for backward.
        for (const auto& [address, made] : made_by) plan.layers[static_cast<std::size_t>(made.layer)].saved_bytes += made.bytes;
        made_by.clear();
        phase = mark.index;
        PhasePlan& p = plan.phases[static_cast<std::size_t>(phase)];
        if (!phase_seen[static_cast<std::size_t>(phase)]) p.start_bytes = allocated;
        phase_seen[static_cast<std::size_t>(phase)] = true;
      } else if (mark.kind == Mark::Kind::enter) {
        stack.push_back(mark.index);
      } else if (!stack.empty()) {
        stack.pop_back();
      }
    }
  };
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    apply_marks(i);
    const AllocEvent& e = r.events[i];
    const bool alloc = e.kind == AllocEvent::Kind::alloc, free = e.kind == AllocEvent::Kind::free;
    if (alloc || free) tag_bytes[static_cast<std::size_t>(e.tag)] += (alloc ? 1 : -1) * static_cast<std::int64_t>(e.requested);
    if (alloc && !stack.empty()) made_by[e.address] = {stack.back(), static_cast<std::int64_t>(e.bytes)};
    if (free) made_by.erase(e.address);
    if (alloc && !stack.empty() && e.tag == MemoryTag::workspace) {
      workspace[e.address] = static_cast<std::int64_t>(e.bytes);
      workspace_live += static_cast<std::int64_t>(e.bytes);
      std::int64_t& most = layer_workspace[static_cast<std::size_t>(stack.back())];
      most = std::max(most, workspace_live);
    }
    if (free) {
      if (const auto it = workspace.find(e.address); it != workspace.end()) {
        workspace_live -= it->second;
        workspace.erase(it);
      }
    }
    allocated = static_cast<std::int64_t>(e.allocated_total) - r.baseline;
    reserved = static_cast<std::int64_t>(e.reserved_total);
    PhasePlan& p = plan.phases[static_cast<std::size_t>(phase)];
    p.end_bytes = allocated;
    p.peak_bytes = std::max(p.peak_bytes, allocated);
    p.peak_reserved_bytes = std::max(p.peak_reserved_bytes, reserved);
    plan.peak_reserved_bytes = std::max(plan.peak_reserved_bytes, reserved);
    if (allocated > plan.peak_bytes) {
      plan.peak_bytes = allocated;
      plan.peak_phase = kPhases[static_cast<std::size_t>(phase)];
      plan.peak_layer_index = stack.empty() ? -1 : stack.back();
      tag_bytes_at_peak = tag_bytes;
    }
  }
  for (std::size_t l = 0; l < plan.layers.size(); ++l) plan.layers[l].workspace_bytes = layer_workspace[l];
  for (int t = 0; t < kNumMemoryTags; ++t)
    plan.peak_by_tag.emplace_back(std::string(memory_tag_name(static_cast<MemoryTag>(t))), tag_bytes_at_peak[static_cast<std::size_t>(t)]);
  return plan;
}

// The run's requests in the order it made them, as a trace any allocator can replay
// (memory/alloc_trace.h): each allocation a slot, reused once freed. Frees of blocks allocated before
// the record began (not the run's) are left out.
Trace requests_of(const std::vector<AllocEvent>& events) {
  Trace trace;
  trace.source = "the planned run";
  std::unordered_map<std::uintptr_t, std::size_t> slot_at;  // live block address -> its slot
  std::vector<std::size_t> free_slots;
  for (const AllocEvent& e : events) {
    if (e.kind == AllocEvent::Kind::alloc) {
      std::size_t slot = trace.slots;
      if (free_slots.empty()) ++trace.slots;
      else slot = free_slots.back(), free_slots.pop_back();
      slot_at[e.address] = slot;
      trace.events.push_back({.is_alloc = true, .slot = slot, .bytes = e.requested,
                              .stream = reinterpret_cast<std::uintptr_t>(e.stream.handle), .tag = e.tag,
                              .line = trace.events.size() + 1});
    } else if (e.kind == AllocEvent::Kind::free) {
      const auto found = slot_at.find(e.address);
      if (found == slot_at.end()) continue;
      trace.events.push_back({.is_alloc = false, .slot = found->second, .line = trace.events.size() + 1});
      free_slots.push_back(found->second);
      slot_at.erase(found);
    }
  }
  return trace;
}

}  // namespace

ReplayOptions replay_policy(const CachingOptions& o) {
  return {.limit = kUnlimited, .direct = o.bypass, .max_split = o.max_split_size, .expandable = o.expandable_segments};
}

std::int64_t smallest_device(const Trace& requests, const ReplayOptions& policy) {
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;  // devices are sized in whole MiB
  constexpr std::int64_t kSteps = 64;  // the search's resolution: a 64th of its range, so its cost does not grow with sizes
  const auto fits = [&](std::int64_t bytes) {
    ReplayOptions capped = policy;
    capped.limit = static_cast<std::size_t>(bytes);
    return !replay(requests, capped).oom.has_value();
  };
  const ReplayResult unlimited = replay(requests, policy);
  // Below the most ever allocated at once nothing fits; what an unlimited device reserved does.
  const std::int64_t least = static_cast<std::int64_t>(unlimited.peak_allocated_bytes);
  const std::int64_t most = (static_cast<std::int64_t>(unlimited.peak_reserved_bytes) + kMiB - 1) / kMiB * kMiB;
  const std::int64_t unit = std::max(kMiB, (most - least + kSteps * kMiB - 1) / (kSteps * kMiB) * kMiB);
  std::int64_t low = (least - 1) / unit, high = (most + unit - 1) / unit;  // in units: low does not fit, high does
  while (high - low > 1) {
    const std::int64_t middle = low + (high - low) / 2;
    (fits(middle * unit) ? high : low) = middle;
  }
  return std::min(high * unit, most);
}

std::int64_t loader_allowance(int workers) {
  return static_cast<std::int64_t>(workers) * data::LoaderOptions{}.prefetch * static_cast<std::int64_t>(kSmallBuffer);
}

std::int64_t loader_batches_alive(int workers) {
  return static_cast<std::int64_t>(workers) * data::LoaderOptions{}.prefetch + 1;
}

MemoryPlan plan_memory(const TrainOptions& o, const PlanShape& shape) {
  FRUGAL_CHECK_VALUE(o.batch_size >= 1 && o.accum >= 1 && o.image_size >= 1 && o.workers >= 0,
                     "plan_memory: batch size, accumulation and image size must be positive, workers not negative");
  FRUGAL_CHECK_VALUE(shape.in_channels >= 1 && shape.num_classes >= 1, "plan_memory: the input needs a channel and a class");
  Recorded recorded = run_on_meta(o, shape, kPlannedSteps);
  auto requests = std::make_shared<const Trace>(requests_of(recorded.events));
  MemoryPlan plan = read_plan(std::move(recorded));
  plan.device_needed_bytes = smallest_device(*requests, replay_policy(CachingOptions::from_environment())) +
                             loader_allowance(o.workers);
  plan.requests = std::move(requests);
  return plan;
}

namespace {

std::int64_t block_count(const TrainOptions& o) { return static_cast<std::int64_t>(models::block_names(o.model).size()); }

models::BlockSelection given_blocks(const TrainOptions& o) {
  return models::checkpointed_blocks(o.checkpoint_activations, o.checkpoint_blocks);
}

// `o` with exactly `blocks` checkpointed.
TrainOptions with_blocks(TrainOptions o, const models::BlockSelection& blocks) {
  o.checkpoint_activations = false;
  o.checkpoint_blocks = blocks;
  return o;
}

// As given; the first quarter, half and three quarters of the blocks (the early blocks see the
// largest feature maps, so they hold the most activations per block); all.
std::vector<models::BlockSelection> checkpoint_candidates(const TrainOptions& o) {
  const std::int64_t n = block_count(o);
  std::vector<models::BlockSelection> candidates = {given_blocks(o)};
  for (const std::int64_t quarters : {1, 2, 3})
    if (const std::int64_t k = (n * quarters + 3) / 4; k < n) candidates.push_back(models::BlockSelection::first(k));
  candidates.push_back(models::BlockSelection::all());
  std::vector<models::BlockSelection> unique;
  for (const auto& c : candidates)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  return unique;
}

// The ZeRO stages above the given one that `o` could run with: a --ddp run of SGD or AdamW whose
// optimizer stays on the device; stages 2 and 3 not with bucket views (train/options.cpp).
std::vector<int> zero_candidates(const TrainOptions& o) {
  std::vector<int> stages;
  const bool shardable = o.optimizer == OptimizerKind::sgd || o.optimizer == OptimizerKind::adamw;
  if (!o.ddp || !shardable || o.offload_optimizer) return stages;
  for (int stage = o.zero + 1; stage <= 3; ++stage)
    if (stage < 2 || !o.bucket_views) stages.push_back(stage);
  return stages;
}

// Whether the run's optimizer keeps state to offload: all but SGD without momentum.
bool has_state(const TrainOptions& o) { return o.optimizer != OptimizerKind::sgd || o.momentum > 0; }

// BatchNorm from its output rebuilds each saved feature map once in backward, an elementwise pass
// where recomputing a block reruns its convolutions: priced as recomputing this fraction of the
// blocks. Measured on MobileNetV2 (2 CPU cores): a step 0-11% slower (`frugal bench saving`), where
// recomputing every block costs about 20-30% (samples/09_checkpointing).
constexpr double kRebuildCost = 0.3;
// The optimizer offloaded to the host copies the weights and gradients across each step and updates
// at the host's speed; offloaded activations cross the bus twice, overlapped with compute as far as
// the prefetch hides them. On a GPU neither is measured here, so each is priced as the costliest of
// the ways that keep the numbers, recomputing every block. (On the CPU they are memcpy:
// samples/18_offload_optimizer and samples/19_offload_activations measure them.)
constexpr double kOffloadCost = 1.0;
// ZeRO-1 and -2 move as many bytes as plain DDP's all-reduce (a reduce-scatter, then an all-gather),
// but the all-gather of the updated parameters runs after the step, where backward cannot hide it;
// ZeRO-3 gathers every layer in forward and again in backward instead, half as many bytes more.
// Priced as recomputing a tenth of the blocks per stage, not measured (docs/distributed.md).
constexpr double kZeroCost = 0.1;

// What the graph may save instead of what was given: BatchNorm from its output, then with bit masks
// and bf16 compression too (changes the numbers); the given choice first, no duplicates.
std::vector<nn::ActivationSaving> saving_candidates(const TrainOptions& o) {
  std::vector<nn::ActivationSaving> candidates = {o.saving};
  for (const nn::ActivationSaving& s :
       {nn::ActivationSaving{.bn_from_output = true, .bit_masks = o.saving.bit_masks, .compress = o.saving.compress},
        nn::ActivationSaving{.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::bf16}})
    if (std::none_of(candidates.begin(), candidates.end(), [&s](const auto& c) { return c.str() == s.str(); }))
      candidates.push_back(s);
  return candidates;
}

bool changes_numbers(const BudgetOption& b, const TrainOptions& given) {
  return b.bf16 || b.saving.compress != nn::SavedCompression::none || b.optimizer != given.optimizer;
}
double speed_cost(const BudgetOption& b) {
  return b.recomputed + (b.saving.bn_from_output ? kRebuildCost : 0.0) + (b.offload_optimizer ? kOffloadCost : 0.0) +
         (b.offload_activations ? kOffloadCost : 0.0) + kZeroCost * b.zero;
}

std::string cost_words(const BudgetOption& b, const TrainOptions& given) {
  std::string words;
  const auto add = [&words](const std::string& part) {
    if (!words.empty()) words += "; ";
    words += part;
  };
  if (b.accum != given.accum)
    add(std::to_string(b.accum) + " micro-batches of " + std::to_string(b.batch_size) + " per step");
  if (b.checkpoint_blocks != given_blocks(given)) {
    if (b.checkpoint_blocks.is_all()) add("recompute activations (about one more forward)");
    else add("recompute blocks " + b.checkpoint_blocks.str() + " (" + std::to_string(static_cast<int>(100 * b.recomputed + 0.5)) +
             "% of the blocks)");
  }
  if (b.optimizer_in_backward && !given.optimizer_in_backward) add("optimizer in backward (the same numbers)");
  if (b.offload_optimizer && !given.offload_optimizer)
    add("optimizer state on the host (weights and gradients copied each step)");
  if (b.offload_activations && !given.offload_activations)
    add("saved activations on the host (copied out in forward, back in backward)");
  if (b.zero != given.zero)
    add("--zero " + std::to_string(b.zero) + (b.zero == 3 ? " (each layer's parameters gathered around its use)"
                                                          : " (the parameters all-gathered after each step)"));
  if (b.bf16 && given.amp != DType::bf16) add("bf16 autocast (changes the numbers)");
  if (b.optimizer != given.optimizer) add("--optimizer " + optimizer_name(b.optimizer) + " (changes the numbers)");
  if (b.saving.str() != given.saving.str()) {
    if (b.saving.bn_from_output && !given.saving.bn_from_output) add("BatchNorm from its output (rebuilt in backward)");
    if (b.saving.compress != given.saving.compress)
      add("saved feature maps in " + std::string(nn::saved_compression_name(b.saving.compress)) + " (changes the numbers)");
  }
  return words.empty() ? "as given" : words;
}

// Cheapest first: accumulation only costs speed; recomputation costs about the fraction of the
// blocks recomputed of one more forward; bf16, compression and another optimizer change the numbers.
bool cheaper(const BudgetOption& a, const BudgetOption& b, const TrainOptions& given) {
  if (changes_numbers(a, given) != changes_numbers(b, given)) return changes_numbers(b, given);
  if (speed_cost(a) != speed_cost(b)) return speed_cost(a) < speed_cost(b);
  return a.accum < b.accum;
}

}  // namespace

std::vector<BudgetOption> fit_budget(const TrainOptions& options, std::int64_t budget_bytes, const PlanShape& shape) {
  FRUGAL_CHECK_VALUE(budget_bytes > 0, "plan_memory: the budget must be positive");
  const std::int64_t samples = options.batch_size * options.accum;
  const std::int64_t blocks = block_count(options);
  std::vector<BudgetOption> found;
  // Plans one combination, unless an earlier loop already did.
  const auto consider = [&](BudgetOption b) {
    const bool duplicate = std::any_of(found.begin(), found.end(), [&b](const BudgetOption& f) {
      return f.batch_size == b.batch_size && f.checkpoint_blocks == b.checkpoint_blocks && f.bf16 == b.bf16 &&
             f.saving.str() == b.saving.str() && f.optimizer_in_backward == b.optimizer_in_backward &&
             f.optimizer == b.optimizer && f.offload_optimizer == b.offload_optimizer &&
             f.offload_activations == b.offload_activations && f.zero == b.zero;
    });
    if (duplicate) return;
    TrainOptions o = with_blocks(options, b.checkpoint_blocks);
    o.batch_size = b.batch_size;
    o.accum = b.accum;
    o.saving = b.saving;
    o.optimizer_in_backward = b.optimizer_in_backward;
    o.optimizer = b.optimizer;
    o.offload_optimizer = b.offload_optimizer;
    o.offload_activations = b.offload_activations;
    o.zero = b.zero;
    if (b.bf16) o.amp = DType::bf16;
    const MemoryPlan plan = plan_memory(o, shape);
    b.peak_bytes = plan.peak_bytes;
    b.device_needed_bytes = plan.device_needed_bytes;
    b.fits = b.device_needed_bytes <= budget_bytes;
    b.cost = cost_words(b, options);
    found.push_back(std::move(b));
  };
  for (const bool bf16 : {options.amp == DType::bf16, true}) {
    for (const models::BlockSelection& checkpoint : checkpoint_candidates(options)) {
      for (const nn::ActivationSaving& saving : saving_candidates(options)) {
        // Other savings with the blocks as given only: each is an alternative to recomputing.
        if (saving.str() != options.saving.str() && checkpoint != given_blocks(options)) continue;
        // Offloaded activations move whole feature maps, never compressed ones (train/options.cpp).
        if (options.offload_activations && saving.compress != nn::SavedCompression::none) continue;
        for (std::int64_t accum = 1; accum <= samples && samples / accum >= 2; accum *= 2) {
          if (samples % accum != 0) continue;
          BudgetOption b{.batch_size = samples / accum,
                         .accum = accum,
                         .checkpoint_blocks = checkpoint,
                         .recomputed = static_cast<double>(checkpoint.count(blocks)) / static_cast<double>(blocks),
                         .bf16 = bf16,
                         .saving = saving,
                         .optimizer_in_backward = options.optimizer_in_backward,
                         .optimizer = options.optimizer,
                         .offload_optimizer = options.offload_optimizer,
                         .offload_activations = options.offload_activations,
                         .zero = options.zero};
          consider(b);
          // The higher ZeRO stages, with the blocks and saving as given (train/options.cpp: SGD or
          // AdamW, not with the optimizer on the host; ZeRO-2 not with bucket views).
          if (checkpoint == given_blocks(options) && saving.str() == options.saving.str())
            for (const int stage : zero_candidates(options)) {
              BudgetOption sharded = b;
              sharded.zero = stage;
              consider(sharded);
            }
          // The saved activations on the host, with the blocks and saving as given, uncompressed.
          if (!b.offload_activations && saving.compress == nn::SavedCompression::none &&
              checkpoint == given_blocks(options) && saving.str() == options.saving.str()) {
            BudgetOption offloaded = b;
            offloaded.offload_activations = true;
            consider(offloaded);
          }
          // The optimizer's state on the host, with the blocks and saving as given (train/options.cpp:
          // not with the optimizer in backward or ZeRO), for an optimizer that keeps state.
          if (!b.offload_optimizer && !b.optimizer_in_backward && options.zero == 0 && has_state(options) &&
              checkpoint == given_blocks(options) && saving.str() == options.saving.str()) {
            BudgetOption offloaded = b;
            offloaded.offload_optimizer = true;
            consider(offloaded);
          }
          // Less optimizer state than AdamW's, with the blocks and the saving as given: alternatives.
          if (options.optimizer == OptimizerKind::adamw && options.zero == 0 && checkpoint == given_blocks(options) &&
              saving.str() == options.saving.str())
            for (const OptimizerKind smaller : {OptimizerKind::adamw8bit, OptimizerKind::adafactor}) {
              BudgetOption other = b;
              other.optimizer = smaller;
              consider(other);
            }
          // The optimizer in backward needs each gradient final inside backward (train/options.cpp).
          if (!b.optimizer_in_backward && !b.offload_optimizer && accum == 1 && !options.ddp &&
              (bf16 || options.amp != DType::f16)) {
            b.optimizer_in_backward = true;
            consider(b);
          }
        }
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [&options](const BudgetOption& a, const BudgetOption& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.device_needed_bytes < b.device_needed_bytes;
    return cheaper(a, b, options);
  });
  return found;
}

std::optional<std::int64_t> smallest_checkpoint_prefix(const TrainOptions& options, std::int64_t limit_bytes,
                                                       const PlanShape& shape) {
  const auto fits = [&](std::int64_t k) {
    return plan_memory(with_blocks(options, models::BlockSelection::first(k)), shape).device_needed_bytes <= limit_bytes;
  };
  std::int64_t low = 1, high = block_count(options);  // the answer, if any, is in [low, high]
  if (high == 0 || !fits(high)) return std::nullopt;
  while (low < high) {
    const std::int64_t middle = low + (high - low) / 2;
    if (fits(middle)) high = middle;
    else low = middle + 1;
  }
  return low;
}

namespace {

// The --offload flag that gives `o` what it offloads: "--offload optimizer,activations" for both.
std::string offload_flag(const TrainOptions& o) {
  if (o.offload_optimizer && o.offload_activations) return "--offload optimizer,activations";
  return o.offload_optimizer ? "--offload optimizer" : "--offload activations";
}

// The changes planned_fixes tries, each with its flags. Plans (and may throw) to choose k for
// --checkpoint-blocks 1-k: the fewest first blocks that fit the limit the run had, else half of them.
std::vector<std::pair<std::string, TrainOptions>> fix_candidates(const TrainOptions& failing, const PlanShape& shape) {
  std::vector<std::pair<std::string, TrainOptions>> changes;
  for (const std::int64_t parts : {2, 4}) {
    if (failing.batch_size % parts != 0 || failing.batch_size / parts < 2) continue;
    TrainOptions o = failing;
    o.batch_size /= parts;
    o.accum *= parts;
    changes.emplace_back("--batch-size " + std::to_string(o.batch_size) + " --accum " + std::to_string(o.accum), o);
  }
  if (!given_blocks(failing).is_all()) {
    const std::int64_t n = block_count(failing);
    const std::optional<std::int64_t> k =
        failing.memory_limit ? smallest_checkpoint_prefix(failing, static_cast<std::int64_t>(*failing.memory_limit), shape)
                             : std::optional<std::int64_t>((n + 1) / 2);
    if (k && *k < n && models::BlockSelection::first(*k) != given_blocks(failing))
      changes.emplace_back("--checkpoint-blocks " + models::BlockSelection::first(*k).str(),
                           with_blocks(failing, models::BlockSelection::first(*k)));
    changes.emplace_back(failing.checkpoint_blocks.empty() ? "--checkpoint-activations" : "--checkpoint-blocks all",
                         with_blocks(failing, models::BlockSelection::all()));
  }
  if (failing.amp != DType::bf16) {
    TrainOptions o = failing;
    o.amp = DType::bf16;
    changes.emplace_back("--amp bf16", o);
  }
  if (failing.optimizer == OptimizerKind::adamw && failing.zero == 0)  // ZeRO shards sgd's and adamw's state only
    for (const OptimizerKind smaller : {OptimizerKind::adamw8bit, OptimizerKind::adafactor}) {
      TrainOptions o = failing;
      o.optimizer = smaller;
      changes.emplace_back("--optimizer " + optimizer_name(smaller), o);
    }
  if (!failing.offload_optimizer && !failing.optimizer_in_backward && failing.zero == 0 && has_state(failing)) {
    TrainOptions o = failing;
    o.offload_optimizer = true;
    changes.emplace_back(offload_flag(o), o);
  }
  if (!failing.offload_activations && failing.saving.compress == nn::SavedCompression::none) {
    TrainOptions o = failing;
    o.offload_activations = true;
    changes.emplace_back(offload_flag(o), o);
  }
  for (const int stage : zero_candidates(failing)) {
    TrainOptions o = failing;
    o.zero = stage;
    changes.emplace_back("--zero " + std::to_string(stage), o);
  }
  if (!failing.optimizer_in_backward && !failing.offload_optimizer && failing.accum == 1 && failing.amp != DType::f16 &&
      !failing.ddp) {
    TrainOptions o = failing;
    o.optimizer_in_backward = true;
    changes.emplace_back("--optimizer-in-backward", o);
  }
  if (!failing.saving.bn_from_output) {
    TrainOptions o = failing;
    o.saving.bn_from_output = true;
    changes.emplace_back("--bn-from-output", o);
  }
  if (failing.saving.compress == nn::SavedCompression::none && !failing.offload_activations) {
    TrainOptions o = failing;
    o.saving = {.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::bf16};
    changes.emplace_back("--bn-from-output --bit-masks --compress-activations bf16", o);
  }
  return changes;
}

// The allocator's other policies (FRUGAL_ALLOC_CONF, core/caching_allocator.h), each with its
// setting: expandable segments the other way, and blocks of 32 MiB or more kept whole (max_split
// must be above kLargeBuffer, 20 MiB) when every block is split today. What fragmentation calls for; replayed, never guessed.
constexpr std::size_t kSmallestMaxSplit = std::size_t{32} << 20;  // the next whole step above kLargeBuffer's 20 MiB

std::vector<std::pair<std::string, ReplayOptions>> policy_candidates(const ReplayOptions& current) {
  std::vector<std::pair<std::string, ReplayOptions>> policies;
  ReplayOptions flipped = current;
  flipped.expandable = !current.expandable;
  policies.emplace_back(std::string("expandable:") + (flipped.expandable ? "on" : "off"), flipped);
  if (current.max_split == kUnlimited) {
    for (const bool expandable : {current.expandable, !current.expandable}) {
      ReplayOptions whole = current;
      whole.expandable = expandable;
      whole.max_split = kSmallestMaxSplit;
      policies.emplace_back(std::string("expandable:") + (expandable ? "on" : "off") + ",max_split:32MiB", whole);
    }
  }
  return policies;
}

}  // namespace

std::vector<MemoryFix> planned_fixes(const TrainOptions& failing, const PlanShape& shape) {
  std::vector<MemoryFix> fixes;
  try {
    const MemoryPlan plan = plan_memory(failing, shape);
    const std::int64_t needed = plan.device_needed_bytes;
    // Fragmentation: the same requests under another allocator policy.
    std::int64_t best = needed;  // a setting is listed only when it needs less than every simpler one before it
    for (const auto& [setting, policy] : policy_candidates(replay_policy(CachingOptions::from_environment()))) {
      const std::int64_t device = smallest_device(*plan.requests, policy) + loader_allowance(failing.workers);
      if (device >= best) continue;
      best = device;
      fixes.push_back({"FRUGAL_ALLOC_CONF=" + setting + " (less fragmentation, the same numbers): needs a device of " +
                           format_size(static_cast<std::size_t>(device)) + " instead of " +
                           format_size(static_cast<std::size_t>(needed)),
                       static_cast<std::size_t>(needed - device), false});
    }
    for (const auto& [flags, o] : fix_candidates(failing, shape)) {
      const std::int64_t device = plan_memory(o, shape).device_needed_bytes;
      if (device < needed)
        fixes.push_back({flags + ": needs a device of " + format_size(static_cast<std::size_t>(device)) + " instead of " +
                             format_size(static_cast<std::size_t>(needed)),
                         static_cast<std::size_t>(needed - device), false});
    }
  } catch (const Error&) {
    return {};  // a configuration the planner cannot run: no predictions rather than a second error
  }
  std::stable_sort(fixes.begin(), fixes.end(), [](const MemoryFix& a, const MemoryFix& b) { return a.bytes > b.bytes; });
  return fixes;
}

}  // namespace frugal::train
