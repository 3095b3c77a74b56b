// for_each_batch_slice (nn/batch_slices.h): every sample in exactly one slice, slices cut at
// multiples of the slice; each slice runs under the calling thread's modes (grad mode, autocast,
// activation saving, memory tag and context, default device) whichever thread runs it, with one
// OpenMP thread for its own kernels, and the threads have their own modes back after; an exception
// from a slice reaches the caller; the caller's thread count is left as it was; each thread's
// slices allocate under a host stream of that thread's own; modes it cannot carry are refused. Then
// the model that uses it: MobileNetV2's eval forward on slices gives the bits of the whole batch on
// one thread, with a short last slice, slices that stop before the 2x2 maps' 64-sample GEMMs and
// one slice per thread from there, slices through every unit, and a round left out when its slices
// would leave threads idle, with the units each round ran (last_sliced_units), and the per-thread
// round refusing units whose GEMMs' bits would depend on the samples (the blocked GEMM)
// (tests/cpu/test_thread_determinism.cpp holds the training step to the same).
#include <doctest/doctest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/random.h"
#include "models/mobilenet_v2.h"
#include "nn/batch_slices.h"
#include "nn/module.h"
#include "tests/cpu/thread_scopes.h"

using namespace frugal;

namespace {

template <typename Body>
void with_threads(int threads, Body&& body) {
  const test::OmpThreadsScope scope(threads);
  body();
}

}  // namespace

