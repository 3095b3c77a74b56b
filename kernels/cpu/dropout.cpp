// CPU dropout (kernels/dropout_backends.h): one parallel_for iteration per Philox block of four
// elements, each through dropout_block (kernels/dropout_ops.h).
#include "core/cpu/parallel.h"
#include "kernels/dropout_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

void dropout_apply(DType dtype, const void* in, void* out, std::int64_t numel, const DropoutSpec& spec) {
  const std::int64_t blocks = (numel + 3) / 4;
  visit_floating(dtype, "dropout", [&]<typename T, typename C>() {
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    parallel_for(blocks, numel, [&](std::int64_t block) { dropout_block<T, C>(src, dst, numel, spec, block); });
  });
}

}  // namespace frugal::cpu
