// The IDX format of MNIST and Fashion-MNIST, and the Fashion-MNIST dataset Debian ships.
//   bytes 0-1   0x00 0x00
//   byte  2     element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   byte  3     number of dims, n
//   then n big-endian u32 dims, then the elements in row-major order, each big-endian.
// A plain file is mapped as it is; a gzipped one (told by its content, 1f 8b, not its name) is
// decompressed once into a cache folder and the copy is mapped (decompressed_copy). Elements stay big-endian in the mapping; IdxArray::at converts.
// Not here: writing IDX files (frugal writes shards, data/shard.h), other gzip uses.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/mapped_file.h"

namespace frugal::data {

enum class IdxType : std::uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };
std::string_view idx_type_name(IdxType type);  // "u8", "i8", "i16", "i32", "f32", "f64"
std::size_t idx_type_size(IdxType type);       // bytes per element

// One IDX file, parsed and checked: its dims, element type and elements. Cheap to copy (copies
// share the mapping). Immutable, so safe to read from several threads.
class IdxArray {
 public:
  // Parses bytes the caller owns and keeps alive as long as the array and its copies; `name` starts
  // every error message. ValueError for a wrong magic number, an unknown type, no dims, a zero dim,
  // dims whose byte count overflows, or data shorter or longer than the dims say.
  static IdxArray parse(std::span<const std::uint8_t> bytes, std::string name);
  // Maps `path` (a ".gz" path through decompressed_copy into cache_dir; "" means default_cache_dir())
  // and parses it. FileError for an unreadable file, ValueError as parse.
  static IdxArray open(const std::string& path, const std::string& cache_dir = "");

  IdxType type() const { return type_; }
  const Shape& dims() const { return dims_; }
  std::int64_t numel() const { return shape_numel(dims_); }
  // Element `flat_index` (row-major) converted from big-endian; a double holds every IDX type's
  // values exactly. IndexError outside [0, numel()).
  double at(std::int64_t flat_index) const;
  std::span<const std::uint8_t> data() const { return data_; }  // the elements, big-endian as stored
  // The bytes of item `index` along the first dim (an image of an image file), big-endian as stored.
  std::span<const std::uint8_t> item(std::int64_t index) const;
  std::size_t item_bytes() const { return data_.size() / static_cast<std::size_t>(dims_[0]); }
  // Copies item `index` (item_bytes() bytes) to `out`. From a file it is read with pread, not from
  // the mapping: FileError naming the file if it shrank since it was opened (core/mapped_file.h).
  void read_item(std::int64_t index, void* out) const;
  const std::string& name() const { return name_; }

 private:
  IdxArray() = default;

  std::shared_ptr<const MappedFile> file_;  // keeps the mapping alive; null for parse()d bytes
  std::string name_;
  IdxType type_ = IdxType::u8;
  Shape dims_;
  std::span<const std::uint8_t> data_;
};

// $XDG_CACHE_HOME/frugal, else $HOME/.cache/frugal; ValueError if neither variable is set.
std::string default_cache_dir();

// Whether `bytes` start with gzip's magic number, 1f 8b: how IdxArray::open tells a gzipped file.
bool is_gzip(std::span<const std::uint8_t> bytes);

// The path of a decompressed copy of the gzip file `gz_path` inside `cache_dir` ("" means
// default_cache_dir(); created if missing). The copy's name carries the source's size, modification
// time and status-change time ("train-images-idx3-ubyte.26421880.1590000000123456789.1590000000..."),
// so a changed source is decompressed again rather than served stale.
// The output must be an IDX file of exactly the size its header gives (ValueError otherwise, and no
// copy is left): a gzipped file of anything else never lands in the cache. It is written
// atomically (AtomicFile): a copy that exists is whole. Beside it a sidecar "COPY.crc32" holds the
// copy's size and CRC-32 (zlib's crc32), written after the copy: a copy is reused only when both
// match, so a copy edited or damaged on disk since (one flipped byte would change what is read) is
// silently decompressed again, never trusted. Checking costs one read of the copy (41 ms measured for
// Fashion-MNIST's 47 MB), which opening it reads in anyway. Copies of older sources are left in place.
// ValueError for corrupt or truncated gzip data (and then no file is left behind).
std::string decompressed_copy(const std::string& gz_path, const std::string& cache_dir = "");

// Images from a 3-D u8 IDX file (N, H, W) with labels from a 1-D u8 IDX file (N): samples are
// [1, H, W] u8, labels the stored bytes, num_classes() the largest label + 1.
class IdxDataset final : public Dataset {
 public:
  // Opens both files (IdxArray::open). ValueError if the images are not 3-D u8, the labels not 1-D
  // u8, or their counts differ.
  IdxDataset(const std::string& images_path, const std::string& labels_path, const std::string& cache_dir = "");
  IdxDataset(IdxArray images, IdxArray labels);  // the same checks

  std::int64_t size() const override { return images_.dims()[0]; }
  Sample get(std::int64_t index) const override;
  std::int64_t get_into(std::int64_t index, void* out) const override;
  Shape sample_shape() const override { return {1, images_.dims()[1], images_.dims()[2]}; }
  DType sample_dtype() const override { return DType::u8; }
  std::int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;

  const IdxArray& images() const { return images_; }
  const IdxArray& labels() const { return labels_; }

 private:
  IdxArray images_, labels_;
  std::vector<std::uint8_t> label_bytes_;  // the labels, copied when opened
  std::int64_t num_classes_ = 0;
};

// Where Debian's package dataset-fashion-mnist installs the four gzipped IDX files.
inline constexpr std::string_view kFashionMnistFolder = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's "train" (60000 samples) or "test" (10000) split: [1, 28, 28] u8 images, 10
// classes. The .gz files are decompressed once into cache_dir (see decompressed_copy). ValueError
// for another split; FileError naming the package dataset-fashion-mnist if the files are missing.
IdxDataset fashion_mnist(const std::string& split, const std::string& cache_dir = "",
                         std::string_view folder = kFashionMnistFolder);

}  // namespace frugal::data
