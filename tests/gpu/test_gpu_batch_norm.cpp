// GPU suite: batch norm on cuda:0 against the CPU, for both CUDA implementations (native, cudnn):
// the training forward (output, saved statistics, running statistics: cuDNN's running variance must
// be the unbiased one, like frugal's), the eval forward, the backward in both modes, with and without
// affine parameters and the fused ReLU6, every floating dtype (f16/bf16 with f32 parameters), on a
// strided odd 4-D input and an [N, C] one; the kernels from a saved xhat (batch_norm_affine giving
// the forward's output to the bit on the GPU, and y from the same xhat the same bits as the CPU's);
// xhat kept in bf16 with the ReLU6 mask as bits (NormalizedForm) against the CPU's own compact
// passes; and the device check.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/random.h"
#include "kernels/activation_codec.h"
#include "kernels/activation_codec_ops.h"
#include "kernels/batch_norm.h"
#include "tests/gpu/gpu_compare.h"

using namespace frugal;
using namespace frugal::test;

namespace {
constexpr double kMomentum = 0.1, kEps = 1e-5;

Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : t; }

void compare_case(const Tensor& x, bool affine, bool fused) {
  const DType dtype = x.dtype(), params = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tolerance data = accumulation_tolerance(dtype), per_channel = accumulation_tolerance(params);
  const std::int64_t channels = x.size(1);
  const Tensor weight = affine ? uniform({channels}, 0.5, 2.0, {.dtype = params}) : Tensor();
  const Tensor bias = affine ? uniform({channels}, -1.0, 1.0, {.dtype = params}) : Tensor();
  const Tensor running_mean = uniform({channels}, -0.5, 0.5, {.dtype = params});
  const Tensor running_var = uniform({channels}, 0.5, 2.0, {.dtype = params});

  const Tensor cpu_mean = running_mean.clone(), cpu_var = running_var.clone();
  const Tensor gpu_mean = gpu(running_mean), gpu_var = gpu(running_var);
  const BatchNormOutput cpu = batch_norm_train(x, weight, bias, cpu_mean, cpu_var, kMomentum, kEps, fused);
  const BatchNormOutput out = batch_norm_train(gpu(x), gpu(weight), gpu(bias), gpu_mean, gpu_var, kMomentum, kEps, fused);
  check_close(out.output, cpu.output, data, "train output");
  check_close(out.save_mean, cpu.save_mean, per_channel, "save_mean");
  check_close(out.save_invstd, cpu.save_invstd, per_channel, "save_invstd");
  check_close(gpu_mean, cpu_mean, per_channel, "running_mean");
  check_close(gpu_var, cpu_var, per_channel, "running_var");

  check_close(batch_norm_eval(gpu(x), gpu(weight), gpu(bias), gpu(running_mean), gpu(running_var), kEps, fused),
              batch_norm_eval(x, weight, bias, running_mean, running_var, kEps, fused), data, "eval output");

  // Both sides go back from the CPU's forward (its statistics and its fused output, so the ReLU6
  // gate is the same), so only the backward is compared.
  const Tensor grad = uniform(x.shape(), -1.0, 1.0, {.dtype = dtype});
  const Tensor fused_output = fused ? cpu.output : Tensor();
  for (bool training : {true, false}) {
    CAPTURE(training);
    const Tensor mean = training ? cpu.save_mean : running_mean;
    const Tensor invstd = training ? cpu.save_invstd : batch_norm_invstd(running_var, kEps);
    const BatchNormGrads expected = batch_norm_backward(grad, x, weight, mean, invstd, training, fused_output);
    const BatchNormGrads got =
        batch_norm_backward(gpu(grad), gpu(x), gpu(weight), gpu(mean), gpu(invstd), training, gpu(fused_output));
    check_close(got.input, expected.input, data, "grad input");
    REQUIRE(got.weight.defined() == affine);
    if (affine) {
      check_close(got.weight, expected.weight, per_channel, "grad weight");
      check_close(got.bias, expected.bias, per_channel, "grad bias");
    }
  }
}
}  // namespace

namespace {
// The process's batch norm implementation for one case, set back however the case ends.
struct BatchNormImplScope {
  BatchNormImpl previous = batch_norm_impl();
  ~BatchNormImplScope() { set_batch_norm_impl(previous); }
};
}  // namespace

