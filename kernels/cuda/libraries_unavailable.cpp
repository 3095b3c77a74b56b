// cuBLAS's and cuDNN's entry points in the FRUGAL_CUDA=emulated build, which runs on the CPU where
// NVIDIA's libraries cannot: each throws a DeviceError saying so and which of frugal's own kernels
// does the same work. They are reached only when a run asks for a library by name
// (FRUGAL_GEMM_IMPL=library, FRUGAL_CONV_IMPL=cudnn, BatchNormImpl::cudnn): the emulated build's
// defaults are the hand-written kernels (kernels/gemm.cpp, conv.cpp, batch_norm.h).
// Deliberately not here: any emulation of the libraries' results.
#include "core/dispatch.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/conv_backends.h"
#include "kernels/gemm_backends.h"
#include "kernels/library_versions.h"

namespace frugal::cuda {

void cublas_gemm(DType, bool, bool, std::int64_t, std::int64_t, std::int64_t, double, const void*, const void*, double,
                 void*) {
  throw_library_unavailable("cuBLAS", "matmul", "FRUGAL_GEMM_IMPL=tiled or register_blocked");
}

ConvDecision cudnn_conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Conv2dOptions&, std::size_t) {
  throw_library_unavailable("cuDNN", "conv2d", "FRUGAL_CONV_IMPL=native");
}
ConvDecision cudnn_conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Conv2dOptions&, std::size_t) {
  throw_library_unavailable("cuDNN", "conv2d_backward_input", "FRUGAL_CONV_IMPL=native");
}
ConvDecision cudnn_conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Conv2dOptions&, std::size_t) {
  throw_library_unavailable("cuDNN", "conv2d_backward_weight", "FRUGAL_CONV_IMPL=native");
}

void cudnn_batch_norm_train(DType, const void*, const BatchNormShape&, const void*, const void*, double, double, void*,
                            void*, void*, void*, void*) {
  throw_library_unavailable("cuDNN", "batch_norm_train", "BatchNormImpl::native");
}
void cudnn_batch_norm_eval(DType, const void*, const BatchNormShape&, const void*, const void*, const void*, const void*,
                           double, void*) {
  throw_library_unavailable("cuDNN", "batch_norm_eval", "BatchNormImpl::native");
}
void cudnn_batch_norm_backward(DType, const void*, const void*, const BatchNormShape&, const void*, const void*,
                               const void*, void*, void*, void*) {
  throw_library_unavailable("cuDNN", "batch_norm_backward", "BatchNormImpl::native");
}

KernelLibraryVersions kernel_library_versions() { return {}; }  // neither library is in this build

}  // namespace frugal::cuda
