// The library convolution on a GPU: cuDNN v9's convolution API, forward, backward-data and
// backward-filter (kernels/conv_backends.h). For each call it asks cuDNN's heuristics for the
// algorithms in their expected speed order, takes the first that works, whose workspace fits the
// limit and can be borrowed from frugal's allocator now (tag `workspace`; on OutOfMemoryError the
// next candidate), and reports the choice.
//
// Math: f32 and f64 use CUDNN_FMA_MATH, so no TF32 tensor-core rounding sneaks in and the results
// agree with the CPU to f32 rounding (and exactly on small integers); f16/bf16 allow tensor cores
// and accumulate in f32. Not emulated: this needs a GPU.
#include <array>
#include <string>

#include "kernels/cuda/library_check.h"
#include "kernels/conv_backends.h"
#include "kernels/cuda/cudnn_support.h"
#include "kernels/workspace.h"

namespace frugal::cuda {

namespace {

int narrow_int(std::int64_t value, const char* what) {
  FRUGAL_CHECK_VALUE(value <= INT32_MAX, "cuDNN convolution: ", what, " ", value, " does not fit in 32 bits");
  return static_cast<int>(value);
}

// A cuDNN descriptor that destroys itself, also when a later step of a constructor throws.
template <typename Descriptor, cudnnStatus_t (*Create)(Descriptor*), cudnnStatus_t (*Destroy)(Descriptor)>
class Owned {
 public:
  Owned() { FRUGAL_CUDNN_CHECK(Create(&handle_)); }
  ~Owned() { Destroy(handle_); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Descriptor get() const { return handle_; }

 private:
  Descriptor handle_ = nullptr;
};
using FilterDescriptor = Owned<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Owned<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// Every descriptor one convolution call needs.
class ConvDescriptors {
 public:
  ConvDescriptors(const Tensor& x, const Tensor& weight, const Tensor& y, const Conv2dOptions& options)
      : x_(x.dtype(), x.shape(), x.strides()), y_(y.dtype(), y.shape(), y.strides()) {
    const DType dtype = x.dtype();
    const Shape& w = weight.shape();
    FRUGAL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter_.get(), cudnn_data_type(dtype), CUDNN_TENSOR_NCHW,
                                                  narrow_int(w[0], "C_out"), narrow_int(w[1], "C_in / groups"),
                                                  narrow_int(w[2], "KH"), narrow_int(w[3], "KW")));
    const cudnnDataType_t accumulate = dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    FRUGAL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_.get(), narrow_int(options.padding[0], "padding"), narrow_int(options.padding[1], "padding"),
        narrow_int(options.stride[0], "stride"), narrow_int(options.stride[1], "stride"),
        narrow_int(options.dilation[0], "dilation"), narrow_int(options.dilation[1], "dilation"),
        CUDNN_CROSS_CORRELATION, accumulate));  // deep learning's "convolution" does not flip the filter
    FRUGAL_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), narrow_int(options.groups, "groups")));
    const bool low_precision = dtype == DType::f16 || dtype == DType::bf16;
    FRUGAL_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), low_precision ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }

  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t y() const { return y_.get(); }
  cudnnFilterDescriptor_t filter() const { return filter_.get(); }
  cudnnConvolutionDescriptor_t conv() const { return conv_.get(); }

 private:
  CudnnTensor x_, y_;
  FilterDescriptor filter_;
  ConvolutionDescriptor conv_;
};

// alpha = 1, beta = 0 in the type cuDNN reads them as: double for f64 data, float otherwise.
struct Scalars {
  explicit Scalars(DType dtype) : f64(dtype == DType::f64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return f64 ? static_cast<const void*>(&zero_d) : &zero_f; }
  bool f64;
  double one_d = 1.0, zero_d = 0.0;
  float one_f = 1.0f, zero_f = 0.0f;
};

std::string fwd_name(cudnnConvolutionFwdAlgo_t algo) {
  constexpr std::array<const char*, 8> names = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                                "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  return algo < names.size() ? names[algo] : "fwd_algo_" + std::to_string(algo);
}
std::string bwd_data_name(cudnnConvolutionBwdDataAlgo_t algo) {
  constexpr std::array<const char*, 6> names = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  return algo < names.size() ? std::string("bwd_data_") + names[algo] : "bwd_data_" + std::to_string(algo);
}
std::string bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t algo) {
  constexpr std::array<const char*, 7> names = {"algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused",
                                                "fft_tiling"};
  return algo < names.size() ? std::string("bwd_filter_") + names[algo] : "bwd_filter_" + std::to_string(algo);
}

// A chosen algorithm and the workspace borrowed for it.
template <typename Perf>
struct Choice {
  const Perf* perf;
  DataPtr workspace;
};

