// Matrix multiply: GEMM with transposes, batched matmul, and the linear layer's forward and
// backward built on it. Two implementations per device, selectable at run time so they can be
// compared: a library one (OpenBLAS on the CPU, cuBLAS on a GPU; the default) and a hand-written
// one kept as teaching material (a cache-blocked CPU loop; naive and shared-memory-tiled CUDA).
// Operands share one floating dtype and one device; f16/bf16 compute in float and round once.
//
// Shapes (row-major): A [M, K], B [K, N], C [M, N]; batched: [batch, M, K] x [batch or none, K, N].
#pragma once

#include "core/tensor.h"

namespace frugal {

enum class GemmImpl : std::uint8_t {
  library,  // OpenBLAS (CPU) / cuBLAS (CUDA)
  blocked,  // CPU: the hand-written cache-blocked loop
  naive,    // CUDA: one thread per element of C, straight from global memory
  tiled,    // CUDA: 16 x 16 tiles of A and B staged through shared memory
};
std::string_view gemm_impl_name(GemmImpl impl);
GemmImpl parse_gemm_impl(std::string_view name);  // ValueError on anything else

// The implementation used for `device`'s GEMMs; library by default. Setting a hand-written one that
// does not exist on that device (naive on the CPU, say) is a ValueError.
void set_gemm_impl(DeviceType device, GemmImpl impl);
GemmImpl gemm_impl(DeviceType device);

Tensor matmul(const Tensor& a, const Tensor& b);

// y = x W^T + b, as torch.nn.functional.linear: x [N, in], weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
struct LinearGrads {
  Tensor input, weight, bias;  // bias undefined when the layer has none
};
LinearGrads linear_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight, bool has_bias);

}  // namespace frugal
