// A run's data and the evaluation of a model on its test split: what `frugal train` evaluates after
// each epoch and `frugal eval` runs on its own.
// Not here: training (train/trainer.h, train/step.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "data/dataset.h"
#include "data/open_dataset.h"
#include "data/transforms.h"
#include "nn/module.h"

namespace frugal::train {

struct EvalResult {
  double accuracy = 0.0;  // fraction in [0, 1]
  double loss = 0.0;      // mean cross-entropy (no label smoothing)
  std::int64_t samples = 0;
  std::vector<std::int64_t> class_correct, class_total;  // per class
  bool interrupted = false;  // should_stop ended it early: the figures cover `samples` only
};

// The data of a run: the splits of `data` (and `test_data`) and their transforms, normalised by the
// training split's statistics (so evaluating a trained model sees what training saw).
struct RunData {
  data::DatasetSplits splits;
  data::Compose train_transforms, test_transforms;  // augmentation in the first only
};
RunData open_run_data(const std::string& data, const std::string& test_data, std::int64_t image_size, bool augment);
// The same for splits already open (run_shape's, train/batch_finder.h).
RunData open_run_data(data::DatasetSplits splits, std::int64_t image_size, bool augment);

// Test accuracy and loss of `model` (put in eval mode, no autograd) on `dataset` with `transforms`.
// `should_stop` is asked after every batch (SIGINT): when it says so the evaluation ends there,
// marked interrupted.
EvalResult evaluate(nn::Module& model, data::DatasetPtr dataset, const data::Compose& transforms,
                    std::int64_t batch_size, Device device, int workers, std::int64_t num_classes,
                    const std::function<bool()>& should_stop = {});

}  // namespace frugal::train
