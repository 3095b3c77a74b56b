// The MobileNetV2 training trace recorded from the model (train/training_trace.h): the repeated
// steps equal steps trained for real, the load allocates exactly the state dict, a replay ends with
// only parameters and momentum alive, the text is deterministic, and replays of it are too. Small
// sizes (32x32 images, batches of 4 to 8) keep each recording well under a second.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "memory/alloc_trace.h"
#include "models/registry.h"
#include "train/training_trace.h"

using namespace frugal;
using train::TrainingTraceOptions;

namespace {

constexpr int kClasses = 10;

TrainingTraceOptions small(int batch, int steps) {
  return {.batch_size = batch, .steps = steps, .resolution = 32, .num_classes = kClasses};
}

// What MobileNetV2 holds at rest: its state dict (parameters and buffers), and its learnable values.
struct ModelBytes {
  std::size_t state = 0, parameters = 0;
  std::size_t tensors = 0;  // state-dict entries and parameters: the tensors left at the end of training
};
ModelBytes model_bytes() {
  const auto model = models::make_model("mobilenet_v2", {.num_classes = kClasses});
  ModelBytes bytes;
  for (const auto& [name, tensor] : model->state_dict()) bytes.state += tensor.nbytes();
  for (const Tensor& parameter : model->parameters()) bytes.parameters += parameter.nbytes();
  bytes.tensors = model->state_dict().size() + model->parameters().size();
  return bytes;
}

// The 1-based line of the first line of `text` that starts with `prefix`.
std::size_t line_of(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number)
    if (line.rfind(prefix, 0) == 0) return number;
  FAIL("no line starts with '" << prefix << "'");
  return 0;
}

}  // namespace

TEST_CASE("the batch cycles 8/8, 6/8, 7/8, 5/8 of batch_size, never below 1, and stays put without vary_batch") {
  TrainingTraceOptions options = small(8, 8);
  constexpr int kBatches[] = {8, 6, 7, 5, 8, 6, 7, 5};
  for (int step = 0; step < 8; ++step) CHECK(train::training_batch_for_step(options, step) == kBatches[step]);
  options.batch_size = 1;
  CHECK(train::training_batch_for_step(options, 3) == 1);
  options.vary_batch = false;
  options.batch_size = 8;
  CHECK(train::training_batch_for_step(options, 3) == 8);
}

TEST_CASE("repeated steps equal steps trained for real, event for event") {
  // Batch 4 cycles 4, 3, 3, 2: steps 0 to 4 are trained (step 4 is the first later step of batch 4),
  // steps 5 to 7 repeat steps 1, 1 and 3.
  TrainingTraceOptions options = small(4, 8);
  const std::string built = train::record_training_trace(options);
  options.record_every_step = true;
  const std::string trained = train::record_training_trace(options);
  CHECK(built.find("# step 5: batch 3 (step 1 repeated)") != std::string::npos);
  CHECK(built.find("# step 7: batch 2 (step 3 repeated)") != std::string::npos);
  CHECK(trained.find("repeated") == std::string::npos);
  const Trace a = parse_trace_text(built, "built"), b = parse_trace_text(trained, "trained");
  REQUIRE(a.events.size() == b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent &x = a.events[i], &y = b.events[i];
    INFO("event ", i, " at line ", x.line, " of the built trace");
    REQUIRE(x.is_alloc == y.is_alloc);
    REQUIRE(x.slot == y.slot);  // the same slots: the same allocation freed by each free
    REQUIRE(x.bytes == y.bytes);
    REQUIRE(x.tag == y.tag);
    REQUIRE(x.stream == y.stream);
  }
}

TEST_CASE("the load allocates exactly the state dict under tag param, and nothing else does") {
  const std::string text = train::record_training_trace(small(4, 2));
  const std::size_t step0 = line_of(text, "# step 0");
  std::size_t at_load = 0, later = 0;
  for (const TraceEvent& e : parse_trace_text(text, "training").events)
    if (e.is_alloc && e.tag == MemoryTag::param) (e.line < step0 ? at_load : later) += e.bytes;
  CHECK(at_load == model_bytes().state);
  CHECK(later == 0);
}

TEST_CASE("a replay ends with parameters, buffers and momentum alive, and every tag of training appears") {
  const Trace trace = parse_trace_text(train::record_training_trace(small(8, 4)), "training");
  const ReplayResult r = replay(trace);
  CHECK(!r.oom);
  CHECK(r.events == trace.events.size());
  // zero_grad() frees the gradients: what stays is the state dict and one momentum buffer per
  // parameter, each rounded up to the allocator's blocks (kMinBlockSize), so bounded rather than equated.
  const ModelBytes bytes = model_bytes();
  CHECK(r.final_allocated_bytes >= bytes.state + bytes.parameters);
  CHECK(r.final_allocated_bytes <= bytes.state + bytes.parameters + bytes.tensors * kMinBlockSize);
  CHECK(r.peak_live_bytes > bytes.state + 2 * bytes.parameters);  // gradients and activations on top
  CHECK(r.peak_allocated_bytes >= r.peak_live_bytes);
  CHECK(r.peak_reserved_bytes >= r.peak_allocated_bytes);
  const MemoryTag tags[] = {MemoryTag::param, MemoryTag::grad, MemoryTag::optimizer, MemoryTag::activation, MemoryTag::data};
  for (MemoryTag tag : tags) {
    bool seen = false;
    for (const TraceEvent& event : trace.events) seen = seen || (event.is_alloc && event.tag == tag);
    CHECK_MESSAGE(seen, memory_tag_name(tag));
  }
}

TEST_CASE("recording is deterministic and leaves the CPU's allocator as it found it") {
  Allocator& before = allocator_for(Device::cpu());
  const std::string first = train::record_training_trace(small(4, 3));
  CHECK(&allocator_for(Device::cpu()) == &before);
  CHECK(first == train::record_training_trace(small(4, 3)));
  CHECK_THROWS_AS(train::record_training_trace(small(0, 3)), ValueError);
  CHECK_THROWS_AS(train::record_training_trace(small(4, 0)), ValueError);
  // Thrown by the training itself, with the recording allocator installed: at 32x32 the last
  // BatchNorm sees one value per channel in a batch of 1.
  CHECK_THROWS_AS(train::record_training_trace(small(1, 1)), ValueError);
  CHECK(&allocator_for(Device::cpu()) == &before);
}

TEST_CASE("replays of the training trace are deterministic: the same figures every time, timing aside") {
  const Trace trace = parse_trace_text(train::record_training_trace(small(4, 4)), "training");
  for (const bool expandable : {false, true}) {
    ReplayOptions options;
    options.expandable = expandable;
    auto first = to_json(replay(trace, options)), second = to_json(replay(trace, options));
    first.erase("ns_per_op");
    second.erase("ns_per_op");
    CHECK(first == second);
  }
}

TEST_CASE("the training trace replayed and written again by CachingAllocator::write_trace replays to the same figures") {
  const Trace original = parse_trace_text(train::record_training_trace(small(4, 2)), "training");
  CachingAllocator allocator(std::make_unique<SimulatedBacking>(), caching_options({}));
  allocator.record_history(10 * original.events.size());  // room for segment events too
  auto first = to_json(replay_on(allocator, original));
  std::ostringstream written;
  allocator.write_trace(written);  // includes the frees replay_on makes at the end
  auto second = to_json(replay(parse_trace_text(written.str(), "written")));
  for (const char* varies : {"ns_per_op", "events", "final_allocated_bytes", "final_reserved_bytes"}) {
    first.erase(varies);
    second.erase(varies);
  }
  CHECK(first == second);
}
