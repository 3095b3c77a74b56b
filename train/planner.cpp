// plan_memory (see planner.h). Read top to bottom: marking phases and layers while the run goes on
// the meta device, the run itself, then reading the allocator's record back into a plan.
#include "train/planner.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "core/allocator_registry.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/random.h"
#include "data/loader.h"
#include "models/registry.h"
#include "nn/amp.h"
#include "dist/mirror_communicator.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "train/trainer.h"

namespace frugal::train {

namespace {

// Room for every event of two steps of a large model (ResNet-50 at batch 256 records about 40 000).
constexpr std::size_t kMaxEvents = std::size_t{1} << 22;
constexpr int kPlannedSteps = 2;  // the first makes the optimizer's state; the second is every later step

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

// The model's leaf modules as plan rows (names, types, parameter bytes), and a look-up from module to row.
std::vector<LayerPlan> leaf_layers(const nn::Module& model, const TrainOptions& o,
                                   std::unordered_map<const nn::Module*, int>& index) {
  const std::int64_t state_copies = o.optimizer == OptimizerKind::adamw ? 2 : (o.momentum > 0 ? 1 : 0);
  std::vector<LayerPlan> layers;
  for (const auto& [name, module] : model.named_modules()) {
    if (!module->named_children().empty()) continue;
    LayerPlan layer{.name = name, .type = module->type_name()};
    for (const Tensor& p : module->parameters()) layer.param_bytes += static_cast<std::int64_t>(p.nbytes());
    layer.grad_bytes = layer.param_bytes;  // gradients have their parameters' shapes and dtypes
    layer.optimizer_bytes = layer.param_bytes * state_copies;
    index[module] = static_cast<int>(layers.size());
    layers.push_back(std::move(layer));
  }
  return layers;
}

// ---- the run on the meta device ---------------------------------------------------------------------

struct Recorded {
  std::vector<LayerPlan> layers;
  std::vector<Mark> marks;
  std::vector<AllocEvent> events;
  std::int64_t baseline = 0;  // allocated on the meta device before the plan began
  std::int64_t data_bytes = 0;
};

// Forward, loss and backward of one micro-batch, as train/trainer.cpp's optimizer_step runs them.
// `record_layers`: mark this forward's layer calls (not the recomputations in backward).
void micro_batch(nn::Module& model, const TrainOptions& o, const Tensor& images, const Tensor& labels,
                 std::vector<Mark>& marks, const CachingAllocator& meta, LayerMarks& layer_marks, bool record_layers,
                 dist::DistributedDataParallel* ddp, bool last) {
  marks.push_back({meta.history_size(), Mark::Kind::phase, kForward});
  layer_marks.recording = record_layers;
  const nn::ActivationSavingGuard saving(o.saving);  // as the trainer's step: forward and backward
  Tensor loss;
  {
    std::optional<nn::AutocastGuard> autocast;
    if (o.amp) autocast.emplace(*o.amp);
    const Tensor logits = model(images);
    loss = functional::cross_entropy(logits, labels, {.label_smoothing = o.label_smoothing});
  }
  layer_marks.recording = false;
  marks.push_back({meta.history_size(), Mark::Kind::phase, kBackward});
  if (ddp) ddp->set_sync(last);  // the buckets are filled during the step's last backward
  autograd::backward(functional::mul(loss, 1.0 / static_cast<double>(o.accum)));
}

Recorded run_on_meta(const TrainOptions& o, const PlanShape& shape) {
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
  // With --ddp: the buckets and ZeRO-1's shards of `ranks` ranks, over a simulated world whose
  // collectives move nothing (dist/mirror_communicator.h): what one rank holds.
  std::optional<dist::MirrorCommunicator> world;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (o.ddp) {
    world.emplace(o.ranks);
    ddp = std::make_unique<dist::DistributedDataParallel>(*model, *world, ddp_options(o));
  }
  const std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(*model, ddp.get(), o);

  std::vector<Tensor> batches;  // images and labels of every batch the loader holds at once
  {
    MemoryTagScope tag(MemoryTag::data);
    for (std::int64_t b = 0; b < loader_batches_alive(o.workers); ++b) {
      batches.push_back(empty({o.batch_size, shape.in_channels, o.image_size, o.image_size}, {.device = Device::meta()}));
      batches.push_back(empty({o.batch_size}, {.dtype = DType::i64, .device = Device::meta()}));
    }
  }
  for (const Tensor& t : batches) r.data_bytes += static_cast<std::int64_t>(t.nbytes());

  LayerMarks layer_marks(meta, r.marks, leaves);
  nn::ModuleCallObserverScope observing(layer_marks);
  for (int step = 0; step < kPlannedSteps; ++step) {
    for (std::int64_t m = 0; m < o.accum; ++m)  // the layers of one forward of the steady step are recorded
      micro_batch(*model, o, batches[0], batches[1], r.marks, meta, layer_marks, step == kPlannedSteps - 1 && m == 0,
                  ddp.get(), m == o.accum - 1);
    r.marks.push_back({meta.history_size(), Mark::Kind::phase, kOptimizer});
    if (ddp) ddp->synchronize();
    optimizer->step();
    optimizer->zero_grad();
  }
  r.events = meta.history();
  meta.record_history(0);
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

}  // namespace

std::int64_t loader_batches_alive(int workers) {
  return static_cast<std::int64_t>(workers) * data::LoaderOptions{}.prefetch + 1;
}

MemoryPlan plan_memory(const TrainOptions& o, const PlanShape& shape) {
  FRUGAL_CHECK_VALUE(o.batch_size >= 1 && o.accum >= 1 && o.image_size >= 1 && o.workers >= 0,
                     "plan_memory: batch size, accumulation and image size must be positive, workers not negative");
  FRUGAL_CHECK_VALUE(shape.in_channels >= 1 && shape.num_classes >= 1, "plan_memory: the input needs a channel and a class");
  return read_plan(run_on_meta(o, shape));
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

// BatchNorm from its output rebuilds each saved feature map once in backward, an elementwise pass
// where recomputing a block reruns its convolutions: priced as recomputing this fraction of the
// blocks. Measured on MobileNetV2 (2 CPU cores): a step 0-11% slower (`frugal bench saving`), where
// recomputing every block costs about 20-30% (samples/09_checkpointing).
constexpr double kRebuildCost = 0.3;

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

bool changes_numbers(const BudgetOption& b) { return b.bf16 || b.saving.compress != nn::SavedCompression::none; }
double speed_cost(const BudgetOption& b) { return b.recomputed + (b.saving.bn_from_output ? kRebuildCost : 0.0); }

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
  if (b.bf16 && given.amp != DType::bf16) add("bf16 autocast (changes the numbers)");
  if (b.saving.str() != given.saving.str()) {
    if (b.saving.bn_from_output && !given.saving.bn_from_output) add("BatchNorm from its output (rebuilt in backward)");
    if (b.saving.compress != given.saving.compress)
      add("saved feature maps in " + std::string(nn::saved_compression_name(b.saving.compress)) + " (changes the numbers)");
  }
  return words.empty() ? "as given" : words;
}

// Cheapest first: accumulation only costs speed; recomputation costs about the fraction of the
// blocks recomputed of one more forward; bf16 changes the numbers.
bool cheaper(const BudgetOption& a, const BudgetOption& b) {
  if (changes_numbers(a) != changes_numbers(b)) return changes_numbers(b);
  if (speed_cost(a) != speed_cost(b)) return speed_cost(a) < speed_cost(b);
  return a.accum < b.accum;
}

}  // namespace

std::vector<BudgetOption> fit_budget(const TrainOptions& options, std::int64_t budget_bytes, const PlanShape& shape) {
  FRUGAL_CHECK_VALUE(budget_bytes > 0, "plan_memory: the budget must be positive");
  const std::int64_t samples = options.batch_size * options.accum;
  const std::int64_t blocks = block_count(options);
  std::vector<BudgetOption> found;
  for (const bool bf16 : {options.amp == DType::bf16, true}) {
    for (const models::BlockSelection& checkpoint : checkpoint_candidates(options)) {
      for (const nn::ActivationSaving& saving : saving_candidates(options)) {
        // Other savings with the blocks as given only: each is an alternative to recomputing.
        if (saving.str() != options.saving.str() && checkpoint != given_blocks(options)) continue;
        for (std::int64_t accum = 1; accum <= samples && samples / accum >= 2; accum *= 2) {
          if (samples % accum != 0) continue;
          BudgetOption b{.batch_size = samples / accum,
                         .accum = accum,
                         .checkpoint_blocks = checkpoint,
                         .recomputed = static_cast<double>(checkpoint.count(blocks)) / static_cast<double>(blocks),
                         .bf16 = bf16,
                         .saving = saving};
          const bool duplicate = std::any_of(found.begin(), found.end(), [&b](const BudgetOption& f) {
            return f.batch_size == b.batch_size && f.checkpoint_blocks == b.checkpoint_blocks && f.bf16 == b.bf16 &&
                   f.saving.str() == b.saving.str();
          });
          if (duplicate) continue;
          TrainOptions o = with_blocks(options, checkpoint);
          o.batch_size = b.batch_size;
          o.accum = b.accum;
          o.saving = saving;
          if (bf16) o.amp = DType::bf16;
          b.peak_bytes = plan_memory(o, shape).peak_bytes;
          b.fits = b.peak_bytes <= budget_bytes;
          b.cost = cost_words(b, options);
          found.push_back(std::move(b));
        }
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const BudgetOption& a, const BudgetOption& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.peak_bytes < b.peak_bytes;
    return cheaper(a, b);
  });
  return found;
}

std::optional<std::int64_t> smallest_checkpoint_prefix(const TrainOptions& options, std::int64_t limit_bytes,
                                                       const PlanShape& shape) {
  const auto fits = [&](std::int64_t k) {
    return plan_memory(with_blocks(options, models::BlockSelection::first(k)), shape).peak_reserved_bytes <= limit_bytes;
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
  if (!failing.saving.bn_from_output) {
    TrainOptions o = failing;
    o.saving.bn_from_output = true;
    changes.emplace_back("--bn-from-output", o);
  }
  if (failing.saving.compress == nn::SavedCompression::none) {
    TrainOptions o = failing;
    o.saving = {.bn_from_output = true, .bit_masks = true, .compress = nn::SavedCompression::bf16};
    changes.emplace_back("--bn-from-output --bit-masks --compress-activations bf16", o);
  }
  return changes;
}

}  // namespace

std::vector<MemoryFix> planned_fixes(const TrainOptions& failing, const PlanShape& shape) {
  std::vector<MemoryFix> fixes;
  try {
    const std::int64_t needed = plan_memory(failing, shape).peak_bytes;
    for (const auto& [flags, o] : fix_candidates(failing, shape)) {
      const std::int64_t peak = plan_memory(o, shape).peak_bytes;
      if (peak < needed)
        fixes.push_back({flags + ": needs " + format_size(static_cast<std::size_t>(peak)) + " instead of " +
                             format_size(static_cast<std::size_t>(needed)),
                         static_cast<std::size_t>(needed - peak), false});
    }
  } catch (const Error&) {
    return {};  // a configuration the planner cannot run: no predictions rather than a second error
  }
  std::stable_sort(fixes.begin(), fixes.end(), [](const MemoryFix& a, const MemoryFix& b) { return a.bytes > b.bytes; });
  return fixes;
}

}  // namespace frugal::train
