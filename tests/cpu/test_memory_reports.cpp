// Where memory was made, and the reports that use it: allocation contexts interned and recorded on
// every live block (caching and direct mode), layers naming their allocations through a module call
// observer, the leak check on small training loops with and without a deliberate leak, and the OOM
// explanation's ledger against the allocator's own statistics.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/random.h"
#include "core/tensor.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "train/leak_check.h"
#include "train/memory_context.h"
#include "train/oom_explainer.h"

using namespace frugal;

namespace {
constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

std::unique_ptr<CachingAllocator> simulated(bool bypass, bool expandable = false, std::size_t capacity = kUnlimited) {
  auto backing = std::make_unique<SimulatedBacking>();
  backing->set_capacity(capacity);
  CachingOptions options;
  options.bypass = bypass;
  options.expandable_segments = expandable;
  return std::make_unique<CachingAllocator>(std::move(backing), options);
}

const LiveBlock& live_block_at(const LiveBlocks& live, const DataPtr& ptr) {
  const auto found = std::find_if(live.blocks.begin(), live.blocks.end(), [&](const LiveBlock& b) {
    return b.address == reinterpret_cast<std::uintptr_t>(ptr.get());
  });
  REQUIRE(found != live.blocks.end());
  return *found;
}

// Conv -> ReLU -> Flatten -> Linear over [8, 1, 6, 6] images, three classes.
std::shared_ptr<nn::Sequential> tiny_cnn() {
  Generator generator(3);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, 1, true, &generator));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(4 * 6 * 6, 3, true, &generator));
  return net;
}

enum class Keep { nothing, trained_loss, monitoring_loss };

// Five SGD steps of tiny_cnn with the trainer's layer contexts and leak check on the CPU's default
// allocator. `keep` is the deliberate leak: each step's trained loss kept after its backward (which
// freed what its graph saved), or a loss computed on a probe batch with autograd on and never
// backpropagated (its graph keeps every activation it saved), kept in a vector as a log would.
std::optional<train::LeakReport> train_tiny(Keep keep) {
  auto net = tiny_cnn();
  Generator generator(5);
  const Tensor images = uniform({8, 1, 6, 6}, -1.0, 1.0, {}, &generator);
  const Tensor labels = from_vector(std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
  nn::SGD optimizer(net->parameters(), 0.1, /*momentum=*/0.9);  // momentum buffers: made by step 1, kept
  train::LayerMemoryContexts contexts(*net);
  nn::ModuleCallObserverScope observe(contexts);
  train::LeakCheck check(default_caching_allocator(Device::cpu()));
  std::vector<Tensor> kept;
  std::vector<double> logged;
  std::optional<train::LeakReport> report;
  for (std::int64_t step = 1; step <= 5; ++step) {
    Tensor loss;
    {
      const Tensor logits = (*net)(images);
      const MemoryContextScope made_by("loss");
      loss = functional::cross_entropy(logits, labels);
    }
    autograd::backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    logged.push_back(loss.item<double>());  // what a log should keep: a number
    if (keep == Keep::trained_loss) kept.push_back(loss);
    if (keep == Keep::monitoring_loss) {
      const MemoryContextScope made_by("loss");
      kept.push_back(functional::cross_entropy((*net)(images), labels));
    }
    if (auto found = check.after_step(step)) {
      CHECK_FALSE(report.has_value());  // reported once
      report = found;
    }
  }
  CHECK(check.report().has_value() == report.has_value());
  return report;
}

std::set<std::string> makers(const train::LeakReport& report) {
  std::set<std::string> names;
  for (const train::LiveTensor& t : report.survivors) names.insert(t.made_by);
  return names;
}
}  // namespace

TEST_CASE("memory contexts: a label is interned once, and its id reads back as the label") {
  const MemoryContextId conv = intern_memory_context("test.features.3.conv.1 (Conv2d)");
  CHECK(conv != kNoMemoryContext);
  CHECK(intern_memory_context("test.features.3.conv.1 (Conv2d)") == conv);
  const MemoryContextId other = intern_memory_context("test.features.4 (InvertedResidual)");
  CHECK(other != conv);
  CHECK(memory_context_label(conv) == "test.features.3.conv.1 (Conv2d)");
  CHECK(memory_context_label(other) == "test.features.4 (InvertedResidual)");
  CHECK(memory_context_label(kNoMemoryContext).empty());
  CHECK_THROWS_AS(memory_context_label(other + 100000), ValueError);
  CHECK_THROWS_AS(intern_memory_context(""), ValueError);  // "" is the label of no context
}