TEST_CASE("batch norm on the GPU matches the CPU, both implementations") {
  const BatchNormImplScope restore;
  for (BatchNormImpl impl : runnable_impls({BatchNormImpl::native, BatchNormImpl::cudnn}, BatchNormImpl::cudnn, "cuDNN")) {
    set_batch_norm_impl(impl);
    CAPTURE(batch_norm_impl_name(impl));
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      CAPTURE(dtype);
      const Tensor strided = uniform({5, 9, 7, 11}, -2.0, 4.0, {.dtype = dtype}).transpose(1, 2);  // [5, 7, 9, 11]
      const Tensor flat = uniform({33, 5}, -2.0, 4.0, {.dtype = dtype});
      for (const Tensor& x : {strided, flat})
        for (bool affine : {true, false})
          for (bool fused : {false, true}) {
            CAPTURE(x.dim());
            CAPTURE(affine);
            CAPTURE(fused);
            compare_case(x, affine, fused);
          }
    }
  }
}

namespace {
// The same values bit for bit, wherever each tensor is.
bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.to(Device::cpu()).contiguous(), cb = b.to(Device::cpu()).contiguous();
  return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}
}  // namespace

TEST_CASE("batch norm from a saved xhat on the GPU: the forward's bits again, and the CPU's results") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype);
    const DType params = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tolerance data = accumulation_tolerance(dtype), per_channel = accumulation_tolerance(params);
    const Tensor x = uniform({5, 7, 9, 11}, -2.0, 4.0, {.dtype = dtype}), grad = uniform(x.shape(), -1.0, 1.0, {.dtype = dtype});
    const Tensor w = uniform({7}, 0.5, 2.0, {.dtype = params}), b = uniform({7}, -1.0, 3.0, {.dtype = params});
    const Tensor running_mean = zeros({7}, {.dtype = params}), running_var = ones({7}, {.dtype = params});
    for (bool relu6 : {false, true}) {
      CAPTURE(relu6);
      const Tensor cpu_mean = running_mean.clone(), gpu_mean = gpu(running_mean), gpu_var = gpu(running_var);
      const auto cpu = batch_norm_train_normalized(x, w, b, cpu_mean, running_var.clone(), kMomentum, kEps, relu6);
      const auto out = batch_norm_train_normalized(gpu(x), gpu(w), gpu(b), gpu_mean, gpu_var, kMomentum, kEps, relu6);
      CHECK(same_bits(batch_norm_affine(out.normalized, gpu(w), gpu(b), relu6), out.output));
      CHECK(same_bits(batch_norm_affine(gpu(cpu.normalized), gpu(w), gpu(b), relu6), cpu.output));
      check_close(out.normalized, cpu.normalized, data, "xhat");
      check_close(out.save_invstd, cpu.save_invstd, per_channel, "save_invstd");
      check_close(gpu_mean, cpu_mean, per_channel, "running_mean");
      for (bool training : {true, false}) {  // both sides from the CPU's xhat, so only the backward is compared
        CAPTURE(training);
        const BatchNormGrads expected = batch_norm_backward_normalized(grad, cpu.normalized, w, b, cpu.save_invstd,
                                                                       training, relu6);
        const BatchNormGrads got = batch_norm_backward_normalized(gpu(grad), gpu(cpu.normalized), gpu(w), gpu(b),
                                                                  gpu(cpu.save_invstd), training, relu6);
        check_close(got.input, expected.input, data, "grad input from xhat");
        check_close(got.weight, expected.weight, per_channel, "grad weight from xhat");
        check_close(got.bias, expected.bias, per_channel, "grad bias from xhat");
      }
    }
  }
}

