// Matrix multiply: GEMM with transposes, batched matmul, and the linear layer's forward and
// backward built on it. Two implementations per device, selectable at run time so they can be
// compared: a library one (OpenBLAS on the CPU, cuBLAS on a GPU; the default) and a hand-written
// one kept as teaching material (a cache-blocked CPU loop; naive, shared-memory-tiled and
// register-blocked CUDA).
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
  register_blocked,  // CUDA: 128 x 128 tiles of C, an 8 x 8 patch per thread in registers
};
std::string_view gemm_impl_name(GemmImpl impl);
GemmImpl parse_gemm_impl(std::string_view name);  // ValueError on anything else

// The implementation used for `device`'s GEMMs; library by default. Setting a hand-written one that
// does not exist on that device (naive on the CPU, say) is a ValueError.
void set_gemm_impl(DeviceType device, GemmImpl impl);
GemmImpl gemm_impl(DeviceType device);

Tensor matmul(const Tensor& a, const Tensor& b);

// c = alpha * a b + beta * c in place, for 2-D a [m, k], b [k, n] and a contiguous c [m, n]; a and b
// may be transposed views. What convolution calls per sample and group, writing straight into its
// output and accumulating weight gradients over samples (beta = 1).
void matmul_into(const Tensor& c, const Tensor& a, const Tensor& b, double alpha = 1.0, double beta = 0.0);

// y = x W^T + b, as torch.nn.functional.linear: x [N, in], weight [out, in], bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
struct LinearGrads {
  Tensor input, weight, bias;  // bias undefined when the layer has none
};
LinearGrads linear_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight, bool has_bias);

}  // namespace frugal