TEST_CASE("memory contexts: scopes nest and restore, per thread") {
  const MemoryContextId outside = current_memory_context();
  {
    const MemoryContextScope block("test.block");
    CHECK(memory_context_label(current_memory_context()) == "test.block");
    {
      const MemoryContextScope layer(intern_memory_context("test.block.conv"));
      CHECK(memory_context_label(current_memory_context()) == "test.block.conv");
    }
    CHECK(memory_context_label(current_memory_context()) == "test.block");
  }
  CHECK(current_memory_context() == outside);
}

TEST_CASE("memory contexts: every live block records its tag, context and number, in caching and direct mode") {
  for (const bool bypass : {false, true}) {
    CAPTURE(bypass);
    auto a = simulated(bypass);
    DataPtr plain = a->allocate(3000);
    DataPtr made_by_conv;
    {
      const MemoryContextScope context("test.conv (Conv2d)");
      const MemoryTagScope tag(MemoryTag::activation);
      made_by_conv = a->allocate(5000);
    }
    const LiveBlocks live = a->live_blocks();
    REQUIRE(live.blocks.size() == 2);
    const LiveBlock& first = live_block_at(live, plain);
    const LiveBlock& second = live_block_at(live, made_by_conv);
    CHECK(first.context == kNoMemoryContext);
    CHECK(memory_context_label(second.context) == "test.conv (Conv2d)");
    CHECK(second.tag == MemoryTag::activation);
    CHECK(second.requested == 5000);
    CHECK(second.size == (bypass ? 5000 : 5120));  // direct mode does not round
    CHECK(second.serial == first.serial + 1);
    CHECK(a->last_serial() == second.serial);
    CHECK(live.allocated == first.size + second.size);
    // The snapshot names it too.
    const auto snapshot = a->snapshot();
    bool found = false;
    for (const auto& segment : snapshot["segments"])
      for (const auto& block : segment["blocks"]) found = found || block["context"] == "test.conv (Conv2d)";
    CHECK(found);
    a->check_invariants();
  }
}

TEST_CASE("layer contexts: a layer's allocations carry its dotted name and class, calls nest and restore") {
  auto net = tiny_cnn();
  auto outer = std::make_shared<nn::Sequential>();
  outer->push_back(net);
  train::LayerMemoryContexts contexts(*outer);
  CachingAllocator& allocator = default_caching_allocator(Device::cpu());
  const std::uint64_t before = allocator.last_serial();
  const Tensor images = zeros({2, 1, 6, 6});
  Tensor logits;
  {
    nn::ModuleCallObserverScope observe(contexts);
    logits = (*outer)(images);
    CHECK(current_memory_context() == kNoMemoryContext);  // every call restored what it found
  }
  std::set<std::string> made;
  for (const LiveBlock& block : allocator.live_blocks().blocks)
    if (block.serial > before) made.insert(train::made_by(block.context));
  CHECK(made.count("0.3 (Linear)") == 1);  // the logits, made by the Linear inside the inner Sequential
  CHECK(train::made_by(kNoMemoryContext) == "outside any layer");
  CHECK(memory_context_label(intern_memory_context("0.0 (Conv2d)")) == "0.0 (Conv2d)");
  CHECK(memory_context_label(intern_memory_context("Sequential")) == "Sequential");  // the root: its class
}

