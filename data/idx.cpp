// IDX parsing and element access, gzip decompression into the cache (zlib's inflate over the
// mapped .gz), IdxDataset and fashion_mnist.
#include "data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <system_error>
#include <vector>

#include "data/byte_order.h"

namespace frugal::data {

// ---- element types

namespace {
constexpr IdxType kIdxTypes[] = {IdxType::u8, IdxType::i8, IdxType::i16, IdxType::i32, IdxType::f32, IdxType::f64};

bool is_idx_type(std::uint8_t code) {
  return std::ranges::any_of(kIdxTypes, [&](IdxType type) { return static_cast<std::uint8_t>(type) == code; });
}

std::string hex_bytes(std::span<const std::uint8_t> bytes) {  // "00 00 08 03"
  std::ostringstream out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out << (i ? " " : "") << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(bytes[i]);
  }
  return out.str();
}
}  // namespace

std::string_view idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  FRUGAL_THROW(ValueError, "unknown IDX type code ", static_cast<int>(type));
}

std::size_t idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  FRUGAL_THROW(ValueError, "unknown IDX type code ", static_cast<int>(type));
}

// ---- IdxArray

namespace {

constexpr std::size_t kMagicBytes = 4;
constexpr std::size_t kMaxHeaderBytes = kMagicBytes + 4 * 255;  // 255 dims at most

// The whole size an IDX file with this header must have, or 0 while `head` (the file's first
// bytes) is too short to tell. ValueError, starting with `name`, for a header that is not IDX.
std::uint64_t idx_file_size(std::span<const std::uint8_t> head, const std::string& name) {
  if (head.size() < kMagicBytes) return 0;
  FRUGAL_CHECK_VALUE(head[0] == 0 && head[1] == 0 && is_idx_type(head[2]) && head[3] > 0, name,
                     ": not an IDX file: it starts ", hex_bytes(head.first(kMagicBytes)),
                     " (an IDX file starts with 00 00, a known element type and a number of dims)");
  const std::size_t header_bytes = kMagicBytes + 4 * std::size_t{head[3]};
  if (head.size() < header_bytes) return 0;
  auto data_bytes = static_cast<std::uint64_t>(idx_type_size(static_cast<IdxType>(head[2])));
  for (std::size_t d = 0; d < head[3]; ++d)
    FRUGAL_CHECK_VALUE(!__builtin_mul_overflow(data_bytes, load_be<std::uint32_t>(&head[kMagicBytes + 4 * d]), &data_bytes),
                       name, ": the IDX header's dims overflow 64 bits");
  return header_bytes + data_bytes;
}

}  // namespace

bool is_gzip(std::span<const std::uint8_t> bytes) { return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b; }

IdxArray IdxArray::parse(std::span<const std::uint8_t> bytes, std::string name) {
  FRUGAL_CHECK_VALUE(bytes.size() >= kMagicBytes, name, ": ", bytes.size(),
                     " bytes is too short for an IDX file (the magic number alone is 4 bytes)");
  FRUGAL_CHECK_VALUE(bytes[0] == 0 && bytes[1] == 0, name, ": wrong magic number ", hex_bytes(bytes.first(4)),
                     ": an IDX file starts with 00 00, the element type and the number of dims");
  FRUGAL_CHECK_VALUE(is_idx_type(bytes[2]), name, ": unknown IDX element type 0x", hex_bytes(bytes.subspan(2, 1)),
                     " (known: 08 u8, 09 i8, 0b i16, 0c i32, 0d f32, 0e f64)");
  const std::size_t ndims = bytes[3];
  FRUGAL_CHECK_VALUE(ndims > 0, name, ": the IDX header says 0 dims");
  const std::size_t header_bytes = kMagicBytes + 4 * ndims;
  FRUGAL_CHECK_VALUE(bytes.size() >= header_bytes, name, ": truncated header: ", ndims, " dims need ", header_bytes,
                     " header bytes, the file has ", bytes.size());

  IdxArray array;
  array.name_ = std::move(name);
  array.type_ = static_cast<IdxType>(bytes[2]);
  // Products are checked for overflow: 2^32 per dim, up to 255 dims, would wrap a 64-bit size.
  auto data_bytes = static_cast<std::int64_t>(idx_type_size(array.type_));
  bool overflow = false;
  for (std::size_t d = 0; d < ndims; ++d) {
    const auto dim = static_cast<std::int64_t>(load_be<std::uint32_t>(&bytes[kMagicBytes + 4 * d]));
    FRUGAL_CHECK_VALUE(dim > 0, array.name_, ": dim ", d, " is 0 (an IDX file must hold at least one element)");
    array.dims_.push_back(dim);
    overflow = overflow || __builtin_mul_overflow(data_bytes, dim, &data_bytes);
  }
  FRUGAL_CHECK_VALUE(!overflow, array.name_, ": dims ", shape_str(array.dims_), " of ", idx_type_name(array.type_),
                     " overflow: more than 2^63 bytes");
  const std::size_t found = bytes.size() - header_bytes;
  FRUGAL_CHECK_VALUE(static_cast<std::uint64_t>(data_bytes) == found, array.name_, ": dims ",
                     shape_str(array.dims_), " of ", idx_type_name(array.type_), " need ", data_bytes,
                     " data bytes after the ", header_bytes, "-byte header, the file has ", found,
                     static_cast<std::uint64_t>(data_bytes) > found ? " (truncated)" : " (trailing bytes)");
  array.data_ = bytes.subspan(header_bytes);
  return array;
}

