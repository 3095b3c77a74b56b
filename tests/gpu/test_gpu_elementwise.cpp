// GPU suite: the elementwise ops and reductions on cuda:0 against the CPU, on odd shapes with
// broadcast and strided operands, every floating dtype (tolerances: tests/gpu/gpu_compare.h).
#include <doctest/doctest.h>

#include <cmath>

#include "core/allocator.h"
#include "core/allocator_registry.h"
#include "core/random.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "nn/autograd.h"
#include "nn/functional.h"
#include "nn/optim.h"
#include "nn/optimizer_offload.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

TEST_CASE("elementwise ops on the GPU match the CPU") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = uniform({17, 3, 33}, -4.0, 4.0, {.dtype = dtype}).transpose(0, 2);
    const Tensor y = uniform({33, 1, 1}, 0.5, 3.0, {.dtype = dtype});
    const Tensor xg = x.to(kGpu), yg = y.to(kGpu);
    for (int op = 0; op <= static_cast<int>(UnaryOp::clamp); ++op)
      check_close(unary(static_cast<UnaryOp>(op), xg, 0.5, 2.0), unary(static_cast<UnaryOp>(op), x, 0.5, 2.0), dtype, "unary");
    for (int op = 0; op <= static_cast<int>(BinaryOp::tanh_backward); ++op)
      check_close(binary(static_cast<BinaryOp>(op), xg, yg), binary(static_cast<BinaryOp>(op), x, y), dtype, "binary");
    const Tensor condition = bernoulli({33, 3, 1}, 0.5, {.dtype = DType::boolean});
    check_close(where(condition.to(kGpu), xg, yg), where(condition, x, y), dtype, "where");
  }
}

TEST_CASE("reductions on the GPU match the CPU") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = uniform({37, 5, 129}, -3.0, 3.0, {.dtype = dtype}).permute({2, 0, 1});
    const Tensor xg = x.to(kGpu);
    for (const std::vector<std::int64_t>& dims : {std::vector<std::int64_t>{}, {0}, {1, 2}, {-1}}) {
      check_close(sum(xg, dims), sum(x, dims), dtype, "sum");
      check_close(mean(xg, dims, true), mean(x, dims, true), dtype, "mean");
      check_close(var(xg, dims, 0), var(x, dims, 0), dtype, "var");
    }
    const MaxResult gpu = max(xg, 1), cpu = max(x, 1);
    check_close(gpu.values, cpu.values, dtype, "max");
    CHECK(gpu.indices.to_vector<std::int64_t>() == cpu.indices.to_vector<std::int64_t>());
  }
}

TEST_CASE("GEMM on the GPU: every implementation exact on small integers, close on random values") {
  struct Restore {
    GemmImpl previous = gemm_impl(DeviceType::CUDA);
    ~Restore() { set_gemm_impl(DeviceType::CUDA, previous); }
  } const restore;
  for (GemmImpl impl : runnable_impls({GemmImpl::naive, GemmImpl::tiled, GemmImpl::register_blocked, GemmImpl::library},
                                      GemmImpl::library, "cuBLAS")) {
    set_gemm_impl(DeviceType::CUDA, impl);
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Tensor a = randint(-4, 5, {67, 129}, {.dtype = DType::i64}).to(dtype);
      const Tensor b = randint(-4, 5, {33, 129}, {.dtype = DType::i64}).to(dtype).t();  // a transposed operand
      CHECK_MESSAGE(matmul(a.to(kGpu), b.to(kGpu)).to_vector<double>() == matmul(a, b).to_vector<double>(),
                    gemm_impl_name(impl), " ", dtype);
      const Tensor x = uniform({3, 45, 70}, -1.0, 1.0, {.dtype = dtype}), y = uniform({70, 31}, -1.0, 1.0, {.dtype = dtype});
      check_close(matmul(x.to(kGpu), y.to(kGpu)), matmul(x, y), accumulation_tolerance(dtype), "matmul");
    }
  }
}

