// open_dataset: a training run's train and test datasets from one path, whatever format is there.
// What a path is decides its format, checked in this order:
//   ""                      Fashion-MNIST as Debian ships it (fashion_mnist(), kFashionMnistFolder)
//   a file starting FRUGALSH a frugal shard (data/shard.h)
//   a folder holding        train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz]: IDX (MNIST,
//                           Fashion-MNIST); the test split is t10k-images/-labels beside them
//   a folder holding        data_batch_*.bin: CIFAR-10 (the batches in numeric order); test_batch.bin
//                           beside them is the test split
//   a folder holding        train/ and test/ (else val/): image folders, the train and test splits
//   a folder with subfolders an image folder (data/image_folder.h), images resized to image_size
// The test split of a shard or an image folder is a sibling named as the train one with its last
// "train" replaced by "test", else by "val": fashion-train.shard -> fashion-test.shard,
// imagenette/train -> imagenette/val. A name without "train" has no test split.
// Not here: reading the formats (each has its own file), transforms (data/transforms.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace frugal::data {

struct DatasetSplits {
  DatasetPtr train;
  DatasetPtr test;          // nullptr when no test split was found or given
  std::string description;  // one line: the format and where train and test came from
  // The files the splits are read from (IDX files, CIFAR batches, shards, the test shard found beside
  // one), or for an image folder the folder: what no output of the run may replace (core/output_paths.h).
  std::vector<std::string> sources;
};

struct OpenOptions {
  std::int64_t image_size = 32;  // an image folder's images are decoded to image_size x image_size
  std::string cache_dir{};       // where gzipped IDX files are decompressed; "" = default_cache_dir()
};

// The train split at `path` and its test split as found beside it (see the top of this file); with
// a non-empty `test_path`, the test split is opened from there instead: a shard or an image folder
// itself, an IDX or CIFAR-10 folder's test files, a folder of train/ and test/ its test/ (or val/). FileError naming the path when it does not exist
// or cannot be read; ValueError of one line naming the path for a format it cannot recognise (listing
// what was looked for), a format folder without its train (or, for test_path, test) files, and train
// and test splits that disagree in sample shape, dtype or class count.
DatasetSplits open_dataset(const std::string& path, const std::string& test_path = "",
                           const OpenOptions& options = {});

}  // namespace frugal::data
