// Files as datasets use them: a read-only memory mapping of a whole file (MappedFile), a file read
// at offsets (RandomAccessFile), the atomic way to write one (AtomicFile), and the copy of a mapped
// record into a fresh tensor that every mapped dataset's get() hands out.
// Why a mapping: the page cache holds the file once for every worker thread and every process, a
// record costs one memcpy, and a file larger than RAM still works (the kernel pages it).
// Why pread for the largest files: every mapped page a process touches counts in its RSS until the
// kernel reclaims it, so streaming a mapped multi-GB shard makes RSS grow with the shard; pages read
// with pread stay in the page cache, outside the process (measured: `frugal bench loader`).
// Not here: what the bytes mean (data/idx.h, data/cifar.h, data/shard.h check that); files that
// change while mapped (a mapped dataset file is treated as immutable: truncating it under a reader
// makes the reader's next access to a lost page fault with SIGBUS, as with any mmap); Windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace frugal::data {

// A file that cannot be opened, mapped, read or written: missing, a folder, no permission, empty,
// a full disk. The message names the path. Bad *contents* are a ValueError from the format reader.
struct FileError : Error { using Error::Error; };

// How a mapping will be read; passed to madvise so the kernel reads ahead, or does not.
enum class Access : std::uint8_t {
  normal,      // the kernel's default read-ahead
  sequential,  // front to back once (decompressing, packing): read far ahead
  random,      // records in shuffled order: no read-ahead, which would fetch pages nobody asked for
  willneed,    // start reading the whole file now (small files read many times)
};

// A read-only mapping of a whole file. Move-only; unmapped when destroyed. A moved-from
// MappedFile is empty (size() == 0). Reading the mapping from several threads at once is safe.
class MappedFile {
 public:
  // FileError if the path is missing, a folder, not a regular file, unreadable or empty.
  explicit MappedFile(std::string path, Access access = Access::normal);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// A read-only file read record by record with pread(): what ShardDataset streams from. Thread-safe
// (pread has no shared file position). Move-only; closed when destroyed.
class RandomAccessFile {
 public:
  // FileError as MappedFile's: missing, a folder, not a regular file, unreadable or empty.
  explicit RandomAccessFile(std::string path);
  ~RandomAccessFile();
  RandomAccessFile(RandomAccessFile&& other) noexcept;
  RandomAccessFile& operator=(RandomAccessFile&& other) noexcept;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  std::uint64_t size() const { return size_; }  // when opened
  const std::string& path() const { return path_; }
  // Exactly `count` bytes from `offset` into `out`. FileError if the read fails or the file ends
  // first (it shrank after it was opened: a mapping would die of SIGBUS there).
  void read_at(std::uint64_t offset, void* out, std::size_t count) const;
  // The same for `first_count` bytes into `first`, then the next `second_count` bytes into `second`,
  // in one system call (preadv): a record's sample into its tensor and its label beside it.
  void read_at(std::uint64_t offset, void* first, std::size_t first_count, void* second,
               std::size_t second_count) const;

 private:
  void close() noexcept;

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Writes a file so that an interrupted write (an exception, a crash, a full disk) never leaves a
// partial file under the final name: the bytes go to a temporary file beside it
// ("<path>.tmp-XXXXXX", same folder hence same file system), which commit() flushes to disk and
// renames over `path` (rename is atomic), then syncs the folder so the rename itself is durable.
// Destroyed without commit(), or after a failure, it removes the temporary file. Not thread-safe.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // FileError if the folder does not exist or is not writable
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* bytes, std::size_t count);  // appends
  // Overwrites bytes written earlier, e.g. a header reserved at the start and filled in at the end.
  void write_at(std::uint64_t offset, const void* bytes, std::size_t count);
  std::uint64_t size() const { return flushed_ + buffer_.size(); }  // bytes appended so far
  void commit();  // the file appears under path(); nothing may be written after

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush();
  void check_writable(const char* what) const;  // FileError after commit() or a failed write
  [[noreturn]] void fail(const char* what, int error);  // marks the file failed, throws FileError

  std::string path_, temp_path_;
  int fd_ = -1;
  std::vector<std::uint8_t> buffer_;  // appended bytes not yet written: one write() per MiB, not per record
  std::uint64_t flushed_ = 0;         // bytes already in the file
  bool committed_ = false;
  bool failed_ = false;  // a write or fsync failed: nothing more may be written or committed
};

// The whole of `bytes` as the file `path`, through AtomicFile.
void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes);

// A fresh contiguous CPU tensor of `shape` and `dtype` holding a copy of the bytes at `record`,
// allocated under MemoryTag::data: what a mapped dataset's get() returns, so a sample never keeps
// the mapping's pages alive.
Tensor tensor_from_bytes(const std::uint8_t* record, const Shape& shape, DType dtype);

}  // namespace frugal::data