TEST_CASE("softmax and log-softmax on the GPU match the CPU") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = uniform({9, 300}, -20.0, 20.0, {.dtype = dtype});
    const Tensor g = uniform({9, 300}, -1.0, 1.0, {.dtype = dtype});
    const Tensor xg = x.to(kGpu), gg = g.to(kGpu);
    check_close(softmax(xg, 1), softmax(x, 1), dtype, "softmax");
    check_close(log_softmax(xg, 0), log_softmax(x, 0), dtype, "log_softmax");
    check_close(softmax_backward(gg, softmax(xg, 1), 1), softmax_backward(g, softmax(x, 1), 1), dtype, "softmax_backward");
    check_close(log_softmax_backward(gg, log_softmax(xg, 1), 1), log_softmax_backward(g, log_softmax(x, 1), 1), dtype,
                "log_softmax_backward");
  }
}

TEST_CASE("dropout keeps the same elements on the GPU as on the CPU, forward and backward") {
  Generator cpu_generator(21), gpu_generator(21);
  const Tensor x = uniform({1001}, 1.0, 2.0), g = uniform({1001}, 1.0, 2.0);  // nonzero: a zero means dropped
  const DropoutResult cpu = dropout(x, 0.4, true, &cpu_generator);
  const DropoutResult gpu = dropout(x.to(kGpu), 0.4, true, &gpu_generator);
  REQUIRE(gpu.draw == cpu.draw);
  CHECK(gpu.output.to_vector<float>() == cpu.output.to_vector<float>());
  CHECK(dropout_backward(g.to(kGpu), gpu.draw, 0.4).to_vector<float>() == dropout_backward(g, cpu.draw, 0.4).to_vector<float>());
}

TEST_CASE("fused SGD and AdamW steps on the GPU match the CPU") {
  Generator generator(4);
  std::vector<Tensor> p, g, b;
  for (std::int64_t n : {7, 1000, 33}) {
    p.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    g.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    b.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
  }
  auto on_gpu = [](const std::vector<Tensor>& list) {
    std::vector<Tensor> out;
    for (const Tensor& t : list) out.push_back(t.to(kGpu));
    return out;
  };
  const auto pg = on_gpu(p), gg = on_gpu(g), bg = on_gpu(b);
  const SgdConfig sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true};
  sgd_step(p, g, b, sgd);
  sgd_step(pg, gg, bg, sgd);
  for (std::size_t i = 0; i < p.size(); ++i) check_close(pg[i], p[i], DType::f32, "sgd");
  std::vector<Tensor> m, v;
  for (const Tensor& t : p) {
    m.push_back(zeros(t.shape()));
    v.push_back(zeros(t.shape()));
  }
  const auto mg = on_gpu(m), vg = on_gpu(v);
  adamw_step(p, g, m, v, {.lr = 0.01, .step = 1});
  adamw_step(pg, gg, mg, vg, {.lr = 0.01, .step = 1});
  for (std::size_t i = 0; i < p.size(); ++i) check_close(pg[i], p[i], DType::f32, "adamw");
}

TEST_CASE("AdamW with 8-bit moments on the GPU gives the CPU's codes and scales") {
  Generator generator(5);
  std::vector<Tensor> p, g, codes_m, codes_v, scales_m, scales_v;
  for (std::int64_t n : {7, 1000, 300}) {
    p.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    g.push_back(uniform({n}, -1.0, 1.0, {}, &generator));
    codes_m.push_back(zeros({n}, {.dtype = DType::u8}));
    codes_v.push_back(zeros({n}, {.dtype = DType::u8}));
    scales_m.push_back(zeros({quant_blocks(n)}));
    scales_v.push_back(zeros({quant_blocks(n)}));
  }
  auto on_gpu = [](const std::vector<Tensor>& list) {
    std::vector<Tensor> out;
    for (const Tensor& t : list) out.push_back(t.to(kGpu));
    return out;
  };
  const auto pg = on_gpu(p), gg = on_gpu(g), mg = on_gpu(codes_m), vg = on_gpu(codes_v), smg = on_gpu(scales_m),
             svg = on_gpu(scales_v);
  for (std::int64_t step = 1; step <= 2; ++step) {  // the second step decodes what the first coded
    adamw8bit_step(p, g, codes_m, codes_v, scales_m, scales_v, {.lr = 0.01, .step = step});
    adamw8bit_step(pg, gg, mg, vg, smg, svg, {.lr = 0.01, .step = step});
  }
  // Coding is exact integer arithmetic on float bits, but the f32 AdamW update before it may round
  // differently on the GPU (fused multiply-adds): a moment on a code boundary can then code one step
  // apart, so the parameters are compared at f32 tolerance and the codes by how many differ.
  for (std::size_t i = 0; i < p.size(); ++i) {
    check_close(pg[i], p[i], DType::f32, "adamw8bit");
    check_close(smg[i], scales_m[i], DType::f32, "adamw8bit first-moment scales");
    check_close(svg[i], scales_v[i], DType::f32, "adamw8bit second-moment scales");
    for (const auto& [gpu_codes, cpu_codes] : {std::pair{mg[i], codes_m[i]}, std::pair{vg[i], codes_v[i]}}) {
      const auto gpu = gpu_codes.to_vector<double>(), cpu = cpu_codes.to_vector<double>();
      std::size_t different = 0;
      for (std::size_t k = 0; k < gpu.size(); ++k) different += gpu[k] != cpu[k];
      CHECK(different <= std::max<std::size_t>(1, gpu.size() / 100));
    }
  }
}

