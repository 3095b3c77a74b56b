// data/ file formats: MappedFile and AtomicFile, IDX (every element type, big-endian corners, the
// gzip cache), CIFAR-10/100, frugal's shards (every dtype, byte layout, corruption), the dataset
// combinators, reading from several threads, and the real Fashion-MNIST files when installed.
// Every file is generated here in the real format, in a fresh temporary folder, with contents
// predictable by eye.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "data/byte_order.h"
#include "data/cifar.h"
#include "data/dataset_ops.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/mapped_file.h"
#include "data/shard.h"
#include "tests/cpu/temp_dir.h"
#include "tests/cpu/test_files.h"
#include "tests/skip.h"

using namespace frugal;
using namespace frugal::data;
namespace fs = std::filesystem;

using frugal::test::TempDir;
using namespace frugal::test;  // write_bytes, read_bytes, write_gz, idx_u8

namespace {

std::vector<std::string> files_in(const std::string& folder) {  // the names in a folder, sorted
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::ranges::sort(names);
  return names;
}

template <typename T>
void append_be(Bytes& bytes, T value) {
  std::uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes.push_back(raw[sizeof(T) - 1 - i]);  // x86 is little-endian
}

// An IDX header: 00 00 type ndims, then the dims as big-endian u32.
Bytes idx_header(IdxType type, const std::vector<std::uint32_t>& dims) {
  Bytes bytes = {0, 0, static_cast<std::uint8_t>(type), static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t dim : dims) append_be(bytes, dim);
  return bytes;
}

// A whole IDX file of big-endian values of type T.
template <typename T>
Bytes idx_file(IdxType type, const std::vector<std::uint32_t>& dims, const std::vector<T>& values) {
  Bytes bytes = idx_header(type, dims);
  for (const T value : values) append_be(bytes, value);
  return bytes;
}

// Images [count, height, width] with pixel (i, y, x) = 16 * i + 4 * y + x, labels as given.
void write_idx_pair(const std::string& images, const std::string& labels, std::uint32_t height, std::uint32_t width,
                    const std::vector<std::uint8_t>& label_values) {
  const auto count = static_cast<std::uint32_t>(label_values.size());
  std::vector<std::uint8_t> pixels;
  for (std::uint32_t i = 0; i < count; ++i)
    for (std::uint32_t y = 0; y < height; ++y)
      for (std::uint32_t x = 0; x < width; ++x) pixels.push_back(static_cast<std::uint8_t>(16 * i + 4 * y + x));
  write_bytes(images, idx_file(IdxType::u8, {count, height, width}, pixels));
  write_bytes(labels, idx_file(IdxType::u8, {count}, label_values));
}

// CIFAR records: label byte(s), then pixel (c, y, x) = (7 * record + 3 * c + y + x) % 256.
Bytes cifar_records(std::int64_t first, const std::vector<Bytes>& labels) {
  Bytes bytes;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    bytes.insert(bytes.end(), labels[r].begin(), labels[r].end());
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t y = 0; y < 32; ++y)
        for (std::int64_t x = 0; x < 32; ++x)
          bytes.push_back(static_cast<std::uint8_t>((7 * (first + std::int64_t(r)) + 3 * c + y + x) % 256));
  }
  return bytes;
}

doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }  // copies the text

std::string error_of(const auto& call) {  // the message() of the frugal::Error `call` throws
  try {
    call();
  } catch (const Error& error) {
    return error.message();
  }
  return "";
}

// get_into must write the bytes get() returns and return the same label, for every sample; and
// refuse an index out of range.
void check_get_into_matches_get(const Dataset& dataset) {
  Bytes row(sample_bytes(dataset));
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    CAPTURE(i);
    const Sample sample = dataset.get(i);
    CHECK(dataset.get_into(i, row.data()) == sample.label);
    CHECK(std::memcmp(row.data(), sample.input.contiguous().data_ptr(), row.size()) == 0);
  }
  CHECK_THROWS_AS(dataset.get_into(dataset.size(), row.data()), IndexError);
}

}  // namespace

// ---- MappedFile, AtomicFile

TEST_CASE("MappedFile maps a whole file, and missing, empty and folder paths are FileErrors naming them") {
  TempDir dir;
  write_bytes(dir / "five", {1, 2, 3, 4, 5});
  for (const Access access : {Access::normal, Access::sequential, Access::random, Access::willneed}) {
    const MappedFile file(dir / "five", access);
    CHECK(file.size() == 5);
    CHECK(file.path() == dir / "five");
    CHECK(std::ranges::equal(file.bytes(), Bytes{1, 2, 3, 4, 5}));
    CHECK(file.data()[4] == 5);
  }
  MappedFile moved_from(dir / "five");
  const MappedFile moved(std::move(moved_from));
  CHECK(moved.size() == 5);
  CHECK(moved_from.size() == 0);  // NOLINT(bugprone-use-after-move): the moved-from state is documented

  write_bytes(dir / "empty", {});
  CHECK_THROWS_WITH_AS(MappedFile(dir / "missing"), contains(dir / "missing: cannot open: No such file"),
                       FileError);
  CHECK_THROWS_WITH_AS(MappedFile(dir / "empty"), contains(dir / "empty: is empty"), FileError);
  CHECK_THROWS_WITH_AS(MappedFile(dir.path), contains(dir.path + ": is a folder"), FileError);
  CHECK_THROWS_WITH_AS(MappedFile("/dev/null"), contains("/dev/null: is not a regular file"), FileError);
}

TEST_CASE("MappedFile: a file it may not read says so") {
  if (::geteuid() == 0) FRUGAL_SKIP("running as root, which reads any file");
  TempDir dir;
  write_bytes(dir / "five", {1, 2, 3, 4, 5});
  fs::permissions(dir / "five", fs::perms::none);
  CHECK_THROWS_WITH_AS(MappedFile(dir / "five"), contains("five: cannot open: Permission denied"), FileError);
}