TEST_CASE("leak check: a loop that keeps a never-backpropagated loss per step is named, with the layers that made it") {
  const std::optional<train::LeakReport> report = train_tiny(Keep::monitoring_loss);
  REQUIRE(report.has_value());
  CHECK(report->step == 2);  // the first step compared: the end of step 1 is the measure
  CHECK(report->after > report->before);
  CHECK(report->survivor_count >= 3);
  CHECK(report->survivor_bytes >= report->after - report->before);
  const std::set<std::string> names = makers(*report);
  CAPTURE(train::describe(*report, 20));
  CHECK(names.count("1 (ReLU)") == 1);    // its output, saved for its backward
  CHECK(names.count("3 (Linear)") == 1);  // the logits, saved by cross-entropy
  CHECK(names.count("loss") == 1);
  for (const train::LiveTensor& t : report->survivors) CHECK(t.tag == MemoryTag::activation);
  CHECK(std::is_sorted(report->survivors.begin(), report->survivors.end(), train::larger_first));
  // The largest survivor is the ReLU's output, 8 x 4 x 6 x 6 floats; with the logits (8 x 3) and the
  // kept loss, that is the growth. The other scalar is the step's trained loss, still in scope when
  // the step ends: made during the step and alive, it replaced the previous step's.
  CHECK(report->survivors.front().bytes == 8 * 4 * 6 * 6 * 4);
  CHECK(report->survivors.front().made_by == "1 (ReLU)");
  CHECK(report->after - report->before == (8 * 4 * 6 * 6 + 8 * 3 + 1) * 4);
  CHECK(report->survivor_bytes == report->after - report->before + 4);
  const std::string text = train::describe(*report);
  CHECK(text.find("between the ends of steps 1 and 2") != std::string::npos);
  CHECK(text.find("4.50 KiB  activation  made by 1 (ReLU)") != std::string::npos);
  const auto json = train::to_json(*report);
  CHECK(json["grown_bytes"] == report->after - report->before);
  CHECK(json["survivors"][0]["made_by"] == "1 (ReLU)");
}

TEST_CASE("leak check: a trained loss kept after its backward holds only itself, and is named") {
  // backward freed what the graph saved, so what survives a step is the loss's own scalar.
  const std::optional<train::LeakReport> report = train_tiny(Keep::trained_loss);
  REQUIRE(report.has_value());
  CHECK(report->after - report->before == sizeof(float));
  REQUIRE(report->survivor_count == 1);
  CHECK(report->survivors.front().made_by == "loss");
  CHECK(report->survivors.front().tag == MemoryTag::activation);
}

TEST_CASE("leak check: the same loop keeping numbers reports nothing") {
  CHECK_FALSE(train_tiny(Keep::nothing).has_value());
}

