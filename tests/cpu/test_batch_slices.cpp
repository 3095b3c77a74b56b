// for_each_batch_slice (nn/batch_slices.h): every sample in exactly one slice, slices cut at
// multiples of the slice; each slice runs under the calling thread's modes (grad mode, autocast,
// activation saving, memory tag and context, default device) whichever thread runs it, with one
// OpenMP thread for its own kernels; an exception from a slice reaches the caller; the caller's
// thread count is left as it was. Then the model that uses it: MobileNetV2's eval forward on slices
// gives the bits of the whole batch on one thread (tests/cpu/test_thread_determinism.cpp holds the
// thread counts to it; here the slices are forced at sizes the thread count alone would not choose).
#include <doctest/doctest.h>
#include <omp.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/random.h"
#include "models/mobilenet_v2.h"
#include "nn/batch_slices.h"

using namespace frugal;

namespace {

// Runs `body` with OpenMP's thread count set to `threads`, restoring it after.
template <typename Body>
void with_threads(int threads, Body&& body) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  body();
  omp_set_num_threads(saved);
}

}  // namespace

TEST_CASE("for_each_batch_slice: consecutive slices cover the batch once, the last one shorter") {
  for (const int threads : {1, 2, 3}) {
    with_threads(threads, [] {
      std::mutex mutex;
      std::set<std::pair<std::int64_t, std::int64_t>> seen;
      nn::for_each_batch_slice(10, 4, [&](std::int64_t first, std::int64_t count) {
        const std::lock_guard lock(mutex);
        seen.insert({first, count});
      });
      CHECK(seen == std::set<std::pair<std::int64_t, std::int64_t>>{{0, 4}, {4, 4}, {8, 2}});
    });
  }
  int calls = 0;
  nn::for_each_batch_slice(0, 4, [&](std::int64_t, std::int64_t) { ++calls; });
  CHECK(calls == 0);
  CHECK_THROWS_AS(nn::for_each_batch_slice(4, 0, [](std::int64_t, std::int64_t) {}), ValueError);
  CHECK_THROWS_AS(nn::for_each_batch_slice(-1, 1, [](std::int64_t, std::int64_t) {}), ValueError);
}

TEST_CASE("for_each_batch_slice: each slice runs under the caller's modes, one OpenMP thread inside") {
  with_threads(2, [] {
    const autograd::NoGradGuard no_grad;
    const nn::AutocastGuard autocast(DType::bf16);
    const nn::ActivationSavingGuard saving({.bn_from_output = true});
    const MemoryTagScope tag(MemoryTag::activation);
    const MemoryContextScope context("slices under test");
    const DefaultDeviceScope device(Device::meta());
    std::mutex mutex;
    std::vector<nn::ThreadModes> modes;
    std::vector<int> inner_threads;
    std::set<int> threads_used;
    nn::for_each_batch_slice(8, 2, [&](std::int64_t, std::int64_t) {
      const std::lock_guard lock(mutex);
      modes.push_back(nn::ThreadModes::current());
      inner_threads.push_back(omp_get_max_threads());
      threads_used.insert(omp_get_thread_num());
    });
    REQUIRE(modes.size() == 4);
    CHECK(threads_used.size() == 2);  // both threads took slices
    for (const nn::ThreadModes& m : modes) {
      CHECK_FALSE(m.grad_mode);
      CHECK(m.autocast == DType::bf16);
      CHECK(m.saving.bn_from_output);
      CHECK(m.tag == MemoryTag::activation);
      CHECK(memory_context_label(m.context) == "slices under test");
      CHECK(m.default_device == Device::meta());
    }
    CHECK(inner_threads == std::vector<int>(4, 1));
    CHECK(omp_get_max_threads() == 2);  // the caller's count is untouched
  });
  // ... and the modes were the slice threads' only while their slice ran.
  CHECK(nn::ThreadModes::current().grad_mode);
  CHECK(current_memory_tag() == MemoryTag::other);
}

TEST_CASE("for_each_batch_slice: a slice's exception reaches the caller after every slice ran") {
  with_threads(2, [] {
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(nn::for_each_batch_slice(6, 2,
                                                  [&](std::int64_t first, std::int64_t) {
                                                    ++ran;
                                                    if (first == 2) throw std::runtime_error("slice at 2 failed");
                                                  }),
                         "slice at 2 failed", std::runtime_error);
    CHECK(ran.load() == 3);
  });
}

TEST_CASE("MobileNetV2's eval forward on slices: the bits of the whole batch, both stems") {
  for (const bool cifar : {false, true}) {
    CAPTURE(cifar);
    Generator generator(5);
    models::MobileNetV2 model({.num_classes = 10, .width_mult = 0.5, .in_channels = 1, .cifar_stem = cifar,
                               .generator = &generator});
    model.eval();
    const Tensor x = uniform({12, 1, 32, 32}, -1.0, 1.0, {}, &generator);
    const autograd::NoGradGuard no_grad;
    std::vector<float> whole;
    with_threads(1, [&] {
      CHECK(model.inference_slice(x) == 0);
      whole = model(x).to_vector<float>();
    });
    for (const int threads : {2, 3, 4}) {  // slices of 6, 4 and 3: the standard stem's 4-sample GEMMs stop a slice of 6 and 3 sooner
      with_threads(threads, [&] {
        CAPTURE(threads);
        CHECK(model.inference_slice(x) == (12 + threads - 1) / threads);
        CHECK(model(x).to_vector<float>() == whole);
      });
    }
    model.train();  // BatchNorm on batch statistics: never on slices
    with_threads(2, [&] { CHECK(model.inference_slice(x) == 0); });
  }
}