TEST_CASE("RandomAccessFile reads at offsets from many threads, and a file that shrank is a FileError") {
  TempDir dir;
  Bytes bytes(4096);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  write_bytes(dir / "file", bytes);
  const RandomAccessFile file(dir / "file");
  CHECK(file.size() == 4096);
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (std::uint64_t offset = static_cast<std::uint64_t>(t); offset + 100 <= 4096; offset += 61) {
        Bytes read(100);
        file.read_at(offset, read.data(), read.size());
        if (!std::equal(read.begin(), read.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset))) ++wrong;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  CHECK(wrong == 0);
  Bytes first(10), second(5);
  file.read_at(3000, first.data(), first.size(), second.data(), second.size());  // one preadv
  CHECK(std::equal(first.begin(), first.end(), bytes.begin() + 3000));
  CHECK(std::equal(second.begin(), second.end(), bytes.begin() + 3010));

  fs::resize_file(dir / "file", 1000);  // as if another program rewrote it under the reader
  Bytes read(100);
  CHECK_THROWS_WITH_AS(file.read_at(950, read.data(), read.size()),
                       contains(dir / "file: ends at offset 1000, it was 4096 bytes when opened"), FileError);
  CHECK_THROWS_WITH_AS(file.read_at(990, first.data(), first.size(), second.data(), second.size()),
                       contains("ends at offset 1000"), FileError);  // the file ends right after the first part
  CHECK_THROWS_WITH_AS(file.read_at(995, first.data(), first.size(), second.data(), second.size()),
                       contains("ends at offset 1000"), FileError);  // the file ends inside the first part
  file.read_at(985, first.data(), first.size(), second.data(), second.size());  // the last 15 bytes: fine
  CHECK_THROWS_WITH_AS(RandomAccessFile(dir / "missing"), contains("missing: cannot open"), FileError);
  write_bytes(dir / "empty", {});
  CHECK_THROWS_WITH_AS(RandomAccessFile(dir / "empty"), contains("empty: is empty"), FileError);
  CHECK_THROWS_WITH_AS(RandomAccessFile(dir.path), contains(": is a folder"), FileError);
}

TEST_CASE("AtomicFile: after a failed write (a full disk) nothing more is written or committed") {
  TempDir dir;
  // A file size limit stands in for a full disk: writes past it fail with EFBIG (SIGXFSZ ignored).
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = before;
  limited.rlim_cur = 1 << 20;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  {
    AtomicFile file(dir / "big");
    const Bytes chunk(1 << 20, 7);
    file.write(chunk.data(), chunk.size());  // buffered: one write() per MiB
    // Named by the file the caller asked for, never by a temporary name it never chose.
    CHECK_THROWS_WITH_AS(file.write(chunk.data(), chunk.size()),
                         contains(dir / "big: cannot write it: write failed: File too large"), WriteError);
    CHECK_THROWS_WITH_AS(file.write("x", 1), contains("write after a failed write: the file is abandoned"),
                         FileError);
    CHECK_THROWS_WITH_AS(file.commit(), contains("commit after a failed write"), FileError);
  }
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &before) == 0);
  std::signal(SIGXFSZ, previous_handler);
  CHECK(files_in(dir.path).empty());  // no file under the name, no temporary file
}

TEST_CASE("AtomicFile: nothing under the final name before commit, no temporary file left after") {
  TempDir dir;
  const std::string path = dir / "out";
  {
    AtomicFile file(path);
    file.write("abcdef", 6);
    CHECK(file.size() == 6);
    CHECK_FALSE(fs::exists(path));
    if (file.temp_path().empty()) {  // an O_TMPFILE file: nothing named in the folder at all
      CHECK(files_in(dir.path).empty());
    } else {
      CHECK(fs::exists(file.temp_path()));
      CHECK(file.temp_path().starts_with(path + ".tmp-" + std::to_string(::getpid()) + "-"));
    }
  }  // destroyed uncommitted
  CHECK(files_in(dir.path).empty());

  {
    AtomicFile file(path);
    file.write("abcdef", 6);
    file.write_at(1, "XY", 2);  // a header patched at the end
    file.write("g", 1);
    CHECK_THROWS_AS(file.write_at(6, "ZZ", 2), ValueError);  // past what was written
    file.commit();
    CHECK_THROWS_AS(file.write("h", 1), FileError);
  }
  CHECK(read_bytes(path) == Bytes{'a', 'X', 'Y', 'd', 'e', 'f', 'g'});
  CHECK((fs::status(path).permissions() & fs::perms::others_read) != fs::perms::none);
  CHECK(files_in(dir.path) == std::vector<std::string>{"out"});

  write_file_atomically(path, Bytes{9, 8});  // replaces the old file whole
  CHECK(read_bytes(path) == Bytes{9, 8});

  // A failed rename (a folder that is not empty took the name after the file was opened) leaves
  // neither file nor temp file.
  {
    AtomicFile file(dir / "taken");
    file.write("x", 1);
    fs::create_directories(dir / "taken/inside");
    CHECK_THROWS_WITH_AS(file.commit(), contains(dir / "taken: cannot write it: rename into place failed"), WriteError);
  }
  CHECK(files_in(dir.path) == std::vector<std::string>{"out", "taken"});
  // A folder (a device, a FIFO) under the name is refused before anything is written.
  CHECK_THROWS_WITH_AS(write_file_atomically(dir / "taken", Bytes{1}), contains(dir / "taken: is a folder"), FileError);
  CHECK_THROWS_WITH_AS(AtomicFile(dir / "no/such/folder/x"), contains("cannot create a temporary file"),
                       FileError);
}

TEST_CASE("AtomicFile: the temporary files a killed writer of the same file left are removed, no others") {
  TempDir dir;
  const pid_t child = ::fork();  // a process id that is certainly not running once reaped
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = std::to_string(child), alive = std::to_string(::getpid());
  for (const std::string& name : std::vector<std::string>{"out.tmp-" + dead + "-AbC123", "out.tmp-" + dead + "-7", "out.tmp-" + alive + "-x",
                                 "other.tmp-" + dead + "-x", "out.tmp-notapid", "out"}) {
    write_bytes(dir / name, Bytes(100, 1));
  }
  write_file_atomically(dir / "out", Bytes{2});
  CHECK(files_in(dir.path) ==
        std::vector<std::string>{"other.tmp-" + dead + "-x", "out", "out.tmp-" + alive + "-x", "out.tmp-notapid"});
  CHECK(read_bytes(dir / "out") == Bytes{2});
}

// ---- IDX

