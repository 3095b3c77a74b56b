// Fused optimizer steps (see optimizer.h): checks, TensorLists of at most kMaxTensorsPerLaunch
// tensors, and the one switch that picks the device's kernel.
#include "kernels/optimizer.h"

#include "core/dispatch.h"
#include "kernels/optimizer_backends.h"

namespace frugal {

namespace {

void check_list(std::span<const Tensor> params, std::span<const Tensor> state, const char* what, const char* op) {
  FRUGAL_CHECK_VALUE(state.size() == params.size(), op, ": ", params.size(), " parameters but ", state.size(), " ", what);
  for (std::size_t i = 0; i < params.size(); ++i) {
    FRUGAL_CHECK_VALUE(state[i].defined(), op, ": ", what, " ", i, " is undefined");
    check_same_shape(params[i], state[i], op);
    check_same_dtype(params[i], state[i], op);
    check_same_device(params[i], state[i], op);
    FRUGAL_CHECK_VALUE(state[i].is_contiguous(), op, ": ", what, " ", i, " of shape ", shape_str(state[i].shape()),
                       " is not contiguous");
  }
}

void check_params(std::span<const Tensor> params, const char* op) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    FRUGAL_CHECK_VALUE(params[i].defined() && params[i].is_contiguous(), op, ": parameter ", i,
                       " is undefined or not contiguous");
    FRUGAL_CHECK_DTYPE(is_floating(params[i].dtype()), op, ": parameter ", i, " is ", params[i].dtype());
    check_same_dtype(params[0], params[i], op);
    check_same_device(params[0], params[i], op);
  }
}

// Calls launch(list) for consecutive groups of at most kMaxTensorsPerLaunch tensors; `fill`
// sets a group member's pointers from tensor index i.
template <typename Fill, typename Launch>
void in_groups(std::size_t count, Fill&& fill, Launch&& launch) {
  for (std::size_t first = 0; first < count; first += kMaxTensorsPerLaunch) {
    TensorList list;
    for (std::size_t i = first; i < count && list.count < kMaxTensorsPerLaunch; ++i) fill(list, list.count++, i);
    launch(list);
  }
}

// 8-bit state: one code per element of its parameter, or one f32 scale per block of them.
void check_coded(std::span<const Tensor> params, std::span<const Tensor> state, DType dtype, bool scales,
                 const char* what) {
  FRUGAL_CHECK_VALUE(state.size() == params.size(), "adamw8bit_step: ", params.size(), " parameters but ", state.size(),
                     " ", what);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t expected = scales ? quant_blocks(params[i].numel()) : params[i].numel();
    FRUGAL_CHECK_VALUE(state[i].defined() && state[i].is_contiguous() && state[i].dtype() == dtype &&
                           state[i].numel() == expected,
                       "adamw8bit_step: ", what, " ", i, " must be ", expected, " contiguous ", dtype_name(dtype),
                       " elements for a parameter of shape ", shape_str(params[i].shape()));
    check_same_device(params[i], state[i], "adamw8bit_step");
  }
}

}  // namespace

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_buffers,
              const SgdConfig& config) {
  check_params(params, "sgd_step");
  check_list(params, grads, "gradients", "sgd_step");
  const bool momentum = config.momentum != 0.0;
  if (momentum) check_list(params, momentum_buffers, "momentum buffers", "sgd_step");
  if (params.empty()) return;
  const Device device = params[0].device();
  const DType dtype = params[0].dtype();
  in_groups(
      params.size(),
      [&](TensorList& list, int slot, std::size_t i) {
        list.params[slot] = params[i].data_ptr();
        list.grads[slot] = grads[i].data_ptr();
        list.state1[slot] = momentum ? momentum_buffers[i].data_ptr() : nullptr;
        list.sizes[slot] = params[i].numel();
      },
      [&](const TensorList& list) {
        switch (device.type()) {
          case DeviceType::CPU: return cpu::sgd_step(dtype, list, config);
          case DeviceType::Meta: return;
          case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
            return cuda::sgd_step(dtype, list, config);
#else
            throw_no_cuda("sgd_step");
#endif
        }
      });
  for (const Tensor& p : params) p.storage()->bump_version();
  if (momentum)
    for (const Tensor& b : momentum_buffers) b.storage()->bump_version();
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                std::span<const Tensor> exp_avg_sq, const AdamWConfig& config) {
  check_params(params, "adamw_step");
  check_list(params, grads, "gradients", "adamw_step");
  check_list(params, exp_avg, "first moments", "adamw_step");
  check_list(params, exp_avg_sq, "second moments", "adamw_step");
  FRUGAL_CHECK_VALUE(config.step >= 1, "adamw_step: step counts from 1, got ", config.step);
  if (params.empty()) return;
  const Device device = params[0].device();
  const DType dtype = params[0].dtype();
  in_groups(
      params.size(),
      [&](TensorList& list, int slot, std::size_t i) {
        list.params[slot] = params[i].data_ptr();
        list.grads[slot] = grads[i].data_ptr();
        list.state1[slot] = exp_avg[i].data_ptr();
        list.state2[slot] = exp_avg_sq[i].data_ptr();
        list.sizes[slot] = params[i].numel();
      },
      [&](const TensorList& list) {
        switch (device.type()) {
          case DeviceType::CPU: return cpu::adamw_step(dtype, list, config);
          case DeviceType::Meta: return;
          case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
            return cuda::adamw_step(dtype, list, config);
#else
            throw_no_cuda("adamw_step");
#endif
        }
      });
  for (const Tensor& t : params) t.storage()->bump_version();
  for (const Tensor& t : exp_avg) t.storage()->bump_version();
  for (const Tensor& t : exp_avg_sq) t.storage()->bump_version();
}

void adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg_codes,
                    std::span<const Tensor> exp_avg_sq_codes, std::span<const Tensor> exp_avg_scales,
                    std::span<const Tensor> exp_avg_sq_scales, const AdamWConfig& config) {
  check_params(params, "adamw8bit_step");
  check_list(params, grads, "gradients", "adamw8bit_step");
  for (std::size_t i = 0; i < params.size(); ++i)
    FRUGAL_CHECK_DTYPE(params[i].dtype() == DType::f32, "adamw8bit_step: parameter ", i, " is ", params[i].dtype(),
                       "; 8-bit moments are kept for f32 parameters");
  check_coded(params, exp_avg_codes, DType::u8, false, "first-moment codes");
  check_coded(params, exp_avg_sq_codes, DType::u8, false, "second-moment codes");
  check_coded(params, exp_avg_scales, DType::f32, true, "first-moment scales");
  check_coded(params, exp_avg_sq_scales, DType::f32, true, "second-moment scales");
  FRUGAL_CHECK_VALUE(config.step >= 1, "adamw8bit_step: step counts from 1, got ", config.step);
  if (params.empty()) return;
  const Device device = params[0].device();
  in_groups(
      params.size(),
      [&](TensorList& list, int slot, std::size_t i) {
        list.params[slot] = params[i].data_ptr();
        list.grads[slot] = grads[i].data_ptr();
        list.state1[slot] = exp_avg_codes[i].data_ptr();
        list.state2[slot] = exp_avg_sq_codes[i].data_ptr();
        list.state3[slot] = exp_avg_scales[i].data_ptr();
        list.state4[slot] = exp_avg_sq_scales[i].data_ptr();
        list.sizes[slot] = params[i].numel();
      },
      [&](const TensorList& list) {
        switch (device.type()) {
          case DeviceType::CPU: return cpu::adamw8bit_step(list, config);
          case DeviceType::Meta: return;
          case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
            return cuda::adamw8bit_step(list, config);
#else
            throw_no_cuda("adamw8bit_step");
#endif
        }
      });
  for (const auto& tensors : {params, exp_avg_codes, exp_avg_sq_codes, exp_avg_scales, exp_avg_sq_scales})
    for (const Tensor& t : tensors) t.storage()->bump_version();
}

}  // namespace frugal