IdxArray IdxArray::open(const std::string& path, const std::string& cache_dir) {
  // IDX files are tens of MB read every epoch: read them in now.
  auto file = std::make_shared<const MappedFile>(path, Access::willneed);
  // gzip by content (1f 8b), not by name: a gzipped file without ".gz" is still read, and a plain
  // one named ".gz" is not inflated.
  const bool gzipped = is_gzip(file->bytes());
  if (gzipped) file = std::make_shared<const MappedFile>(decompressed_copy(path, cache_dir), Access::willneed);
  IdxArray array = parse(file->bytes(), gzipped ? path + " (decompressed copy " + file->path() + ")" : path);
  array.file_ = std::move(file);
  return array;
}

double IdxArray::at(std::int64_t flat_index) const {
  FRUGAL_CHECK_INDEX(flat_index >= 0 && flat_index < numel(), name_, ": element ", flat_index,
                     " is out of range for dims ", shape_str(dims_));
  const std::uint8_t* element = data_.data() + flat_index * static_cast<std::int64_t>(idx_type_size(type_));
  switch (type_) {
    case IdxType::u8: return *element;
    case IdxType::i8: return static_cast<std::int8_t>(*element);
    case IdxType::i16: return load_be<std::int16_t>(element);
    case IdxType::i32: return load_be<std::int32_t>(element);
    case IdxType::f32: return load_be<float>(element);
    case IdxType::f64: return load_be<double>(element);
  }
  FRUGAL_THROW(ValueError, name_, ": unknown IDX type code ", static_cast<int>(type_));
}

std::span<const std::uint8_t> IdxArray::item(std::int64_t index) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < dims_[0], name_, ": item ", index, " is out of range for dims ",
                     shape_str(dims_));
  return data_.subspan(static_cast<std::size_t>(index) * item_bytes(), item_bytes());
}

void IdxArray::read_item(std::int64_t index, void* out) const {
  const std::span<const std::uint8_t> bytes = item(index);  // checks the index; not read through
  if (!file_) {
    std::memcpy(out, bytes.data(), bytes.size());
    return;
  }
  file_->file().read_at(static_cast<std::uint64_t>(bytes.data() - file_->data()), out, bytes.size());
}

// ---- the decompression cache

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/frugal";
  const char* home = std::getenv("HOME");
  FRUGAL_CHECK_VALUE(home && *home, "no cache folder: neither XDG_CACHE_HOME nor HOME is set; pass a cache_dir");
  return std::string(home) + "/.cache/frugal";
}