TEST_CASE("IDX: every element type converted from big-endian, dims of 256 and more") {
  const auto parse = [](const Bytes& bytes) { return IdxArray::parse(bytes, "t.idx"); };

  const Bytes u8 = idx_file<std::uint8_t>(IdxType::u8, {2, 3}, {0, 1, 2, 253, 254, 255});
  const IdxArray u8_array = parse(u8);
  CHECK(u8_array.type() == IdxType::u8);
  CHECK(u8_array.dims() == Shape{2, 3});
  CHECK(u8_array.at(3) == 253);
  CHECK(u8_array.at(5) == 255);
  CHECK(std::ranges::equal(u8_array.item(1), Bytes{253, 254, 255}));

  const Bytes i8 = idx_file<std::int8_t>(IdxType::i8, {5}, {-128, -1, 0, 1, 127});
  CHECK(parse(i8).at(0) == -128);
  CHECK(parse(i8).at(1) == -1);
  CHECK(parse(i8).at(4) == 127);

  const Bytes i16 = idx_file<std::int16_t>(IdxType::i16, {4}, {-32768, -2, 0x0102, 32767});
  CHECK(i16[8] == 0x80);  // big-endian on disk: the high byte first
  CHECK(parse(i16).at(0) == -32768);
  CHECK(parse(i16).at(1) == -2);
  CHECK(parse(i16).at(2) == 258);
  CHECK(parse(i16).at(3) == 32767);

  // 2^24 + 1 is not a float: an i32 passed through float would lose it.
  constexpr std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  const Bytes i32 = idx_file<std::int32_t>(IdxType::i32, {1, 4}, {16777217, kMin, 0x01020304, kMax});
  CHECK(parse(i32).at(0) == 16777217);
  CHECK(parse(i32).at(1) == -2147483648.0);
  CHECK(parse(i32).at(2) == 16909060);
  CHECK(parse(i32).at(3) == 2147483647);

  const Bytes f32 = idx_file<float>(IdxType::f32, {4}, {1.5f, -0.0f, 3.4e38f, 1e-45f});
  CHECK(parse(f32).at(0) == 1.5);
  CHECK(std::signbit(parse(f32).at(1)));
  CHECK(parse(f32).at(2) == double(3.4e38f));
  CHECK(parse(f32).at(3) == double(1e-45f));  // the smallest subnormal

  const Bytes f64 = idx_file<double>(IdxType::f64, {3}, {0.1, -1e300, 9007199254740993.0});
  CHECK(parse(f64).at(0) == 0.1);
  CHECK(parse(f64).at(1) == -1e300);
  CHECK(parse(f64).at(2) == 9007199254740993.0);

  // Dims of 256 and 65537 need the upper bytes of the big-endian u32.
  const Bytes wide = idx_file<std::uint8_t>(IdxType::u8, {257, 2}, std::vector<std::uint8_t>(514, 7));
  CHECK(parse(wide).dims() == Shape{257, 2});
  const Bytes long_1d = idx_file<std::uint8_t>(IdxType::u8, {65537}, std::vector<std::uint8_t>(65537, 1));
  CHECK(parse(long_1d).dims() == Shape{65537});
  CHECK(parse(long_1d).numel() == 65537);
  CHECK_THROWS_AS(parse(long_1d).at(65537), IndexError);
  CHECK_THROWS_AS(parse(wide).item(-1), IndexError);
}

TEST_CASE("IDX: bad files are ValueErrors naming the file and what is wrong") {
  const auto error = [](const Bytes& bytes) { return error_of([&] { IdxArray::parse(bytes, "bad.idx"); }); };
  CHECK(error({0, 0, 8}) == "bad.idx: 3 bytes is too short for an IDX file (the magic number alone is 4 bytes)");
  CHECK(error({1, 0, 8, 1, 0, 0, 0, 1, 5}).starts_with("bad.idx: wrong magic number 01 00 08 01"));
  CHECK(error({0, 0, 0x0a, 1, 0, 0, 0, 1, 5}).starts_with("bad.idx: unknown IDX element type 0x0a"));
  CHECK(error({0, 0, 8, 0}) == "bad.idx: the IDX header says 0 dims");
  CHECK(error({0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1}) ==
        "bad.idx: truncated header: 3 dims need 16 header bytes, the file has 12");
  CHECK(error(idx_file<std::uint8_t>(IdxType::u8, {2, 0}, {})).starts_with("bad.idx: dim 1 is 0"));
  CHECK(error(idx_header(IdxType::f64, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF})) ==
        "bad.idx: dims [4294967295, 4294967295, 4294967295] of f64 overflow: more than 2^63 bytes");
  CHECK(error(idx_file<std::int32_t>(IdxType::i32, {3}, {1, 2})) ==
        "bad.idx: dims [3] of i32 need 12 data bytes after the 8-byte header, the file has 8 (truncated)");
  CHECK(error(idx_file<std::uint8_t>(IdxType::u8, {2}, {1, 2, 3})) ==
        "bad.idx: dims [2] of u8 need 2 data bytes after the 8-byte header, the file has 3 (trailing bytes)");
}

