// A run's data and the test evaluation (see evaluation.h).
#include "train/evaluation.h"

#include <algorithm>

#include "data/loader.h"
#include "kernels/loss.h"
#include "nn/autograd.h"

namespace frugal::train {

RunData open_run_data(const std::string& data, const std::string& test_data, std::int64_t image_size, bool augment) {
  return open_run_data(data::open_dataset(data, test_data, {.image_size = image_size}), image_size, augment);
}

RunData open_run_data(data::DatasetSplits splits, std::int64_t image_size, bool augment) {
  RunData run{std::move(splits), {}, {}};
  const data::ImageStatistics stats = data::image_statistics(*run.splits.train);
  run.train_transforms = data::training_transforms(*run.splits.train, image_size, augment, stats);
  run.test_transforms = data::training_transforms(*run.splits.train, image_size, false, stats);
  return run;
}

EvalResult evaluate(nn::Module& model, data::DatasetPtr dataset, const data::Compose& transforms, std::int64_t batch_size,
                    Device device, int workers, std::int64_t num_classes, const std::function<bool()>& should_stop) {
  model.eval();
  autograd::NoGradGuard no_grad;
  data::DataLoader loader(std::move(dataset), {.batch_size = batch_size,
                                               .num_workers = workers,
                                               .transforms = transforms,
                                               .device = device,
                                               .pin_memory = device.is_cuda()});
  EvalResult result;
  result.class_correct.assign(static_cast<std::size_t>(num_classes), 0);
  result.class_total.assign(static_cast<std::size_t>(num_classes), 0);
  double loss_sum = 0.0;
  for (data::Batch& batch : loader.epoch(0)) {
    const Tensor logits = model(batch.inputs);
    loss_sum += cross_entropy(logits, batch.labels, {.reduction = LossReduction::sum}).to(Device::cpu()).item<double>();
    const Tensor predicted = logits.to(Device::cpu()).to(DType::f32);
    const std::vector<float> values = predicted.to_vector<float>();
    const std::vector<std::int64_t> labels = batch.labels.to(Device::cpu()).to_vector<std::int64_t>();
    for (std::size_t row = 0; row < labels.size(); ++row) {
      const float* first = values.data() + row * static_cast<std::size_t>(num_classes);
      const auto best = std::max_element(first, first + num_classes) - first;  // the first maximum, as argmax
      const auto label = static_cast<std::size_t>(labels[row]);
      ++result.class_total[label];
      if (best == labels[row]) ++result.class_correct[label];
    }
    result.samples += static_cast<std::int64_t>(labels.size());
    if (should_stop && should_stop()) {
      result.interrupted = true;
      break;
    }
  }
  std::int64_t correct = 0;
  for (std::int64_t c : result.class_correct) correct += c;
  if (result.samples > 0) {
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
    result.loss = loss_sum / static_cast<double>(result.samples);
  }
  return result;
}

}  // namespace frugal::train