namespace {

// Inflates the whole of `gz` (one or more concatenated gzip members, as gzip -d accepts) into `out`,
// which must come to exactly the size its IDX header gives (idx_file_size of the first bytes): a
// gzipped file that is not IDX is refused at its first bytes, and a gzip bomb once its output
// passes what the header promised, before either fills the disk. `gz` is read with pread, not
// mapped: a source truncated while it is read is a FileError, not SIGBUS. Returns the output's CRC-32.
std::uint32_t gunzip(const RandomAccessFile& gz, AtomicFile& out) {
  z_stream stream{};
  // Window bits 15 (the largest window) + 32: detect the gzip (or zlib) header automatically.
  FRUGAL_CHECK_VALUE(inflateInit2(&stream, 15 + 32) == Z_OK, gz.path(), ": zlib's inflateInit2 failed");
  struct End {
    z_stream* stream;
    ~End() { inflateEnd(stream); }
  } end{&stream};

  std::vector<std::uint8_t> input(std::size_t{1} << 20), chunk(std::size_t{1} << 20);
  std::uint64_t fed = 0;  // bytes of gz handed to zlib so far
  std::vector<std::uint8_t> head;  // the output's first bytes, until the header's size is known
  std::uint64_t written = 0, expected = 0;  // expected: 0 until the header is complete
  uLong crc = crc32(0L, Z_NULL, 0);
  for (;;) {
    if (stream.avail_in == 0 && fed < gz.size()) {
      const auto next = static_cast<std::size_t>(std::min<std::uint64_t>(input.size(), gz.size() - fed));
      gz.read_at(fed, input.data(), next);
      stream.next_in = input.data();
      stream.avail_in = static_cast<uInt>(next);
      fed += next;
    }
    stream.next_out = chunk.data();
    stream.avail_out = static_cast<uInt>(chunk.size());
    const int status = inflate(&stream, Z_NO_FLUSH);
    const bool input_left = stream.avail_in > 0 || fed < gz.size();
    FRUGAL_CHECK_VALUE(status != Z_DATA_ERROR, gz.path(), ": corrupt gzip data at compressed byte ",
                       fed - stream.avail_in, ": ", stream.msg ? stream.msg : "no detail");
    // With input left and room for output, inflate always progresses: "no progress" means no input.
    FRUGAL_CHECK_VALUE(status != Z_BUF_ERROR, gz.path(), ": truncated gzip data: the file ends inside the stream");
    FRUGAL_CHECK_VALUE(status == Z_OK || status == Z_STREAM_END, gz.path(), ": zlib's inflate failed (status ",
                       status, ")");
    const std::size_t produced = chunk.size() - stream.avail_out;
    if (expected == 0) {  // head stays below kMaxHeaderBytes until then: no header is longer
      const std::size_t wanted = std::min(produced, kMaxHeaderBytes - head.size());
      head.insert(head.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(wanted));
      expected = idx_file_size(head, gz.path());
    }
    written += produced;
    FRUGAL_CHECK_VALUE(expected == 0 || written <= expected, gz.path(), ": decompresses to more than the ", expected,
                       " bytes its IDX header gives");
    out.write(chunk.data(), produced);
    crc = crc32(crc, chunk.data(), static_cast<uInt>(produced));
    if (status == Z_STREAM_END) {
      if (!input_left) {
        FRUGAL_CHECK_VALUE(expected != 0 && written == expected, gz.path(), ": decompresses to ", written,
                           " bytes, its IDX header gives ", expected == 0 ? std::string("none") : std::to_string(expected));
        return static_cast<std::uint32_t>(crc);
      }
      FRUGAL_CHECK_VALUE(inflateReset(&stream) == Z_OK, gz.path(), ": zlib's inflateReset failed");
    }
  }
}

// The sidecar of a cache copy: "SIZE CRC32\n", the copy's size in bytes and CRC-32 in hex.
std::string sidecar_text(std::uint64_t size, std::uint32_t crc) {
  std::ostringstream text;
  text << size << " " << std::hex << std::setw(8) << std::setfill('0') << crc << "\n";
  return text.str();
}

// The CRC-32 of the whole file, read with pread in 1 MiB pieces.
std::uint32_t file_crc(const RandomAccessFile& file) {
  std::vector<std::uint8_t> piece(std::size_t{1} << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::uint64_t at = 0; at < file.size();) {
    const auto count = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), file.size() - at));
    file.read_at(at, piece.data(), count);
    crc = crc32(crc, piece.data(), static_cast<uInt>(count));
    at += count;
  }
  return static_cast<std::uint32_t>(crc);
}

// Whether the cache copy is whole and unchanged: its sidecar exists and gives its size and CRC-32.
// Anything unreadable or different is "no": the caller decompresses again.
bool cache_copy_intact(const std::string& copy) {
  constexpr std::size_t kSidecarBytes = 64;  // "SIZE CRC32\n" is at most 20 + 1 + 8 + 1 bytes
  try {
    const RandomAccessFile sidecar(copy + ".crc32");
    if (sidecar.size() > kSidecarBytes) return false;
    std::string stored(static_cast<std::size_t>(sidecar.size()), '\0');
    sidecar.read_at(0, stored.data(), stored.size());
    const RandomAccessFile file(copy);
    return stored == sidecar_text(file.size(), file_crc(file));
  } catch (const FileError&) {
    return false;
  }
}

}  // namespace