TEST_CASE("IdxDataset: [1, H, W] u8 samples under MemoryTag::data, errors for mismatched counts and layouts") {
  TempDir dir;
  write_idx_pair(dir / "images", dir / "labels", 2, 4, {2, 0, 5});
  const IdxDataset dataset(dir / "images", dir / "labels", dir / "cache");
  CHECK(dataset.size() == 3);
  CHECK(dataset.sample_shape() == Shape{1, 2, 4});
  CHECK(dataset.sample_dtype() == DType::u8);
  CHECK(dataset.num_classes() == 6);
  const Sample sample = dataset.get(1);
  CHECK(sample.label == 0);
  CHECK(sample.input.shape() == Shape{1, 2, 4});
  CHECK(sample.input.to_vector<int>() == std::vector<int>{16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(sample.input.storage()->tag() == MemoryTag::data);
  CHECK(dataset.get(2).label == 5);
  CHECK(dataset.describe() ==
        "IDX " + dir / "images" + " + " + dir / "labels" + ": 3 samples of [1, 2, 4] u8, 6 classes");
  CHECK_THROWS_AS(dataset.get(3), IndexError);
  CHECK_THROWS_AS(dataset.get(-1), IndexError);
  CHECK_FALSE(fs::exists(dir / "cache"));  // plain files are mapped as they are

  write_idx_pair(dir / "images2", dir / "labels2", 2, 4, {1, 1});
  CHECK_THROWS_WITH_AS(IdxDataset(dir / "images", dir / "labels2"),
                       contains("IDX count mismatch: " + dir / "images" + " holds 3 images but " + dir / "labels2" +
                                         " holds 2 labels"),
                       ValueError);
  CHECK_THROWS_WITH_AS(IdxDataset(dir / "labels", dir / "labels"),
                       contains("images must be a 3-D u8 IDX file (count, height, width), this one holds u8 of "
                                "dims [3]"),
                       ValueError);
  CHECK_THROWS_WITH_AS(IdxDataset(dir / "images", dir / "images"),
                       contains("labels must be a 1-D u8 IDX file, this one holds u8 of dims [3, 2, 4]"),
                       ValueError);
  write_bytes(dir / "i32_images", idx_file<std::int32_t>(IdxType::i32, {3, 1, 1}, {1, 2, 3}));
  CHECK_THROWS_AS(IdxDataset(dir / "i32_images", dir / "labels"), ValueError);
  CHECK_THROWS_AS(IdxDataset(dir / "missing", dir / "labels"), FileError);
}

TEST_CASE("IDX .gz: decompressed once into the cache, reused after, decompressed again when the source changes") {
  TempDir dir;
  const std::string gz = dir / "labels-idx1-ubyte.gz", cache = dir / "cache";
  write_gz(gz, idx_file<std::uint8_t>(IdxType::u8, {3}, {4, 5, 6}));
  CHECK(IdxArray::open(gz, cache).at(2) == 6);
  const std::vector<std::string> first = files_in(cache);
  REQUIRE(first.size() == 2);  // the copy and its sidecar (size and CRC-32)
  CHECK(first[0].starts_with("labels-idx1-ubyte." + std::to_string(fs::file_size(gz)) + "."));
  CHECK(first[1] == first[0] + ".crc32");
  struct stat before {};
  REQUIRE(::stat((cache + "/" + first[0]).c_str(), &before) == 0);

  const IdxArray again = IdxArray::open(gz, cache);  // reuses the copy: same file, not rewritten
  CHECK(again.at(0) == 4);
  CHECK(again.name() == gz + " (decompressed copy " + cache + "/" + first[0] + ")");
  struct stat after {};
  REQUIRE(::stat((cache + "/" + first[0]).c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);

  // A copy changed on disk since (one byte), or one without its sidecar, is not trusted: it is
  // decompressed again, silently, and reads as the source says.
  const std::string copy = cache + "/" + first[0];
  Bytes edited = read_bytes(copy);
  edited.back() = 99;
  write_bytes(copy, edited);
  CHECK(IdxArray::open(gz, cache).at(2) == 6);
  CHECK(read_bytes(copy).back() == 6);
  write_bytes(copy, edited);
  fs::remove(copy + ".crc32");
  CHECK(IdxArray::open(gz, cache).at(2) == 6);
  CHECK(files_in(cache) == first);

  // The same size, new contents, a new modification time: decompressed again.
  write_gz(gz, idx_file<std::uint8_t>(IdxType::u8, {3}, {7, 8, 9}));
  fs::last_write_time(gz, fs::last_write_time(gz) + std::chrono::seconds(5));
  CHECK(IdxArray::open(gz, cache).at(2) == 9);
  CHECK(files_in(cache).size() == 4);

  // Truncated or corrupt gzip data: a ValueError, and no copy and no temporary file in the cache.
  Bytes truncated = read_bytes(gz);
  REQUIRE(truncated.size() > 6);
  truncated.erase(truncated.end() - 6, truncated.end());
  write_bytes(dir / "cut.gz", truncated);
  CHECK_THROWS_WITH_AS(IdxArray::open(dir / "cut.gz", dir / "cache2"),
                       contains(dir / "cut.gz: truncated gzip data"), ValueError);
  Bytes corrupt = read_bytes(gz);
  corrupt[3] = 0xff;  // gzip header flags with reserved bits set
  write_bytes(dir / "corrupt.gz", corrupt);
  CHECK_THROWS_WITH_AS(IdxArray::open(dir / "corrupt.gz", dir / "cache2"),
                       contains(dir / "corrupt.gz: corrupt gzip data"), ValueError);
  CHECK(files_in(dir / "cache2").empty());
  CHECK_THROWS_AS(IdxArray::open(dir / "missing.gz", cache), FileError);

  // Gzip is told by content: a gzipped IDX without ".gz" is inflated, a plain IDX named ".gz" is not.
  write_gz(dir / "gzipped-labels", idx_file<std::uint8_t>(IdxType::u8, {2}, {3, 4}));
  CHECK(IdxArray::open(dir / "gzipped-labels", dir / "cache3").at(1) == 4);
  write_bytes(dir / "plain.gz", idx_file<std::uint8_t>(IdxType::u8, {2}, {5, 6}));
  CHECK(IdxArray::open(dir / "plain.gz", dir / "cache3").name() == dir / "plain.gz");
  CHECK(files_in(dir / "cache3").size() == 2);

  // Gzipped data that is not IDX, or more of it than its header gives: refused while inflating,
  // and nothing lands in the cache.
  write_gz(dir / "archive.tar.gz", Bytes(4096, 'x'));
  CHECK_THROWS_WITH_AS(IdxArray::open(dir / "archive.tar.gz", dir / "cache4"),
                       contains("archive.tar.gz: not an IDX file: it starts 78 78 78 78"), ValueError);
  // A header that promises 2 bytes, then 3 MiB of zeros. (Built by copying the header in: GCC 12
  // under ASan warns, wrongly, about resize() on the vector idx_file returns.)
  const Bytes header = idx_file<std::uint8_t>(IdxType::u8, {2}, {1, 2});
  Bytes bomb(std::size_t{3} << 20, 0);
  std::copy(header.begin(), header.end(), bomb.begin());
  write_gz(dir / "bomb.gz", bomb);
  CHECK_THROWS_WITH_AS(IdxArray::open(dir / "bomb.gz", dir / "cache4"),
                       contains("bomb.gz: decompresses to more than the 10 bytes its IDX header gives"), ValueError);
  CHECK(files_in(dir / "cache4").empty());
}

TEST_CASE("default_cache_dir follows XDG_CACHE_HOME, then HOME") {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK(default_cache_dir() == "/x/cache/frugal");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  CHECK(default_cache_dir() == "/home/someone/.cache/frugal");
  ::unsetenv("HOME");
  CHECK_THROWS_AS(default_cache_dir(), ValueError);
  if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) ::setenv("HOME", saved_home.c_str(), 1);
}

TEST_CASE("Fashion-MNIST: a missing package or an unknown split is named") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(fashion_mnist("train", dir / "cache", dir.path),
                       contains("install the Debian package dataset-fashion-mnist"), FileError);
  CHECK_THROWS_AS(fashion_mnist("validation", dir / "cache"), ValueError);
}

TEST_CASE("Fashion-MNIST from the Debian package: 60000 + 10000 samples, [1, 28, 28], labels below 10") {
  if (!fs::exists(std::string(kFashionMnistFolder) + "/train-images-idx3-ubyte.gz"))
    FRUGAL_SKIP("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
  TempDir dir;
  for (const auto& [split, count] : {std::pair{"train", 60000}, std::pair{"test", 10000}}) {
    const IdxDataset dataset = fashion_mnist(split, dir / "cache");  // one decompression of each file
    CHECK(dataset.size() == count);
    CHECK(dataset.sample_shape() == Shape{1, 28, 28});
    CHECK(dataset.num_classes() == 10);
    std::vector<std::int64_t> per_class(10);
    for (const std::uint8_t label : dataset.labels().data()) ++per_class.at(label);
    CHECK(per_class == std::vector<std::int64_t>(10, count / 10));  // balanced classes
    const Sample first = dataset.get(0);
    CHECK(first.label == 9);  // both splits open with an ankle boot
    CHECK(first.input.at<int>({0, 0, 0}) == 0);  // black background
  }
}

TEST_CASE("IDX and CIFAR files truncated after they were opened: a FileError naming the file, not SIGBUS") {
  // Records are read with pread, not from the mapping, where a lost page would kill the process.
  TempDir dir;
  write_idx_pair(dir / "images", dir / "labels", 2, 4, {2, 0, 5});
  const IdxDataset idx(dir / "images", dir / "labels");
  write_bytes(dir / "c10.bin", cifar_records(0, {{3}, {9}, {1}}));
  const CifarDataset cifar({dir / "c10.bin"}, CifarKind::cifar10);
  fs::resize_file(dir / "images", 16 + 8);  // the header and the first image
  fs::resize_file(dir / "labels", 8);       // only the header: the labels were copied when opened
  fs::resize_file(dir / "c10.bin", 3073 + 100);
  std::vector<std::uint8_t> out(3072);
  CHECK(idx.get_into(0, out.data()) == 2);
  CHECK_THROWS_WITH_AS(idx.get_into(2, out.data()), contains(dir / "images: ends at offset 32, it was 40 bytes when opened"), FileError);
  CHECK(cifar.get_into(0, out.data()) == 3);
  CHECK_THROWS_WITH_AS(cifar.get_into(1, out.data()), contains(dir / "c10.bin: ends at offset 3173"), FileError);
  CHECK_THROWS_WITH_AS(cifar.get(2), contains(dir / "c10.bin: ends at offset 6146"), FileError);
}

// ---- CIFAR

TEST_CASE("CIFAR-10 and CIFAR-100: [3, 32, 32] planar samples over several files, labels checked per record") {
  TempDir dir;
  write_bytes(dir / "a.bin", cifar_records(0, {{3}, {9}}));
  write_bytes(dir / "b.bin", cifar_records(2, {{0}, {10}, {4}}));  // record 1 of b.bin is corrupt
  const CifarDataset cifar10({dir / "a.bin", dir / "b.bin"}, CifarKind::cifar10);
  CHECK(cifar10.size() == 5);
  CHECK(cifar10.num_classes() == 10);
  CHECK(cifar10.sample_shape() == Shape{3, 32, 32});
  CHECK(cifar10.get(1).label == 9);
  const Sample sample = cifar10.get(4);  // b.bin's record 2, the dataset's record 4
  CHECK(sample.label == 4);
  CHECK(sample.input.at<int>({0, 0, 0}) == 28);
  CHECK(sample.input.at<int>({2, 31, 1}) == (28 + 6 + 31 + 1));
  CHECK(sample.input.at<int>({1, 5, 30}) == (28 + 3 + 5 + 30) % 256);
  CHECK(sample.input.storage()->tag() == MemoryTag::data);
  CHECK_THROWS_WITH_AS(cifar10.get(3), contains(dir / "b.bin: record 1 has label 10, out of range for the 10 classes"),
                       ValueError);
  CHECK_THROWS_AS(cifar10.get(5), IndexError);
  CHECK(cifar10.describe() ==
        "CIFAR-10 " + dir / "a.bin" + " and 1 more files: 5 samples of [3, 32, 32] u8, 10 classes");

  write_bytes(dir / "c100.bin", cifar_records(0, {{19, 99}, {5, 42}, {20, 100}}));
  const CifarDataset fine({dir / "c100.bin"}, CifarKind::cifar100_fine);
  const CifarDataset coarse({dir / "c100.bin"}, CifarKind::cifar100_coarse);
  CHECK(fine.num_classes() == 100);
  CHECK(coarse.num_classes() == 20);
  CHECK(fine.get(0).label == 99);
  CHECK(coarse.get(0).label == 19);
  CHECK(fine.get(1).label == 42);
  CHECK(coarse.get(1).label == 5);
  CHECK(fine.get(1).input.at<int>({0, 0, 0}) == 7);
  CHECK_THROWS_WITH_AS(fine.get(2), contains("record 2 has label 100, out of range for the 100 classes"), ValueError);
  CHECK_THROWS_WITH_AS(coarse.get(2), contains("record 2 has label 20, out of range for the 20 classes"), ValueError);

  // A CIFAR-100 file read as CIFAR-10: 9222 bytes are 3 records of 3073 and 3 bytes over.
  CHECK_THROWS_WITH_AS(CifarDataset({dir / "c100.bin"}, CifarKind::cifar10),
                       contains(dir / "c100.bin: 9222 bytes is not a whole number of CIFAR-10 records of 3073 "
                                               "bytes (3 records and 3 bytes left over)"),
                       ValueError);
  CHECK_THROWS_AS(CifarBatch::parse({}, "empty", CifarKind::cifar10), ValueError);
  CHECK_THROWS_AS(CifarDataset({}, CifarKind::cifar10), ValueError);
  CHECK_THROWS_AS(CifarDataset({dir / "missing.bin"}, CifarKind::cifar10), FileError);
}

// ---- shards

TEST_CASE("Shard round trip: every sample dtype, every label dtype, strided samples") {
  TempDir dir;
  // Each sample dtype once, the label dtypes in turn (each commit syncs to disk: 8 shards, not 24).
  constexpr DType kLabelDTypes[] = {DType::u8, DType::i32, DType::i64};
  for (std::size_t d = 0; d < std::size(kAllDTypes); ++d) {
    const DType sample_dtype = kAllDTypes[d], label_dtype = kLabelDTypes[d % 3];
    CAPTURE(sample_dtype);
    CAPTURE(label_dtype);
    const std::string path = dir / "shard";
    const std::int64_t big_label = label_dtype == DType::u8 ? 255 : label_dtype == DType::i32 ? 2147483647 : 1ll << 40;
    const std::vector<std::int64_t> labels = {3, 0, big_label};
    std::vector<std::vector<double>> samples;  // as written, row-major [2, 3]
    {
      ShardWriter writer(path, {2, 3}, sample_dtype, label_dtype);
      for (std::int64_t r = 0; r < 3; ++r) {
        // A [3, 2] tensor transposed: a [2, 3] view whose strides are not row-major.
        std::vector<double> stored(6);
        for (int i = 0; i < 6; ++i) stored[i] = sample_dtype == DType::boolean ? (i + r) % 2 : 10 * r + i;
        const Tensor sample = from_vector(stored, {3, 2}).to(sample_dtype).t();
        REQUIRE_FALSE(sample.is_contiguous());
        samples.push_back(sample.to_vector<double>());
        if (r == 1) {
          const Tensor contiguous = sample.contiguous();
          writer.add_raw(contiguous.data_ptr(), labels[r]);
        } else {
          writer.add(sample, labels[r]);
        }
      }
      CHECK(writer.records() == 3);
      writer.finish();
    }
    const ShardDataset shard(path);
    const ShardInfo& info = shard.info();
    CHECK(shard.size() == 3);
    CHECK(shard.sample_shape() == Shape{2, 3});
    CHECK(shard.sample_dtype() == sample_dtype);
    CHECK(shard.num_classes() == big_label + 1);
    CHECK(info.label_dtype == label_dtype);
    CHECK(info.record_size % kShardAlignment == 0);
    CHECK(info.label_offset % static_cast<std::int64_t>(dtype_size(label_dtype)) == 0);
    CHECK(static_cast<std::int64_t>(fs::file_size(path)) == kShardHeaderBytes + 3 * info.record_size);
    for (std::int64_t r = 0; r < 3; ++r) {
      const Sample sample = shard.get(r);
      CHECK(sample.label == labels[r]);
      CHECK(sample.input.dtype() == sample_dtype);
      CHECK(sample.input.to_vector<double>() == samples[r]);
      CHECK(sample.input.storage()->tag() == MemoryTag::data);
    }
    CHECK(files_in(dir.path) == std::vector<std::string>{"shard"});
    fs::remove(path);
  }
}

TEST_CASE("ShardDataset: a shard cut short after it was opened is a FileError, not a crash") {
  TempDir dir;
  const std::string path = dir / "shard";
  {
    ShardWriter writer(path, {4}, DType::u8);
    const Bytes sample{1, 2, 3, 4};
    for (int r = 0; r < 3; ++r) writer.add_raw(sample.data(), r);
    writer.finish();
  }
  const ShardDataset shard(path);
  const auto opened = std::make_shared<const ShardDataset>(path);  // for the loader below
  CHECK(shard.get(2).label == 2);
  fs::resize_file(path, static_cast<std::uintmax_t>(kShardHeaderBytes + shard.info().record_size));
  CHECK(shard.get(0).label == 0);
  CHECK_THROWS_WITH_AS(shard.get(2), contains(path + ": ends at offset"), FileError);
  CHECK_THROWS_AS(shard.get(3), IndexError);

  // Through the loader (get_into, in a worker): the same FileError type, naming the sample.
  DataLoader loader(opened, {.batch_size = 3, .num_workers = 1});
  loader.start_epoch(0);
  CHECK_THROWS_WITH_AS(loader.next(), contains("sample 1: " + path + ": ends at offset"), FileError);
}

TEST_CASE("Shard layout, byte by byte") {
  // u8 [3, 5, 5] with i64 labels: 75 sample bytes, the label at 80 (a multiple of 8), records of 128.
  const ShardInfo layout = shard_layout({3, 5, 5}, DType::u8, DType::i64);
  CHECK(layout.sample_bytes == 75);
  CHECK(layout.label_offset == 80);
  CHECK(layout.record_size == 128);
  // Fashion-MNIST's [1, 28, 28] u8: 784 + 8 = 792 bytes round up to 832 (13 cache lines).
  CHECK(shard_layout({1, 28, 28}, DType::u8, DType::i64).record_size == 832);
  CHECK(shard_layout({1, 28, 28}, DType::u8, DType::u8).record_size == 832);
  CHECK(shard_layout({7}, DType::f32, DType::i32).label_offset == 28);
  CHECK(shard_layout({}, DType::f64, DType::u8).record_size == 64);  // a scalar sample

  TempDir dir;
  ShardWriter writer(dir / "s", {3, 5, 5}, DType::u8, DType::i64);
  std::vector<std::uint8_t> sample(75);
  for (std::size_t i = 0; i < sample.size(); ++i) sample[i] = static_cast<std::uint8_t>(i);
  writer.add_raw(sample.data(), 6);
  writer.add_raw(sample.data(), 2);
  writer.finish();
  CHECK(writer.info().num_classes == 7);

  const Bytes bytes = read_bytes(dir / "s");
  REQUIRE(bytes.size() == 128 + 2 * 128);
  CHECK(std::memcmp(bytes.data(), "FRUGALSH", 8) == 0);
  CHECK(load_le<std::uint32_t>(&bytes[8]) == 1);             // version
  CHECK(bytes[12] == 7);                                     // sample dtype code: u8
  CHECK(bytes[13] == 6);                                     // label dtype code: i64
  CHECK(bytes[14] == 3);                                     // rank
  CHECK(load_le<std::uint64_t>(&bytes[16]) == 2);            // records
  CHECK(load_le<std::uint64_t>(&bytes[24]) == 128);          // record size
  CHECK(load_le<std::uint64_t>(&bytes[32]) == 128);          // data offset
  CHECK(load_le<std::uint64_t>(&bytes[40]) == 7);            // classes
  CHECK(load_le<std::int64_t>(&bytes[48]) == 3);             // dims
  CHECK(load_le<std::int64_t>(&bytes[56]) == 5);
  CHECK(load_le<std::int64_t>(&bytes[64]) == 5);
  CHECK(std::all_of(&bytes[72], &bytes[124], [](std::uint8_t b) { return b == 0; }));
  CHECK(load_le<std::uint32_t>(&bytes[124]) == crc32(0L, bytes.data(), 124));
  CHECK(read_shard_info(dir / "s").header_crc == load_le<std::uint32_t>(&bytes[124]));
  CHECK(bytes[128] == 0);                                    // record 0: the sample...
  CHECK(bytes[128 + 74] == 74);
  CHECK(std::all_of(&bytes[128 + 75], &bytes[128 + 80], [](std::uint8_t b) { return b == 0; }));
  CHECK(load_le<std::int64_t>(&bytes[128 + 80]) == 6);       // ...its label...
  CHECK(std::all_of(&bytes[128 + 88], &bytes[256], [](std::uint8_t b) { return b == 0; }));  // ...padding
  CHECK(load_le<std::int64_t>(&bytes[256 + 80]) == 2);
}

TEST_CASE("ShardWriter: errors for bad samples and labels, and an unfinished writer leaves nothing behind") {
  TempDir dir;
  const std::string path = dir / "s";
  {
    ShardWriter writer(path, {2}, DType::f32, DType::u8);
    writer.add(from_vector<float>({1, 2}), 1);
    CHECK_FALSE(fs::exists(path));  // nothing under the final name before finish()
    CHECK(std::ranges::all_of(files_in(dir.path), [](const std::string& name) { return name.starts_with("s.tmp-"); }));
    CHECK_THROWS_WITH_AS(writer.add(from_vector<float>({1, 2}), 256),
                         contains(path + ": label 256 does not fit the shard's u8 labels (0 to 255)"), ValueError);
    CHECK_THROWS_AS(writer.add(from_vector<float>({1, 2}), -1), ValueError);
    CHECK_THROWS_AS(writer.add(from_vector<float>({1, 2, 3}), 0), ShapeError);
    CHECK_THROWS_AS(writer.add(from_vector<double>({1, 2}), 0), DTypeError);
  }  // destroyed unfinished
  CHECK(files_in(dir.path).empty());

  ShardWriter writer(path, {1}, DType::i32, DType::i32);
  CHECK_THROWS_WITH_AS(writer.add_raw("abcd", 2147483648), contains("does not fit the shard's i32 labels"),
                       ValueError);
  writer.add_raw("abcd", 0);
  writer.finish();
  CHECK_THROWS_WITH_AS(writer.add_raw("abcd", 0), contains("ShardWriter::add_raw after finish()"), ValueError);
  CHECK_THROWS_AS(writer.finish(), ValueError);

  CHECK_THROWS_WITH_AS(ShardWriter(dir / "x", {1}, DType::u8, DType::f32),
                       contains("labels must be u8, i32 or i64, not f32"), ValueError);
  CHECK_THROWS_AS(ShardWriter(dir / "x", {1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::u8), ValueError);
  CHECK_THROWS_AS(ShardWriter(dir / "x", {2, 0}, DType::u8), ValueError);
  CHECK_THROWS_WITH_AS(ShardWriter(dir / "x", {1 << 20, 1 << 20, 1 << 20}, DType::u8), contains("exceed"),
                       ValueError);
  CHECK_THROWS_AS(ShardWriter(dir / "no/folder/x", {1}, DType::u8), FileError);
  CHECK(files_in(dir.path) == std::vector<std::string>{"s"});

  // A declared class count: recorded even when the labels stop short of it, and enforced.
  {
    ShardWriter declared(dir / "twenty", {1}, DType::u8, DType::u8, 20);
    declared.add_raw("a", 3);
    declared.add_raw("b", 7);
    CHECK_THROWS_WITH_AS(declared.add_raw("c", 20), contains("label 20 is out of range for the 20 classes declared"),
                         ValueError);
    declared.finish();
  }
  CHECK(ShardDataset(dir / "twenty").num_classes() == 20);
  CHECK_THROWS_WITH_AS(ShardWriter(dir / "x", {1}, DType::u8, DType::u8, 257), contains("257 classes do not fit u8"),
                       ValueError);
  CHECK_THROWS_AS(ShardWriter(dir / "x", {1}, DType::u8, DType::u8, -1), ValueError);
  CHECK(files_in(dir.path) == std::vector<std::string>{"s", "twenty"});
}

TEST_CASE("Shard: corrupt, truncated and foreign files are ValueErrors naming the file") {
  TempDir dir;
  {
    ShardWriter writer(dir / "good", {4}, DType::u8, DType::u8);
    for (std::uint8_t label : {0, 1, 7}) writer.add_raw("wxyz", label);
    writer.finish();
  }
  const Bytes good = read_bytes(dir / "good");
  REQUIRE(good.size() == 128 + 3 * 64);
  const auto error = [&](Bytes bytes) {
    write_bytes(dir / "bad", bytes);
    return error_of([&] { ShardDataset shard(dir / "bad"); });
  };
  const auto reseal = [](Bytes bytes) {  // recomputes the header's checksum after an edit
    store_le<std::uint32_t>(&bytes[124], static_cast<std::uint32_t>(crc32(0L, bytes.data(), 124)));
    return bytes;
  };
  const std::string bad = dir / "bad";

  CHECK(error(Bytes(good.begin(), good.begin() + 100)) ==
        bad + ": 100 bytes is too short for a shard header (128 bytes)");
  Bytes magic = good;
  magic[0] = 'f';
  CHECK(error(magic) == bad + ": wrong magic number: not a frugal shard (it starts with \"FRUGALSH\")");
  Bytes version = good;
  version[8] = 2;
  CHECK(error(reseal(version)) == bad + ": shard version 2, this frugal reads version 1");
  Bytes corrupt = good;
  corrupt[48] = 5;  // the sample's first dim, 4 -> 5
  CHECK(error(corrupt).starts_with(bad + ": corrupt shard header: its CRC-32 is "));
  // Resealed, the edit is a valid shard of [5] samples (records of 64 bytes either way): only the
  // checksum tells that the header changed.
  CHECK(error(reseal(corrupt)).empty());
  Bytes record_size = good;
  record_size[24] = 128;
  CHECK(error(reseal(record_size)) == bad + ": the header's record size 128 and data offset 128 do not match samples "
                                            "of [4] u8 with u8 labels (64 and 128)");
  Bytes dtype = good;
  dtype[12] = 99;
  CHECK(error(reseal(dtype)) == bad + ": unknown sample dtype code 99");
  Bytes rank = good;
  rank[14] = 9;
  CHECK(error(reseal(rank)) == bad + ": sample rank 9 is above the maximum 8");
  CHECK(error(Bytes(good.begin(), good.end() - 1)) ==
        bad + ": the header says 3 records of 64 bytes, the file holds 2 records and 63 more bytes (truncated)");
  Bytes trailing = good;
  trailing.push_back(0);
  CHECK(error(trailing) == bad + ": the header says 3 records of 64 bytes, the file holds 3 records and 1 more bytes");
  Bytes classes = good;
  classes[40] = 1;
  classes[41] = 1;  // 257 classes in u8 labels
  CHECK(error(reseal(classes)) == bad + ": 257 classes do not fit u8 labels");

  // A label beyond the header's class count: found when the record is read.
  Bytes label = good;
  label[128 + 64 + 4] = 8;  // record 1's label, 1 -> 8, with 8 classes in the header
  write_bytes(dir / "bad", label);
  const ShardDataset shard(dir / "bad");
  CHECK(shard.get(0).label == 0);
  CHECK_THROWS_WITH_AS(shard.get(1), contains(bad + ": record 1 has label 8, out of range for the header's 8 classes"),
                       ValueError);
  CHECK_THROWS_AS(shard.get(3), IndexError);
  CHECK(shard.describe() == "shard " + bad + ": 3 samples of [4] u8, u8 labels, 8 classes");
  CHECK_THROWS_AS(read_shard_info(dir / "missing"), FileError);
}

// ---- datasets of datasets, threads

TEST_CASE("InMemoryDataset, Subset and ConcatDataset") {
  TempDir dir;
  write_idx_pair(dir / "images", dir / "labels", 2, 2, {2, 0, 5});
  write_idx_pair(dir / "images2", dir / "labels2", 2, 2, {11, 3});
  const auto first = std::make_shared<const IdxDataset>(dir / "images", dir / "labels");
  const auto second = std::make_shared<const IdxDataset>(dir / "images2", dir / "labels2");

  const InMemoryDataset in_memory(*first);
  CHECK(in_memory.size() == 3);
  CHECK(in_memory.sample_shape() == Shape{1, 2, 2});
  CHECK(in_memory.num_classes() == 6);
  for (std::int64_t i = 0; i < 3; ++i) {
    CHECK(in_memory.get(i).label == first->get(i).label);
    CHECK(in_memory.get(i).input.to_vector<int>() == first->get(i).input.to_vector<int>());
  }
  Sample copy = in_memory.get(1);
  copy.input.fill_(0);  // a copy: the dataset keeps its sample
  CHECK(in_memory.get(1).input.to_vector<int>() == std::vector<int>{16, 17, 20, 21});
  CHECK(copy.input.storage()->tag() == MemoryTag::data);
  CHECK(in_memory.describe().starts_with("in memory (12 bytes): IDX "));

  const Subset subset(first, {2, 0, 2});
  CHECK(subset.size() == 3);
  CHECK(subset.get(0).label == 5);
  CHECK(subset.get(1).label == 2);
  CHECK(subset.get(2).input.to_vector<int>() == std::vector<int>{32, 33, 36, 37});
  CHECK(subset.describe().starts_with("subset of 3 samples of IDX "));
  CHECK_THROWS_AS(Subset(first, {3}), IndexError);
  CHECK_THROWS_AS(subset.get(3), IndexError);

  const ConcatDataset concat({first, second});
  CHECK(concat.size() == 5);
  CHECK(concat.num_classes() == 12);
  CHECK(concat.get(2).label == 5);
  CHECK(concat.get(3).label == 11);
  CHECK(concat.get(4).input.to_vector<int>() == std::vector<int>{16, 17, 20, 21});
  CHECK_THROWS_AS(concat.get(5), IndexError);
  CHECK(concat.describe().starts_with("concatenation of 2 datasets, 5 samples: IDX "));

  write_idx_pair(dir / "images3", dir / "labels3", 3, 2, {1});
  const auto taller = std::make_shared<const IdxDataset>(dir / "images3", dir / "labels3");
  CHECK_THROWS_AS(ConcatDataset({first, taller}), ShapeError);
  {
    ShardWriter writer(dir / "f32", {1, 2, 2}, DType::f32);
    writer.add(zeros({1, 2, 2}), 0);
    writer.finish();
  }
  CHECK_THROWS_AS(ConcatDataset({first, std::make_shared<const ShardDataset>(dir / "f32")}), DTypeError);
  CHECK_THROWS_AS(ConcatDataset({}), ValueError);

  for (const Dataset* dataset : std::initializer_list<const Dataset*>{&in_memory, &subset, &concat}) {
    CAPTURE(dataset->describe());
    check_get_into_matches_get(*dataset);
  }

  CHECK(locate(std::vector<std::int64_t>{0, 3, 3, 5}, 0).part == 0);
  CHECK(locate(std::vector<std::int64_t>{0, 3, 3, 5}, 3).part == 2);  // skips the empty part 1
  CHECK(locate(std::vector<std::int64_t>{0, 3, 3, 5}, 4).index == 1);
}

TEST_CASE("Datasets are safe to read from several threads at once") {
  TempDir dir;
  std::vector<std::uint8_t> labels(64);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
  write_idx_pair(dir / "images", dir / "labels", 3, 5, labels);
  const auto idx = std::make_shared<const IdxDataset>(dir / "images", dir / "labels");
  {
    ShardWriter writer(dir / "shard", idx->sample_shape(), DType::u8, DType::i32);
    for (std::int64_t i = 0; i < idx->size(); ++i) writer.add(idx->get(i).input, idx->get(i).label);
    writer.finish();
  }
  write_bytes(dir / "cifar.bin", cifar_records(0, std::vector<Bytes>(16, Bytes{7})));
  const ShardDataset shard(dir / "shard");
  const CifarDataset cifar({dir / "cifar.bin"}, CifarKind::cifar10);
  const std::vector<int> expected_cifar = cifar.get(5).input.to_vector<int>();
  check_get_into_matches_get(*idx);
  check_get_into_matches_get(shard);
  check_get_into_matches_get(cifar);

  std::atomic<int> mismatches = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::int64_t i = (t + round) % 64; i < 64; i += 7) {
          const Sample a = idx->get(i), b = shard.get(i);
          if (a.label != b.label || a.label != i % 10) ++mismatches;
          if (a.input.to_vector<int>() != b.input.to_vector<int>()) ++mismatches;
        }
        if (cifar.get(5).input.to_vector<int>() != expected_cifar) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == 0);
}

TEST_CASE("The fuzz corpus's files, written by fuzz/make_corpus.py from the documented formats, read as expected") {
  const std::string corpus = (fs::path(FRUGAL_SOURCE_DIR) / "fuzz/corpus").string();
  if (!fs::exists(corpus)) FRUGAL_SKIP("fuzz/corpus not found beside the tests' sources");
  const ShardDataset u8(corpus + "/fuzz_shard/u8_2x2_i64");
  CHECK(u8.size() == 2);
  CHECK(u8.sample_shape() == Shape{2, 2});
  CHECK(u8.num_classes() == 2);
  CHECK(u8.get(1).input.to_vector<int>() == std::vector<int>{5, 6, 7, 8});
  CHECK(u8.get(0).label == 1);
  const ShardDataset f32(corpus + "/fuzz_shard/f32_3_i32");
  CHECK(f32.get(0).input.to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(f32.get(0).label == 4);
  const ShardDataset scalar(corpus + "/fuzz_shard/f64_scalar_u8");
  CHECK(scalar.sample_shape() == Shape{});
  CHECK(scalar.get(1).input.item<double>() == 0.5);
  CHECK(scalar.get(1).label == 2);
  const ShardDataset empty_shard(corpus + "/fuzz_shard/empty_shard");
  CHECK(empty_shard.size() == 0);
  CHECK(empty_shard.sample_dtype() == DType::bf16);
  CHECK_THROWS_WITH_AS(ShardDataset(corpus + "/fuzz_shard/bad_crc"), contains("corrupt shard header"), ValueError);
  CHECK_THROWS_WITH_AS(ShardDataset(corpus + "/fuzz_shard/bad_truncated"), contains("(truncated)"), ValueError);

  CHECK(IdxArray::open(corpus + "/fuzz_idx/i32_3").at(0) == 16777217);
  CHECK(IdxArray::open(corpus + "/fuzz_idx/i16_2x2").at(2) == 258);
  CHECK(IdxArray::open(corpus + "/fuzz_idx/images_u8_2x3x3").dims() == Shape{2, 3, 3});
  CHECK(CifarDataset({corpus + "/fuzz_cifar/cifar10_2_records"}, CifarKind::cifar10).get(1).label == 9);
  CHECK(CifarDataset({corpus + "/fuzz_cifar/cifar100_1_record"}, CifarKind::cifar100_fine).get(0).label == 99);
}
