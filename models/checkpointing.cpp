// models/checkpointing.h: a block as nn::checkpoint's function of one input.
#include "models/checkpointing.h"

#include "nn/checkpoint.h"

namespace frugal::models {

Tensor run_block(const Block& block, const Tensor& x, bool checkpointed) {
  if (!checkpointed) return block(x);
  return nn::checkpoint([block](const std::vector<Tensor>& inputs) { return block(inputs[0]); }, {x});
}

Tensor run_block(const std::shared_ptr<nn::Module>& block, const Tensor& x, bool checkpointed) {
  return run_block([block](const Tensor& input) { return (*block)(input); }, x, checkpointed);
}

}  // namespace frugal::models
