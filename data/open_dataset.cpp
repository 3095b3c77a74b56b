// open_dataset (see open_dataset.h): which format a path holds and where its splits are. Reading
// the files is left to each format's own dataset class.
#include "data/open_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/mapped_file.h"
#include "data/shard.h"

namespace frugal::data {

namespace {

namespace fs = std::filesystem;

enum class Format { shard, idx, cifar10, split_folders, image_folder };

std::string_view format_name(Format format) {
  switch (format) {
    case Format::shard: return "shard";
    case Format::idx: return "IDX folder";
    case Format::cifar10: return "CIFAR-10 folder";
    case Format::split_folders: return "folder of split image folders";
    case Format::image_folder: return "image folder";
  }
  return "?";
}

// Which split of a path to open: the one the path is for (a shard or an image folder itself, an
// IDX or CIFAR folder's train files), or the test split that goes with it (t10k-*, test_batch.bin,
// the sibling shard or folder).
enum class Split { own, test };

bool path_exists(const fs::path& path) {
  std::error_code error;
  return fs::exists(path, error);
}

// ---- IDX

// folder/name, else folder/name.gz (a plain file needs no decompression); "" if neither is there.
std::string plain_or_gz(const fs::path& folder, const std::string& name) {
  for (const std::string& file : {name, name + ".gz"})
    if (path_exists(folder / file)) return (folder / file).string();
  return "";
}

// The images of split "train" or "t10k" in an IDX folder; "" if absent.
std::string idx_images(const fs::path& folder, std::string_view prefix) {
  return plain_or_gz(folder, std::string(prefix) + "-images-idx3-ubyte");
}

DatasetPtr open_idx(const fs::path& folder, std::string_view prefix, const OpenOptions& options) {
  const std::string images = idx_images(folder, prefix);
  if (images.empty()) return nullptr;
  const std::string labels = plain_or_gz(folder, std::string(prefix) + "-labels-idx1-ubyte");
  FRUGAL_CHECK_VALUE(!labels.empty(), folder.string(), ": holds ", fs::path(images).filename().string(), " but no ",
                     prefix, "-labels-idx1-ubyte[.gz] beside it");
  return std::make_shared<IdxDataset>(images, labels, options.cache_dir);
}

// ---- CIFAR-10

// data_batch_N.bin in the folder, in the order of N (data_batch_10 after data_batch_9).
std::vector<std::string> cifar_train_batches(const fs::path& folder) {
  std::vector<std::pair<unsigned long, std::string>> numbered;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "data_batch_", kSuffix = ".bin";
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    const std::string number = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    const bool digits = std::ranges::all_of(number, [](unsigned char c) { return std::isdigit(c) != 0; });
    if (number.empty() || number.size() > 9 || !digits) continue;  // 9 digits: std::stoul cannot overflow
    numbered.emplace_back(std::stoul(number), entry.path().string());
  }
  std::ranges::sort(numbered);
  std::vector<std::string> paths;
  for (auto& [number, path] : numbered) paths.push_back(std::move(path));
  return paths;
}

// ---- shards and image folders: a test split is a sibling

// The sibling of `path` named with its last "train" replaced by "test", else by "val", whichever
// exists first; "" when there is none.
std::string sibling_test_split(const std::string& path) {
  fs::path own(path);
  if (!own.has_filename()) own = own.parent_path();  // "imagenette/train/" names the folder "train"
  const std::string name = own.filename().string();
  const std::size_t at = name.rfind("train");
  if (at == std::string::npos) return "";
  for (const std::string_view word : {"test", "val"}) {
    std::string sibling = name;
    sibling.replace(at, 5, word);
    const fs::path candidate = own.parent_path() / sibling;
    if (path_exists(candidate)) return candidate.string();
  }
  return "";
}

bool starts_with_shard_magic(const std::string& path) {
  const RandomAccessFile file(path);  // FileError for an unreadable or empty file
  char magic[sizeof kShardMagic] = {};
  if (file.size() < sizeof magic) return false;
  file.read_at(0, magic, sizeof magic);
  return std::memcmp(magic, kShardMagic, sizeof magic) == 0;
}

// The image folder of `folder`'s split: train/ for the train split, else test/, then val/; "" if absent.
std::string split_subfolder(const fs::path& folder, Split split) {
  for (const std::string_view name : split == Split::own ? std::vector<std::string_view>{"train"}
                                                         : std::vector<std::string_view>{"test", "val"}) {
    std::error_code error;
    if (fs::is_directory(folder / name, error)) return (folder / name).string();
  }
  return "";
}

bool has_subfolder(const fs::path& folder) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error))
    if (entry.is_directory(error)) return true;
  return false;
}

// ---- finding the format

Format detect(const std::string& path) {
  struct stat info {};
  FRUGAL_CHECK_AS(FileError, ::stat(path.c_str(), &info) == 0, path, ": ", path_error_text(errno));
  if (S_ISREG(info.st_mode) && starts_with_shard_magic(path)) return Format::shard;
  if (S_ISDIR(info.st_mode)) {
    if (!idx_images(path, "train").empty() || !idx_images(path, "t10k").empty()) return Format::idx;
    if (!cifar_train_batches(path).empty() || path_exists(fs::path(path) / "test_batch.bin")) return Format::cifar10;
    if (!split_subfolder(path, Split::own).empty() && !split_subfolder(path, Split::test).empty())
      return Format::split_folders;
    if (has_subfolder(path)) return Format::image_folder;
  }
  FRUGAL_THROW(ValueError, path,
               ": not a dataset format frugal recognises; looked for a shard file (starting FRUGALSH), or a "
               "folder of IDX files (train-images-idx3-ubyte[.gz] and labels), of CIFAR-10 batches "
               "(data_batch_*.bin) or of class subfolders of images");
}