TEST_CASE("OOM explanation: the ledger adds up to the allocator's statistics, and names the largest tensors") {
  // Fixed segments on a 16 MiB device: parameters, an optimizer buffer and activations of two layers
  // in the 2 MiB small segment, with a freed block between live ones (fragmentation), a 10 MiB
  // activation in a segment of its own, then a 5 MiB request, whose 20 MiB segment cannot fit.
  auto a = simulated(/*bypass=*/false, /*expandable=*/false, 16 * MiB);
  train::OomExplainer explainer(*a);
  std::vector<DataPtr> held;
  const auto allocate = [&](MemoryTag tag, const char* maker, std::size_t bytes) {
    const MemoryTagScope scope(tag);
    std::optional<MemoryContextScope> context;
    if (maker) context.emplace(maker);
    held.push_back(a->allocate(bytes));
  };
  allocate(MemoryTag::param, nullptr, 100 * KiB);
  allocate(MemoryTag::activation, "test.block.0 (Conv2d)", 300 * KiB);
  allocate(MemoryTag::activation, "test.block.1 (ReLU)", 200 * KiB);
  allocate(MemoryTag::optimizer, nullptr, 100 * KiB);
  held.erase(held.begin() + 2);  // the ReLU's block: a hole between live blocks
  allocate(MemoryTag::activation, "test.block.0 (Conv2d)", 10 * MiB);
  const CachingStats stats = a->caching_stats();
  const AllocatorStats asked = a->stats();
  train::TrainOptions failing;
  failing.batch_size = 64;
  std::optional<train::OomExplanation> explained;
  try {
    const MemoryTagScope scope(MemoryTag::activation);
    const MemoryContextScope context("test.block.1 (ReLU)");
    try {
      held.push_back(a->allocate(5 * MiB));
    } catch (const OutOfMemoryError& error) {
      explainer.rethrow_explained(error, failing, [](const train::TrainOptions& o) {
        return std::vector<train::MemoryFix>{{"a prediction for batch " + std::to_string(o.batch_size), 1, false}};
      });
    }
  } catch (const train::TrainingOutOfMemoryError& error) {
    explained = error.explanation();
    CHECK(error.message() == error.explanation().allocator.message);
  }
  REQUIRE(explained.has_value());
  const train::OomExplanation& e = *explained;
  const std::size_t tags = std::accumulate(e.tag_bytes.begin(), e.tag_bytes.end(), std::size_t{0});
  CHECK(tags == e.allocated);
  CHECK(e.allocated == static_cast<std::size_t>(stats.allocated_bytes.current));
  CHECK(e.allocated == e.allocator.allocated);
  CHECK(e.fragmentation == static_cast<std::size_t>(stats.inactive_split_bytes.current));
  CHECK(e.fragmentation > 0);
  CHECK(tags + e.cache + e.fragmentation == e.reserved);
  CHECK(e.reserved == e.allocator.reserved);
  for (int t = 0; t < kNumMemoryTags; ++t)
    CHECK(e.tag_requested[static_cast<std::size_t>(t)] == static_cast<std::size_t>(asked.tag_bytes[static_cast<std::size_t>(t)].current));
  CHECK(e.request_tag == MemoryTag::activation);
  CHECK(e.request_made_by == "test.block.1 (ReLU)");
  REQUIRE(e.activation_layers.size() == 1);  // the ReLU's block was freed: the conv's two remain
  CHECK(e.activation_layers[0].made_by == "test.block.0 (Conv2d)");
  CHECK(e.activation_layers[0].bytes == e.tag_bytes[static_cast<std::size_t>(MemoryTag::activation)]);
  REQUIRE(!e.largest.empty());
  CHECK(e.largest[0].bytes == 10 * MiB);
  CHECK(e.largest[0].made_by == "test.block.0 (Conv2d)");
  CHECK(e.largest.back().made_by == "outside any layer");
  // Fixes, largest saving first: half and a quarter of the batch (measured), then the prediction.
  REQUIRE(e.fixes.size() == 3);
  const std::size_t activations = e.tag_bytes[static_cast<std::size_t>(MemoryTag::activation)] + 5 * MiB;
  CHECK(e.fixes[0].bytes == activations * 3 / 4);
  CHECK(e.fixes[0].text.find("--batch-size 16 --accum 4") == 0);
  CHECK(e.fixes[1].bytes == activations / 2);
  CHECK(e.fixes[0].measured);
  CHECK(e.fixes[2].text == "a prediction for batch 64");
  CHECK_FALSE(e.fixes[2].measured);
  const std::string text = train::describe(e);
  CHECK(text.find("the failing request: 5.00 MiB of activation, made by test.block.1 (ReLU)") != std::string::npos);
  CHECK(text.find("largest live tensors:") != std::string::npos);
  CHECK(text.find("(measured): --batch-size 32 --accum 2") != std::string::npos);
  // The small segment's free pieces (the ReLU's hole and what is left of its 2 MiB) are over 5% of
  // the 12 MiB reserved, but less than the 5 MiB request: a shortage, not fragmentation, and not named.
  CHECK(e.fragmentation < 5 * MiB);
  CHECK_FALSE(train::fragmented(e));
  CHECK(text.find("fragmentation is") == std::string::npos);
  a->check_invariants();
}

TEST_CASE("OOM explanation: fragmentation at a large share of what is reserved is named as the cause") {
  train::OomExplanation e;
  e.reserved = 100 * MiB;
  e.fragmentation = 10 * MiB;
  CHECK(train::fragmented(e));
  e.allocator.rounded = 2 * MiB;  // a request the 10 MiB would have held in one piece
  CHECK(train::describe(e).find("  fragmentation is 10% of what is reserved, more than the request: free, but in pieces") !=
        std::string::npos);
  e.allocator.rounded = 12 * MiB;  // more than all the pieces together: a shortage
  CHECK_FALSE(train::fragmented(e));
  e.allocator.rounded = 2 * MiB;
  e.fragmentation = 4 * MiB;  // under kFragmentedShare (5%)
  CHECK_FALSE(train::fragmented(e));
  CHECK(train::describe(e).find("fragmentation is") == std::string::npos);
}

TEST_CASE("OOM explanation: an OOM the explainer did not see is rethrown as it was") {
  auto watched = simulated(false, false, 4 * MiB), other = simulated(false, false, 4 * MiB);
  train::OomExplainer explainer(*watched);
  try {
    try {
      (void)other->allocate(8 * MiB);
    } catch (const OutOfMemoryError& error) {
      explainer.rethrow_explained(error, {}, {});
    }
    FAIL("no exception");
  } catch (const train::TrainingOutOfMemoryError&) {
    FAIL("explained an OOM of another allocator");
  } catch (const OutOfMemoryError& error) {
    CHECK(std::string(error.message()).find("tried to allocate 8.00 MiB") != std::string::npos);
  }
}