TEST_CASE("Adafactor's steps (tensor ops) on the GPU match the CPU's") {
  Generator generator(6);
  std::vector<Tensor> cpu_params, gpu_params;
  for (const Shape& shape : std::vector<Shape>{{16, 8, 1, 1}, {32}, {10, 40}}) {
    Tensor p = uniform(shape, -1.0, 1.0, {}, &generator);
    Tensor q = p.to(kGpu);
    cpu_params.push_back(autograd::set_requires_grad(p));
    gpu_params.push_back(autograd::set_requires_grad(q));
  }
  nn::Adafactor cpu(cpu_params, 0.01, 0.01), gpu(gpu_params, 0.01, 0.01);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      const Tensor g = uniform(cpu_params[i].shape(), -1.0, 1.0, {}, &generator);
      autograd::set_grad(cpu_params[i], g);
      autograd::set_grad(gpu_params[i], g.to(kGpu));
    }
    cpu.step();
    gpu.step();
  }
  for (std::size_t i = 0; i < cpu_params.size(); ++i) check_close(gpu_params[i], cpu_params[i], DType::f32, "adafactor");
}

// The offloaded optimizer (nn/optimizer_offload.h) on cuda:0: the gradients cross to the host and
// the weights back on a side stream, and the host runs the CPU's AdamW, so the weights are the
// CPU-only run's bit for bit; the device's books hold no optimizer state. In the emulated CUDA build
// a copy that did not wait for its stream would read poisoned memory here.
TEST_CASE("an offloaded AdamW on cuda:0 steps as the CPU's AdamW, bit for bit, with no state on the device") {
  Generator generator(8);
  std::vector<Tensor> cpu_params, gpu_params;
  for (const Shape& shape : std::vector<Shape>{{16, 8, 3, 3}, {32}, {10, 40}}) {
    Tensor p = uniform(shape, -1.0, 1.0, {}, &generator);
    Tensor q = p.to(kGpu);
    cpu_params.push_back(autograd::set_requires_grad(p));
    gpu_params.push_back(autograd::set_requires_grad(q));
  }
  const auto adamw = [](std::vector<nn::ParamGroup> groups) { return std::make_unique<nn::AdamW>(std::move(groups)); };
  const std::int64_t device_state_before = allocator_for(kGpu).stats().tag_bytes[static_cast<int>(MemoryTag::optimizer)].current;
  nn::AdamW cpu(cpu_params, 0.01);
  nn::OffloadedOptimizer gpu({{.params = gpu_params, .lr = 0.01, .weight_decay = 1e-2}}, adamw);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      const Tensor g = uniform(cpu_params[i].shape(), -1.0, 1.0, {}, &generator);
      autograd::set_grad(cpu_params[i], g);
      autograd::set_grad(gpu_params[i], functional::mul(g.to(kGpu), 1.0));  // made by a kernel on the default stream
    }
    cpu.step();
    gpu.step();
  }
  CHECK(allocator_for(kGpu).stats().tag_bytes[static_cast<int>(MemoryTag::optimizer)].current == device_state_before);
  for (std::size_t i = 0; i < cpu_params.size(); ++i)
    CHECK(gpu_params[i].to(Device::cpu()).to_vector<float>() == cpu_params[i].to_vector<float>());
}
