// Files as frugal reads and writes them (datasets in data/, safetensors in nn/): a read-only memory
// mapping of a whole file (MappedFile), a file read at offsets (RandomAccessFile), and the atomic way
// to write one (AtomicFile).
// Why a mapping: the page cache holds the file once for every worker thread and every process, a
// header or a whole array is read in place, and a file larger than RAM still works (the kernel pages it).
// Why pread for the largest files: every mapped page a process touches counts in its RSS until the
// kernel reclaims it, so streaming a mapped multi-GB shard makes RSS grow with the shard; pages read
// with pread stay in the page cache, outside the process (measured: `frugal bench loader`).
// Why records are read with pread even from a mapped file: a file truncated by another program
// under a mapping makes the next access to a lost page fault with SIGBUS, which kills the process
// with no message; pread says the file ended, a FileError naming it. A mapping is read only right
// after it is opened (headers, a labels file), and for whole-array views (`frugal inspect`).
// Not here: what the bytes mean (data/idx.h, data/cifar.h, data/shard.h, nn/safetensors.h check
// that); the copy of a mapped record into a dataset's sample (data/mapped_file.h); Windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace frugal {

// A file that cannot be opened, mapped, read or written: missing, a folder, no permission, empty,
// a full disk. The message names the path. Bad *contents* are a ValueError from the format reader.
struct FileError : Error { using Error::Error; };
// Writing an output failed part-way (a full disk, an I/O error): not the input's fault, so the
// command line reports it as an error (exit 1), not as bad input. The message names the output's
// final path, never its temporary file, which the user never chose and which is already gone.
struct WriteError : FileError { using FileError::FileError; };

// Why stat() or open() of a path failed, in words for a one-line message: "does not exist" for
// ENOENT, "is a symlink loop (too many levels of symbolic links)" for ELOOP, else the system's text.
std::string path_error_text(int error);

// How a mapping will be read; passed to madvise so the kernel reads ahead, or does not.
enum class Access : std::uint8_t {
  normal,      // the kernel's default read-ahead
  sequential,  // front to back once (decompressing, packing): read far ahead
  random,      // records in shuffled order: no read-ahead, which would fetch pages nobody asked for
  willneed,    // start reading the whole file now (small files read many times)
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
  int fd() const { return fd_; }  // for mapping it (MappedFile); -1 once moved from
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

// A read-only mapping of a whole file, and the file itself for reading records with pread (see the
// top of this file for why). Move-only; unmapped when destroyed. A moved-from MappedFile is empty
// (size() == 0). Reading the mapping or the file from several threads at once is safe.
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
  const std::string& path() const { return file_.path(); }
  // The same bytes read with pread: a FileError, not SIGBUS, if the file shrank since it was opened.
  const RandomAccessFile& file() const { return file_; }

 private:
  void unmap() noexcept;

  RandomAccessFile file_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Writes a file so that an interrupted write (an exception, a signal, a crash, a full disk) never
// leaves a partial file under the final name, nor a temporary file that nothing removes: see
// Note [Temporary files that cannot outlive their writer]. commit() flushes the bytes to disk,
// puts them under `path` in one atomic rename, then syncs the folder so the rename is durable.
// Destroyed without commit(), or after a failure, it leaves nothing behind. Not thread-safe.
//
// Note [Temporary files that cannot outlive their writer]
// A named temporary file ("OUT.tmp-XXXXXX") is removed by its writer's destructor, which never runs
// when the process is killed (SIGKILL, or any signal nobody catches): a killed `frugal pack` used to
// leave hundreds of MB behind. So the bytes go to a file with no name at all, opened with Linux's
// O_TMPFILE in the target's folder: the kernel frees it when its writer's descriptor closes, however
// the writer ends. commit() gives it a name with linkat("/proc/self/fd/N", AT_SYMLINK_FOLLOW); as
// linkat cannot replace a file, it links a fresh name "OUT.tmp-PID-N" and renames that over OUT, so
// the replacement stays atomic. Where the file system (or a missing /proc) refuses O_TMPFILE, the
// bytes go to a named "OUT.tmp-PID-XXXXXX" as before. Either name carries its writer's process id:
// every AtomicFile first removes the "OUT.tmp-PID-*" files of its own target whose process is no
// longer running, so what a killed writer left is gone by the next write of the same file.
class AtomicFile {
 public:
  // WriteError (a FileError) if the folder does not exist or is not writable, or `path` exists and is
  // not a regular file (a folder, a device, a FIFO, a socket): a failure to write, exit 1 in a command,
  // since every command checks its outputs as bad input (exit 2) before it starts (core/output_paths.h). A symbolic link is followed (core/output_paths.h):
  // the file it names is replaced and path() names that file. Removes the stale temporary files of
  // the target (the Note above).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* bytes, std::size_t count);  // appends
  // Overwrites bytes written earlier, e.g. a header reserved at the start and filled in at the end.
  void write_at(std::uint64_t offset, const void* bytes, std::size_t count);
  std::uint64_t size() const { return flushed_ + buffer_.size(); }  // bytes appended so far
  // The file appears under path(); nothing may be written after. A failed write, sync or rename is
  // a WriteError naming path(), after which nothing is left behind.
  void commit();

  const std::string& path() const { return path_; }
  // The named temporary file, or "" when the bytes go to an unnamed O_TMPFILE file (the Note above).
  const std::string& temp_path() const { return temp_path_; }
  // Writes out what was appended and returns a path that opens the bytes so far for reading, before
  // commit(): the named temporary file, or /proc/self/fd/N for the unnamed one. For a writer that
  // checks what it wrote before it replaces anything (train/checkpoint.h).
  std::string readable_path();

 private:
  void flush();
  void link_into_place();  // the unnamed file appears under path_ (the Note above)
  void check_writable(const char* what) const;  // FileError after commit() or a failed write
  [[noreturn]] void fail(const char* what, int error);  // marks the file failed, throws WriteError

  std::string path_, temp_path_;
  int fd_ = -1;
  std::vector<std::uint8_t> buffer_;  // appended bytes not yet written: one write() per MiB, not per record
  std::uint64_t flushed_ = 0;         // bytes already in the file
  bool committed_ = false;
  bool failed_ = false;  // a write or fsync failed: nothing more may be written or committed
};

// The whole of `bytes` as the file `path`, through AtomicFile.
void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes);
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace frugal