TEST_CASE("batch norm keeping xhat compact on the GPU: bf16 and the ReLU6 bits, and the backward from them, as the CPU's") {
  // Planes of 64, a multiple of 8: the CPU keeps them compact in BatchNorm's own passes, the GPU by
  // the separate passes (kernels/batch_norm.cpp's make_compact), so the two ways meet here.
  const NormalizedForm form{.bf16 = true, .relu6_mask = true};
  const Tensor x = uniform({4, 6, 8, 8}, -2.0, 4.0), grad = uniform(x.shape(), -1.0, 1.0);
  const Tensor w = uniform({6}, 0.5, 2.0), b = uniform({6}, -1.0, 3.0);
  const Tensor running_mean = zeros({6}), running_var = ones({6});
  const Tolerance f32 = accumulation_tolerance(DType::f32), bf16 = accumulation_tolerance(DType::bf16);
  const auto cpu = batch_norm_train_normalized(x, w, b, running_mean.clone(), running_var.clone(), kMomentum, kEps,
                                               true, form);
  const auto out = batch_norm_train_normalized(gpu(x), gpu(w), gpu(b), gpu(running_mean), gpu(running_var), kMomentum,
                                               kEps, true, form);
  REQUIRE(out.normalized.dtype() == DType::bf16);
  REQUIRE(out.mask.defined());
  // The GPU's bits are its own output's (the layout pack_mask_between documents), and the CPU's but
  // where the two outputs, an f32 rounding apart, fall on two sides of 0 or 6.
  CHECK(out.mask.to_vector<double>() == pack_mask_between(out.output, 0.0, 6.0).to_vector<double>());
  const auto gpu_bits = out.mask.to_vector<std::uint8_t>(), cpu_bits = cpu.mask.to_vector<std::uint8_t>();
  const auto cpu_y = cpu.output.to_vector<double>();
  REQUIRE(gpu_bits.size() == cpu_bits.size());
  for (std::size_t i = 0; i < cpu_y.size(); ++i) {
    const auto at = static_cast<std::int64_t>(i);
    const bool on_gpu = mask_bit(gpu_bits.data(), at), on_cpu = mask_bit(cpu_bits.data(), at);
    const bool at_an_edge = std::abs(cpu_y[i]) < 1e-5 || std::abs(cpu_y[i] - 6.0) < 1e-5;
    if (on_gpu != on_cpu && !at_an_edge) FAIL_CHECK("mask bit ", i, " differs where the CPU's output is ", cpu_y[i]);
  }
  check_close(out.output, cpu.output, f32, "output");
  check_close(out.normalized, cpu.normalized, bf16, "xhat in bf16");
  // The rebuild from one bf16 xhat: y = xhat * weight + bias, two roundings on either device, so the
  // same bits. (From each device's own xhat it could differ by a bf16 step where the devices'
  // statistics, one f32 rounding apart, put xhat on the two sides of a bf16 rounding.)
  CHECK(batch_norm_affine(gpu(cpu.normalized), gpu(w), gpu(b), true, DType::f32).to_vector<double>() ==
        batch_norm_affine(cpu.normalized, w, b, true, DType::f32).to_vector<double>());
  for (bool training : {true, false}) {  // both sides from the CPU's xhat and bits
    CAPTURE(training);
    const BatchNormGrads expected =
        batch_norm_backward_normalized(grad, cpu.normalized, w, b, cpu.save_invstd, training, true, cpu.mask);
    const BatchNormGrads got = batch_norm_backward_normalized(gpu(grad), gpu(cpu.normalized), gpu(w), gpu(b),
                                                              gpu(cpu.save_invstd), training, true, gpu(cpu.mask));
    check_close(got.input, expected.input, f32, "grad input from the compact xhat");
    check_close(got.weight, expected.weight, f32, "grad weight from the compact xhat");
    check_close(got.bias, expected.bias, f32, "grad bias from the compact xhat");
  }
}

TEST_CASE("batch norm on the GPU: operands on another device are a DeviceError") {
  const Tensor x = uniform({4, 3, 2, 2}).to(kGpu);
  CHECK_THROWS_AS(batch_norm_train(x, ones({3}), zeros({3}), Tensor(), Tensor(), kMomentum, kEps), DeviceError);
  CHECK_THROWS_AS(batch_norm_eval(x, Tensor(), Tensor(), zeros({3}), ones({3}), kEps), DeviceError);
  const BatchNormOutput out = batch_norm_train(x, Tensor(), Tensor(), Tensor(), Tensor(), kMomentum, kEps);
  CHECK_THROWS_AS(batch_norm_backward(x.to(Device::cpu()), x, Tensor(), out.save_mean, out.save_invstd, true), DeviceError);
}