std::string decompressed_copy(const std::string& gz_path, const std::string& cache_dir) {
  struct stat info {};
  FRUGAL_CHECK_AS(FileError, ::stat(gz_path.c_str(), &info) == 0, gz_path, ": cannot open: ",
                  std::system_category().message(errno));
  const std::string folder = cache_dir.empty() ? default_cache_dir() : cache_dir;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  FRUGAL_CHECK_AS(FileError, !error, folder, ": cannot create the cache folder: ", error.message());

  std::string stem = std::filesystem::path(gz_path).filename().string();
  stem.resize(stem.size() - (stem.ends_with(".gz") ? 3 : 0));
  // Size, modification time and status-change time: tools that keep a copy's mtime (cp -p, rsync
  // -t, touch -r) cannot set its ctime, so a replaced source is never served stale.
  auto nanoseconds = [](const timespec& t) { return static_cast<long long>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  const std::string copy = folder + "/" + stem + "." + std::to_string(info.st_size) + "." +
                           std::to_string(nanoseconds(info.st_mtim)) + "." + std::to_string(nanoseconds(info.st_ctim));
  if (cache_copy_intact(copy)) return copy;

  const RandomAccessFile gz(gz_path);
  AtomicFile out(copy);
  const std::uint32_t crc = gunzip(gz, out);
  const std::uint64_t size = out.size();
  out.commit();
  const std::string sidecar = sidecar_text(size, crc);  // after the copy: a sidecar vouches for a whole copy
  write_file_atomically(copy + ".crc32", {reinterpret_cast<const std::uint8_t*>(sidecar.data()), sidecar.size()});
  return copy;
}

// ---- IdxDataset

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, const std::string& cache_dir)
    : IdxDataset(IdxArray::open(images_path, cache_dir), IdxArray::open(labels_path, cache_dir)) {}

IdxDataset::IdxDataset(IdxArray images, IdxArray labels) : images_(std::move(images)), labels_(std::move(labels)) {
  FRUGAL_CHECK_VALUE(images_.type() == IdxType::u8 && images_.dims().size() == 3, images_.name(),
                     ": images must be a 3-D u8 IDX file (count, height, width), this one holds ",
                     idx_type_name(images_.type()), " of dims ", shape_str(images_.dims()));
  FRUGAL_CHECK_VALUE(labels_.type() == IdxType::u8 && labels_.dims().size() == 1, labels_.name(),
                     ": labels must be a 1-D u8 IDX file, this one holds ", idx_type_name(labels_.type()),
                     " of dims ", shape_str(labels_.dims()));
  FRUGAL_CHECK_VALUE(images_.dims()[0] == labels_.dims()[0], "IDX count mismatch: ", images_.name(), " holds ",
                     images_.dims()[0], " images but ", labels_.name(), " holds ", labels_.dims()[0], " labels");
  // Copied now, right after opening: get_into then never reads the labels file's mapping, which a
  // file truncated under the reader would turn into SIGBUS (core/mapped_file.h).
  label_bytes_.assign(labels_.data().begin(), labels_.data().end());
  num_classes_ = *std::ranges::max_element(label_bytes_) + 1;
}

Sample IdxDataset::get(std::int64_t index) const { return get_by_reading(index); }

std::int64_t IdxDataset::get_into(std::int64_t index, void* out) const {
  FRUGAL_CHECK_INDEX(index >= 0 && index < size(), "IdxDataset: index ", index, " is out of range for ", size(),
                     " samples of ", images_.name());
  images_.read_item(index, out);
  return label_bytes_[static_cast<std::size_t>(index)];
}

std::string IdxDataset::describe() const {
  return detail::str("IDX ", images_.name(), " + ", labels_.name(), ": ", size(), " samples of ",
                     shape_str(sample_shape()), " u8, ", num_classes_, " classes");
}

// ---- Fashion-MNIST

IdxDataset fashion_mnist(const std::string& split, const std::string& cache_dir, std::string_view folder) {
  FRUGAL_CHECK_VALUE(split == "train" || split == "test", "fashion_mnist: split must be \"train\" or \"test\", got \"",
                     split, "\"");
  const std::string prefix = std::string(folder) + (split == "train" ? "/train" : "/t10k");
  const std::string images = prefix + "-images-idx3-ubyte.gz", labels = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& path : {images, labels}) {
    FRUGAL_CHECK_AS(FileError, std::filesystem::exists(path), "Fashion-MNIST is not installed: ", path,
                    " is missing; install the Debian package dataset-fashion-mnist "
                    "(apt-get install dataset-fashion-mnist)");
  }
  return IdxDataset(images, labels, cache_dir);
}

}  // namespace frugal::data