TEST_CASE("for_each_batch_slice: consecutive slices cover the batch once, the last one shorter") {
  const autograd::NoGradGuard no_grad;  // slices refuse to record autograd
  for (const int threads : {1, 2, 3}) {
    with_threads(threads, [] {
      std::mutex mutex;
      std::multiset<std::pair<std::int64_t, std::int64_t>> seen;  // a slice run twice shows
      nn::for_each_batch_slice(10, 4, [&](std::int64_t first, std::int64_t count) {
        const std::lock_guard lock(mutex);
        seen.insert({first, count});
      });
      CHECK(seen == std::multiset<std::pair<std::int64_t, std::int64_t>>{{0, 4}, {4, 4}, {8, 2}});
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
    std::map<int, std::set<void*>> streams_by_thread;  // host_allocation_stream() in each slice
    // Threads claim slices as they come (Note [Threads claim pieces of a loop]), so a slice waits (up
    // to a few seconds) until both threads have claimed one: the other thread's must run under the
    // caller's modes too.
    std::atomic<unsigned> arrived{0};
    nn::for_each_batch_slice(8, 2, [&](std::int64_t, std::int64_t) {
      arrived.fetch_or(1u << omp_get_thread_num());
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (arrived.load() != 3u && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      const std::lock_guard lock(mutex);
      modes.push_back(nn::ThreadModes::current());
      inner_threads.push_back(omp_get_max_threads());
      threads_used.insert(omp_get_thread_num());
      streams_by_thread[omp_get_thread_num()].insert(host_allocation_stream().handle);
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
    // Each thread's slices allocate under one stream of that thread's own (Note [A thread's own host
    // blocks] in core/allocator.h), the caller's included.
    REQUIRE(streams_by_thread.size() == 2);
    const std::set<void*> first = streams_by_thread.begin()->second, second = streams_by_thread.rbegin()->second;
    CHECK(first.size() == 1);
    CHECK(second.size() == 1);
    CHECK(*first.begin() != nullptr);
    CHECK(*second.begin() != nullptr);
    CHECK(*first.begin() != *second.begin());
    CHECK(host_allocation_stream() == Stream{});
  });
  // ... and the modes were the slice threads' only while their slice ran: every thread of the team
  // has its own back.
  with_threads(2, [] {
    std::mutex mutex;
    std::vector<nn::ThreadModes> after;
#pragma omp parallel
    {
      const std::lock_guard lock(mutex);
      after.push_back(nn::ThreadModes::current());
    }
    REQUIRE(after.size() == 2);
    for (const nn::ThreadModes& m : after) {
      CHECK(m.grad_mode);
      CHECK_FALSE(m.autocast.has_value());
      CHECK_FALSE(m.saving.bn_from_output);
      CHECK(m.tag == MemoryTag::other);
      CHECK(m.context == kNoMemoryContext);
      CHECK(m.default_device == Device::cpu());
    }
  });
  with_threads(2, [] {
    std::atomic<int> shared{0};
#pragma omp parallel
    if (host_allocation_stream() == Stream{}) shared.fetch_add(1);
    CHECK(shared.load() == 2);
  });
}

TEST_CASE("for_each_batch_slice: refuses the modes it cannot carry to other threads") {
  const auto nothing = [](std::int64_t, std::int64_t) {};
  CHECK_THROWS_AS(nn::for_each_batch_slice(4, 2, nothing), ValueError);  // grad mode on: autograd is one thread's
  struct Quiet : nn::ModuleCallObserver {
    void before_call(const nn::Module&) override {}
    void after_call(const nn::Module&, const Tensor*) override {}
  } observer;
  const autograd::NoGradGuard no_grad;
  const nn::ModuleCallObserverScope observed(observer);
  CHECK_THROWS_AS(nn::for_each_batch_slice(4, 2, nothing), ValueError);
}

TEST_CASE("for_each_batch_slice: a slice's exception reaches the caller after every slice ran") {
  const autograd::NoGradGuard no_grad;
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

TEST_CASE("MobileNetV2's eval forward on slices: the bits of the whole batch on one thread") {
  // OpenBLAS on one thread: its AVX2 kernels' bits depend on its thread count (Note [OpenBLAS
  // threads and bits] in kernels/cpu_runtime.h), and the units after the slices run it on all threads.
  const test::BlasThreadsScope one_blas_thread(1);
  struct Case {
    bool cifar;
    std::int64_t in_channels, batch;
    int threads;
    models::MobileNetV2::InferenceSlices slices;  // what inference_slices chooses; 0: the round does not run
    std::size_t claimed_end = 0, per_thread_end = 0;  // where the rounds stopped (last_sliced_units)
  };
  // Two slices per thread, then one. Standard stem: slices of 3 and 2 stop at the 8x8 maps' 4-sample
  // GEMMs (the third unit), slices of 4 at the 4x4 maps' 16-sample ones (the fifth), slices of 16 at
  // the 2x2 maps' 64-sample ones (the eighth), and one slice per thread runs on from there to the end
  // (a 1x1 convolution's bits do not depend on the samples it covers, CPU f32); the CIFAR stem's
  // slices of 16 run every unit and pool per slice, its slices of 8 and 4 stop at the 4x4 maps'
  // GEMMs, of 2 at the 8x8 maps'. 15 on 2 threads: a short last slice (4, 4, 4, 3; then 8, 7); 5 on
  // 4 threads: one slice per thread would leave a thread idle (slices of 2: 3 of them), so the second
  // round does not run; 3 on 4 threads: fewer slices than threads, so the batch runs whole.
  // Units (features_'s indices; 19 of them): the standard stem's 8x8 maps start at unit 2, its 4x4
  // at 4, its 2x2 at 7; the CIFAR stem's 8x8 at 7, its 4x4 at 14.
  const Case cases[] = {{false, 1, 12, 2, {3, 6}, 2, 19},   {false, 1, 12, 3, {2, 4}, 2, 19},
                        {false, 1, 12, 4, {2, 3}, 2, 19},   {false, 1, 15, 2, {4, 8}, 4, 19},
                        {false, 3, 15, 2, {4, 8}, 4, 19},   {false, 1, 64, 2, {16, 32}, 7, 19},
                        {false, 1, 5, 4, {1, 0}, 2, 2},     {false, 1, 3, 4, {0, 0}, 0, 0},
                        {true, 1, 15, 2, {4, 8}, 14, 19},   {true, 1, 32, 2, {8, 16}, 14, 19},
                        {true, 1, 64, 2, {16, 32}, 19, 19}, {true, 3, 12, 3, {2, 4}, 7, 19}};
  for (const Case& c : cases) {
    CAPTURE(c.cifar);
    CAPTURE(c.in_channels);
    CAPTURE(c.batch);
    CAPTURE(c.threads);
    Generator generator(5);
    models::MobileNetV2 model({.num_classes = 10, .width_mult = 0.5, .in_channels = c.in_channels,
                               .cifar_stem = c.cifar, .generator = &generator});
    model.eval();
    const Tensor x = uniform({c.batch, c.in_channels, 32, 32}, -1.0, 1.0, {}, &generator);
    const autograd::NoGradGuard no_grad;
    std::vector<float> whole;
    with_threads(1, [&] {
      CHECK(model.inference_slices(x).claimed == 0);
      whole = model(x).to_vector<float>();
    });
    with_threads(c.threads, [&] {
      const models::MobileNetV2::InferenceSlices slices = model.inference_slices(x);
      CHECK(slices.claimed == c.slices.claimed);
      CHECK(slices.per_thread == c.slices.per_thread);
      CHECK(model(x).to_vector<float>() == whole);
      CHECK(model.last_sliced_units().claimed_end == c.claimed_end);
      CHECK(model.last_sliced_units().per_thread_end == c.per_thread_end);
    });
    model.train();  // BatchNorm on batch statistics: never on slices
    with_threads(2, [&] { CHECK(model.inference_slices(x).claimed == 0); });
  }
}

TEST_CASE("MobileNetV2's eval forward on slices: the per-thread round refuses units whose GEMMs' bits depend on the samples") {
  // With the hand-written blocked GEMM a 1x1 convolution's bits depend on the columns a GEMM covers
  // (pointwise_bits_independent_of_samples is false), so one slice per thread may only run units
  // whose GEMMs it holds whole. Standard stem, 12 samples on 2 threads: the claimed slices of 3 stop
  // at unit 2 (the 8x8 maps' 4-sample GEMMs), and the per-thread slices of 6 cannot hold those
  // either, so from unit 2 on the batch runs whole. With the library GEMM the same round runs to the
  // end. Either way the bits of the whole batch on one thread.
  const test::BlasThreadsScope one_blas_thread(1);
  Generator generator(5);
  models::MobileNetV2 model({.num_classes = 10, .width_mult = 0.5, .in_channels = 1, .generator = &generator});
  model.eval();
  const Tensor x = uniform({12, 1, 32, 32}, -1.0, 1.0, {}, &generator);
  const autograd::NoGradGuard no_grad;
  const std::pair<GemmImpl, std::size_t> cases[] = {{GemmImpl::blocked, 2}, {GemmImpl::library, 19}};
  for (const auto& [impl, per_thread_end] : cases) {  // the GEMM, and where the per-thread round stops
    CAPTURE(gemm_impl_name(impl));
    const test::CpuGemmScope gemm(impl);
    std::vector<float> whole;
    with_threads(1, [&] {
      whole = model(x).to_vector<float>();
      CHECK(model.last_sliced_units().claimed_end == 0);  // on the whole batch, after a sliced forward too
      CHECK(model.last_sliced_units().per_thread_end == 0);
    });
    with_threads(2, [&] {
      CHECK(model.inference_slices(x).per_thread == 6);  // offered either way
      CHECK(model(x).to_vector<float>() == whole);
      CHECK(model.last_sliced_units().claimed_end == 2);
      CHECK(model.last_sliced_units().per_thread_end == per_thread_end);
    });
  }
}
