// GPU suite: convolution on cuda:0, both implementations (native, cuDNN) against the CPU: exact on
// small integers, close on random values in every floating dtype, through every path (im2col,
// 1x1, depthwise), groups, strides, dilation, bias and non-contiguous inputs; and cuDNN under a
// zero workspace limit.
#include <doctest/doctest.h>

#include "core/random.h"
#include "kernels/conv.h"
#include "tests/gpu/gpu_compare.h"
#include "tests/skip.h"

using namespace frugal;
using namespace frugal::test;

namespace {
struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions options;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"3x3 pad 1", {3, 16, 17, 15}, {24, 16, 3, 3}, {.padding = {1, 1}}},
      {"stride 2, dilation", {2, 8, 21, 19}, {12, 8, 3, 3}, {.stride = {2, 2}, .padding = {2, 1}, .dilation = {2, 1}}},
      {"groups 4", {2, 16, 9, 11}, {20, 4, 3, 3}, {.padding = {1, 1}, .groups = 4}},
      {"1x1", {4, 32, 7, 7}, {48, 32, 1, 1}, {}},
      {"1x1 on 1x1 maps", {6, 40, 1, 1}, {24, 40, 1, 1}, {}},  // the gradients on the [N, C] matrix (native path)
      {"depthwise 3x3 stride 2", {3, 24, 15, 15}, {24, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 24}},
      {"depthwise multiplier 2", {2, 5, 9, 8}, {10, 1, 5, 5}, {.padding = {2, 2}, .groups = 5}},
  };
  return all;
}

Tensor small_ints(Shape shape) { return randint(-3, 4, std::move(shape), {.dtype = DType::i64}).to(DType::f32); }

struct ImplScope {
  explicit ImplScope(ConvImpl impl) : previous(conv_impl(DeviceType::CUDA)) { set_conv_impl(DeviceType::CUDA, impl); }
  ~ImplScope() { set_conv_impl(DeviceType::CUDA, previous); }
  ConvImpl previous;
};
}  // namespace

TEST_CASE("conv2d on the GPU: exact on small integers, both implementations, forward and backward") {
  for (ConvImpl impl : runnable_impls({ConvImpl::native, ConvImpl::cudnn}, ConvImpl::cudnn, "cuDNN")) {
    ImplScope scope(impl);
    for (const Case& c : cases()) {
      CAPTURE(conv_impl_name(impl));
      INFO(std::string(c.name));
      const Tensor x = small_ints(c.x), w = small_ints(c.w), bias = small_ints({c.w[0]});
      const Tensor dy = small_ints(conv2d_output_shape(c.x, c.w, c.options));
      CHECK(conv2d(x.to(kGpu), w.to(kGpu), bias.to(kGpu), c.options).to_vector<double>() ==
            conv2d(x, w, bias, c.options).to_vector<double>());
      CHECK(last_conv2d_decision().impl == impl);
      CHECK(conv2d_backward_input(dy.to(kGpu), w.to(kGpu), c.x, c.options).to_vector<double>() ==
            conv2d_backward_input(dy, w, c.x, c.options).to_vector<double>());
      CHECK(conv2d_backward_weight(dy.to(kGpu), x.to(kGpu), c.w, c.options).to_vector<double>() ==
            conv2d_backward_weight(dy, x, c.w, c.options).to_vector<double>());
    }
  }
}

TEST_CASE("conv2d on the GPU: close to the CPU on random values in every dtype, non-contiguous inputs") {
  for (ConvImpl impl : runnable_impls({ConvImpl::native, ConvImpl::cudnn}, ConvImpl::cudnn, "cuDNN")) {
    ImplScope scope(impl);
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (const Case& c : cases()) {
        CAPTURE(conv_impl_name(impl));
        INFO(std::string(c.name));
        const TensorOptions on{.dtype = dtype};
        const Tensor x = uniform({c.x[0], c.x[2], c.x[3], c.x[1]}, -1.0, 1.0, on).permute({0, 3, 1, 2});  // channels-last
        const Tensor w = uniform(c.w, -1.0, 1.0, on), bias = uniform({c.w[0]}, -1.0, 1.0, on);
        const Tensor dy = uniform(conv2d_output_shape(c.x, c.w, c.options), -1.0, 1.0, on);
        const Tolerance tolerance = accumulation_tolerance(dtype);
        check_close(conv2d(x.to(kGpu), w.to(kGpu), bias.to(kGpu), c.options), conv2d(x, w, bias, c.options), tolerance,
                    "forward");
        check_close(conv2d_backward_input(dy.to(kGpu), w.to(kGpu), c.x, c.options),
                    conv2d_backward_input(dy, w, c.x, c.options), tolerance, "backward input");
        check_close(conv2d_backward_weight(dy.to(kGpu), x.to(kGpu), c.w, c.options),
                    conv2d_backward_weight(dy, x, c.w, c.options), tolerance, "backward weight");
      }
    }
  }
}

TEST_CASE("conv2d on the GPU: cuDNN under a zero workspace limit picks an algorithm that needs none") {
  if (!kCudaLibraries) FRUGAL_SKIP("cuDNN needs a GPU: this build has no cuDNN (FRUGAL_CUDA=emulated)");
  ImplScope scope(ConvImpl::cudnn);
  const std::size_t previous = conv_workspace_limit();
  set_conv_workspace_limit(0);
  const Tensor x = small_ints({8, 32, 28, 28}), w = small_ints({64, 32, 3, 3});
  const Tensor y = conv2d(x.to(kGpu), w.to(kGpu), Tensor(), {.padding = {1, 1}});
  CHECK(last_conv2d_decision().workspace_bytes == 0);
  CHECK(y.to_vector<double>() == conv2d(x, w, Tensor(), {.padding = {1, 1}}).to_vector<double>());
  set_conv_workspace_limit(previous);
}