// The first of cuDNN's ranked candidates that is supported here, keeps f32/f64 off tensor cores
// (FMA math: no TF32), fits the workspace limit, and whose workspace the allocator can give now:
// an FFT algorithm may ask for gigabytes, and on OutOfMemoryError the next candidate is tried (as
// PyTorch does). The candidate's math type is set on the descriptor, since the workspace size
// cuDNN reported is for that algorithm and math type together.
template <typename Perf, std::size_t N>
Choice<Perf> choose(const std::array<Perf, N>& ranked, int count, const Tensor& like, cudnnConvolutionDescriptor_t conv,
                    std::size_t workspace_limit, const char* direction) {
  const bool low_precision = like.dtype() == DType::f16 || like.dtype() == DType::bf16;
  bool out_of_memory = false;
  for (int i = 0; i < count; ++i) {
    const Perf& candidate = ranked[i];
    if (candidate.status != CUDNN_STATUS_SUCCESS || candidate.memory > workspace_limit) continue;
    if (!low_precision && candidate.mathType != CUDNN_FMA_MATH && candidate.mathType != CUDNN_DEFAULT_MATH) continue;
    try {
      DataPtr workspace = allocate_workspace(like.device(), candidate.memory);
      const cudnnMathType_t math = low_precision ? candidate.mathType : CUDNN_FMA_MATH;
      FRUGAL_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
      return {&candidate, std::move(workspace)};
    } catch (const OutOfMemoryError&) {
      out_of_memory = true;  // this one's workspace does not fit now: try the next, smaller one
    }
  }
  if (out_of_memory)
    FRUGAL_THROW(OutOfMemoryError, "cuDNN convolution ", direction,
                 ": no algorithm's workspace could be allocated (lower it with set_conv_workspace_limit, or free memory)");
  FRUGAL_THROW(ValueError, "cuDNN convolution ", direction, ": no algorithm fits the workspace limit of ", workspace_limit,
               " bytes (raise it with set_conv_workspace_limit)");
}

}  // namespace

ConvDecision cudnn_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Conv2dOptions& options,
                                  std::size_t workspace_limit) {
  const ConvDescriptors d(x, weight, y, options);
  const cudnnHandle_t handle = cudnn_handle();
  std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> ranked{};
  int count = 0;
  FRUGAL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x(), d.filter(), d.conv(), d.y(),
                                                            static_cast<int>(ranked.size()), &count, ranked.data()));
  const auto [chosen, workspace] = choose(ranked, count, x, d.conv(), workspace_limit, "forward");
  const auto& best = *chosen;
  const Scalars s(x.dtype());
  FRUGAL_CUDNN_CHECK(cudnnConvolutionForward(handle, s.one(), d.x(), x.data_ptr(), d.filter(), weight.data_ptr(), d.conv(),
                                             best.algo, workspace.get(), best.memory, s.zero(), d.y(), y.data_ptr()));
  return {ConvImpl::cudnn, fwd_name(best.algo), best.memory};
}

ConvDecision cudnn_conv2d_backward_input(const Tensor& grad_y, const Tensor& weight, const Tensor& grad_x,
                                         const Conv2dOptions& options, std::size_t workspace_limit) {
  const ConvDescriptors d(grad_x, weight, grad_y, options);
  const cudnnHandle_t handle = cudnn_handle();
  std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> ranked{};
  int count = 0;
  FRUGAL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.filter(), d.y(), d.conv(), d.x(),
                                                                 static_cast<int>(ranked.size()), &count, ranked.data()));
  const auto [chosen, workspace] = choose(ranked, count, grad_x, d.conv(), workspace_limit, "backward-data");
  const auto& best = *chosen;
  const Scalars s(grad_x.dtype());
  FRUGAL_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, s.one(), d.filter(), weight.data_ptr(), d.y(), grad_y.data_ptr(),
                                                  d.conv(), best.algo, workspace.get(), best.memory, s.zero(), d.x(),
                                                  grad_x.data_ptr()));
  return {ConvImpl::cudnn, bwd_data_name(best.algo), best.memory};
}

ConvDecision cudnn_conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_weight,
                                          const Conv2dOptions& options, std::size_t workspace_limit) {
  const ConvDescriptors d(x, grad_weight, grad_y, options);
  const cudnnHandle_t handle = cudnn_handle();
  std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> ranked{};
  int count = 0;
  FRUGAL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x(), d.y(), d.conv(), d.filter(),
                                                                   static_cast<int>(ranked.size()), &count, ranked.data()));
  const auto [chosen, workspace] = choose(ranked, count, x, d.conv(), workspace_limit, "backward-filter");
  const auto& best = *chosen;
  const Scalars s(x.dtype());
  FRUGAL_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, s.one(), d.x(), x.data_ptr(), d.y(), grad_y.data_ptr(), d.conv(),
                                                    best.algo, workspace.get(), best.memory, s.zero(), d.filter(),
                                                    grad_weight.data_ptr()));
  return {ConvImpl::cudnn, bwd_filter_name(best.algo), best.memory};
}

}  // namespace frugal::cuda
