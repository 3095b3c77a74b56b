// Determinism across thread counts: a MobileNetV2 training step (forward in train mode, loss,
// backward) and an eval forward give the same bits on 1, 2 and 3 OpenMP threads, with the standard
// stem and the CIFAR stem. Every CPU kernel splits its work in ways fixed by the shapes, never by
// the thread count (kernels/README.md); this is the test that holds them all to it at once, with the
// shapes where each kernel's fast paths and batching (1x1 chunks, small weight gradients) kick in;
// OpenBLAS's GEMMs on one thread of their own (kernels/cpu_runtime.h says why). Then OpenBLAS's own
// threading where its kernels are AVX-512 ones, which give the same bits on any thread count: GEMMs
// of MobileNetV2's shapes and the training step, uncapped, on 1 and 2 threads; on another CPU that
// case reports itself skipped (tests/skip.h).
#include <doctest/doctest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/cpu_runtime.h"
#include "kernels/gemm.h"
#include "models/mobilenet_v2.h"
#include "models/registry.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/module.h"
#include "tests/cpu/thread_scopes.h"
#include "tests/skip.h"

namespace frugal {
namespace {

struct StepBits {
  std::vector<float> loss, logits_eval;
  std::vector<std::vector<float>> grads, buffers;
};

StepBits train_step(bool cifar_stem, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Generator generator(11);
  // Width 0.5 and a batch of 8 keep the step short; at 32x32 the late layers' 4, 2 and 1 pixel
  // planes put the 1x1 convolutions on their gathered, chunked path, the early ones on the per-sample one.
  const auto model = models::make_model(
      "mobilenet_v2", {.num_classes = 10, .in_channels = 1, .width_mult = 0.5, .cifar_stem = cifar_stem, .generator = &generator});
  const Tensor x = uniform({8, 1, 32, 32}, -1.0, 1.0, {}, &generator);
  const Tensor y = from_vector<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  model->train();
  const Tensor loss = functional::cross_entropy((*model)(x), y);
  autograd::backward(loss);
  StepBits bits;
  bits.loss = loss.to_vector<float>();
  for (const auto& [name, p] : model->named_parameters()) bits.grads.push_back(autograd::grad(p).to_vector<float>());
  for (const auto& [name, b] : model->named_buffers())
    if (is_floating(b.dtype())) bits.buffers.push_back(b.to_vector<float>());
  model->eval();
  {
    autograd::NoGradGuard no_grad;
    bits.logits_eval = (*model)(x).to_vector<float>();
  }
  omp_set_num_threads(saved);
  return bits;
}

void check_same(const StepBits& a, const StepBits& b) {
  CHECK(a.loss == b.loss);
  CHECK(a.logits_eval == b.logits_eval);
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(a.grads[i] == b.grads[i]);
  }
  CHECK(a.buffers == b.buffers);  // the running statistics
}

using test::BlasThreadsScope;

// OpenBLAS's kernels for AVX-512: Skylake-X's, and those of the later Xeons that use them.
bool blas_runs_avx512_kernels() {
  const std::string core = blas_core();
  return __builtin_cpu_supports("avx512f") && (core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids");
}

std::vector<float> product(const Tensor& a, const Tensor& b, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::vector<float> c = matmul(a, b).to_vector<float>();
  omp_set_num_threads(saved);
  return c;
}

}  // namespace

// OpenBLAS's own threading is outside what this holds: with its AVX2 kernels a GEMM's bits depend
// on its thread count (Note [OpenBLAS threads and bits], kernels/cpu_runtime.h). So its calls run on
// one thread here, and every kernel of frugal's on 1, 2 and 3.
TEST_CASE("MobileNetV2's training step and eval forward are the same bits whatever the thread count (1 to 3)") {
  const BlasThreadsScope one_blas_thread(1);
  for (const bool cifar_stem : {false, true}) {
    CAPTURE(cifar_stem);
    const StepBits one = train_step(cifar_stem, 1);
    check_same(one, train_step(cifar_stem, 2));
    check_same(one, train_step(cifar_stem, 3));
  }
}

// Inference runs MobileNetV2's blocks a few samples at a time (Note [Inference a few samples at a
// time], models/mobilenet_v2.cpp), chunks sized by the L2 cache alone: the same bits on any thread
// count. Width 1 and the CIFAR stem give the first blocks 576 KiB of hidden activations per sample.
TEST_CASE("MobileNetV2's inference in chunks of samples is the same bits whatever the thread count (1 to 3)") {
  const BlasThreadsScope one_blas_thread(1);
  Generator generator(12);
  const auto model = models::make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1, .cifar_stem = true, .generator = &generator});
  model->eval();
  const Tensor x = uniform({64, 1, 32, 32}, -1.0, 1.0, {}, &generator);
  auto* block = dynamic_cast<models::InvertedResidual*>((*model->named_children()[0].second).named_children()[2].second.get());
  REQUIRE(block != nullptr);
  CHECK(block->inference_chunk(empty({64, 24, 32, 32}, {.device = Device::meta()})) < 64);  // chunked (an L2 under 18 MiB)
  auto logits = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const autograd::NoGradGuard no_grad;
    std::vector<float> out = (*model)(x).to_vector<float>();
    omp_set_num_threads(saved);
    return out;
  };
  const std::vector<float> one = logits(1);
  CHECK(one == logits(2));
  CHECK(one == logits(3));
}

// The other half of the claim: with its AVX-512 kernels OpenBLAS needs no cap. Each shape is large
// enough for OpenBLAS to split it over both threads (its threshold is 4 x 65536 multiply-adds; each
// product started OpenMP's second thread, counted in /proc/self/task, on 2026-12-04), and the same
// products on its AVX2 kernels (OPENBLAS_CORETYPE=Haswell on the same Xeon) differed on 2 threads.
TEST_CASE("OpenBLAS's AVX-512 kernels: GEMMs and the training step are the same bits on 1 and 2 threads, uncapped") {
  if (blas_core().empty()) FRUGAL_SKIP("built without OpenBLAS");
  if (!blas_runs_avx512_kernels())
    FRUGAL_SKIP(("OpenBLAS runs its " + blas_core() + " kernels on this CPU, not AVX-512 ones").c_str());
  const BlasThreadsScope uncapped(0);
  Generator generator(5);
  const auto random = [&](Shape shape) { return uniform(shape, -1.0, 1.0, {}, &generator); };
  // A 1x1 expansion over a 56x56 plane, an im2col 3x3 convolution, its weight gradient (a transposed
  // operand), a classifier's batch, and a square product.
  const std::pair<Tensor, Tensor> products[] = {{random({144, 24}), random({24, 3136})},
                                                {random({64, 576}), random({576, 3136})},
                                                {random({64, 3136}), random({576, 3136}).t()},
                                                {random({256, 1280}), random({1280, 1000})},
                                                {random({512, 512}), random({512, 512})}};
  for (const auto& [a, b] : products) {
    CAPTURE(shape_str(a.shape()));
    CAPTURE(shape_str(b.shape()));
    CHECK(product(a, b, 1) == product(a, b, 2));
  }
  check_same(train_step(false, 1), train_step(false, 2));
}

}  // namespace frugal