// The split `split` of the dataset at `path`, in `format`; nullptr when it is not there.
DatasetPtr open_split(const std::string& path, Format format, Split split, const OpenOptions& options) {
  switch (format) {
    case Format::idx: return open_idx(path, split == Split::own ? "train" : "t10k", options);
    case Format::cifar10: {
      const std::vector<std::string> batches =
          split == Split::own ? cifar_train_batches(path) : std::vector<std::string>{path + "/test_batch.bin"};
      if (batches.empty() || !path_exists(batches.front())) return nullptr;
      return std::make_shared<CifarDataset>(batches, CifarKind::cifar10);
    }
    case Format::split_folders: {
      const std::string folder = split_subfolder(path, split);
      if (folder.empty()) return nullptr;
      return std::make_shared<ImageFolder>(folder, options.image_size, options.image_size);
    }
    case Format::shard:
    case Format::image_folder: {
      const std::string file = split == Split::own ? path : sibling_test_split(path);
      if (file.empty()) return nullptr;
      if (format == Format::shard) return std::make_shared<ShardDataset>(file);
      return std::make_shared<ImageFolder>(file, options.image_size, options.image_size);
    }
  }
  return nullptr;
}

// What a format folder must hold for the split asked of it, for the message that it does not.
std::string_view missing_split_text(Format format, Split split) {
  if (format == Format::idx)
    return split == Split::own ? "train-images-idx3-ubyte[.gz]" : "t10k-images-idx3-ubyte[.gz]";
  if (format == Format::split_folders) return split == Split::own ? "train/" : "test/ or val/";
  return split == Split::own ? "data_batch_*.bin" : "test_batch.bin";
}

DatasetPtr open_required(const std::string& path, Format format, Split split, const OpenOptions& options) {
  DatasetPtr dataset = open_split(path, format, split, options);
  FRUGAL_CHECK_VALUE(dataset != nullptr, path, ": no ", missing_split_text(format, split), " in this ",
                     format_name(format));
  return dataset;
}

void check_splits_agree(const Dataset& train, const Dataset& test, const std::string& test_where) {
  FRUGAL_CHECK_VALUE(train.sample_shape() == test.sample_shape() && train.sample_dtype() == test.sample_dtype(),
                     test_where, ": the test split's samples are ", shape_str(test.sample_shape()), " ",
                     test.sample_dtype(), ", the train split's ", shape_str(train.sample_shape()), " ",
                     train.sample_dtype());
  FRUGAL_CHECK_VALUE(train.num_classes() == test.num_classes(), test_where, ": the test split has ",
                     test.num_classes(), " classes, the train split ", train.num_classes());
}

// The files a format reads at `path` (both splits), or for an image folder the folder itself: what
// DatasetSplits::sources lists.
std::vector<std::string> format_sources(const std::string& path, Format format) {
  std::vector<std::string> files;
  const auto add = [&](const std::string& file) {
    if (!file.empty() && path_exists(file)) files.push_back(file);
  };
  switch (format) {
    case Format::idx:
      for (const char* prefix : {"train", "t10k"})
        for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
          const std::string name = (fs::path(path) / (std::string(prefix) + kind)).string();
          add(name);
          add(name + ".gz");
        }
      break;
    case Format::cifar10:
      files = cifar_train_batches(path);
      add((fs::path(path) / "test_batch.bin").string());
      break;
    case Format::shard:
    case Format::image_folder:  // the test split is a sibling (see the top of data/open_dataset.h)
      files.push_back(path);
      add(sibling_test_split(path));
      break;
    case Format::split_folders:
      files.push_back(path);
      break;
  }
  return files;
}

}  // namespace

DatasetSplits open_dataset(const std::string& path, const std::string& test_path, const OpenOptions& options) {
  DatasetSplits splits;
  std::string where;  // where the train split and, when found beside it, the test split came from
  std::string test_where = test_path;
  if (path.empty()) {
    splits.train = std::make_shared<IdxDataset>(fashion_mnist("train", options.cache_dir));
    if (test_path.empty()) splits.test = std::make_shared<IdxDataset>(fashion_mnist("test", options.cache_dir));
    splits.sources = format_sources(std::string(kFashionMnistFolder), Format::idx);
    where = detail::str("Fashion-MNIST (Debian's dataset-fashion-mnist)");
    if (test_where.empty()) test_where = kFashionMnistFolder;
  } else {
    const Format format = detect(path);
    splits.train = open_required(path, format, Split::own, options);
    if (test_path.empty()) splits.test = open_split(path, format, Split::test, options);
    splits.sources = format_sources(path, format);
    where = detail::str(format_name(format), " ", path);
    if (test_where.empty()) test_where = path;
  }
  if (!test_path.empty()) {
    const Format format = detect(test_path);
    // A folder of fixed names gives its test files or folder; a shard or an image folder is the test split.
    const bool named_files = format == Format::idx || format == Format::cifar10 || format == Format::split_folders;
    splits.test = open_required(test_path, format, named_files ? Split::test : Split::own, options);
    for (std::string& file : format_sources(test_path, format)) splits.sources.push_back(std::move(file));
  }
  if (splits.test) check_splits_agree(*splits.train, *splits.test, test_where);
  splits.description = detail::str(where, ": train ", splits.train->describe(), "; ",
                                   splits.test ? "test " + splits.test->describe() : std::string("no test split"));
  return splits;
}

}  // namespace frugal::data
