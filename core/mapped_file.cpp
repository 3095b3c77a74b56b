// MappedFile (mmap + madvise over a RandomAccessFile) and AtomicFile (an O_TMPFILE or named
// temporary file, fsync, rename, fsync of the folder). POSIX; O_TMPFILE is Linux's.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/output_paths.h"

namespace frugal {

namespace {

std::string errno_text(int error) { return std::system_category().message(error); }

// Retries a system call that a signal interrupted (EINTR) before it did anything.
template <typename Call>
auto retry(Call call) {
  for (;;) {
    auto result = call();
    if (result != -1 || errno != EINTR) return result;
  }
}

int madvise_flag(Access access) {
  switch (access) {
    case Access::normal: return MADV_NORMAL;
    case Access::sequential: return MADV_SEQUENTIAL;
    case Access::random: return MADV_RANDOM;
    case Access::willneed: return MADV_WILLNEED;
  }
  return MADV_NORMAL;
}

// Syncs the folder holding `path`, so a rename into it survives a power cut (POSIX makes a rename
// durable only once its directory entry is written).
void sync_folder_of(const std::string& path) {
  const std::string folder = folder_of(path);
  const int fd = retry([&] { return ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  FRUGAL_CHECK_AS(FileError, fd >= 0, folder, ": cannot open the folder to sync it: ", errno_text(errno));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  FRUGAL_CHECK_AS(FileError, synced == 0, folder, ": fsync of the folder failed: ", errno_text(error));
}

struct OpenedFile {
  int fd;
  std::uint64_t size;
};

// Opens `path` for reading. FileError if it is missing, unreadable, a folder, not a regular file or
// empty (nothing to map or read).
OpenedFile open_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it changes nothing for files.
  const int fd = retry([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK); });
  FRUGAL_CHECK_AS(FileError, fd >= 0, path, ": cannot open: ", errno_text(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    FRUGAL_THROW(FileError, path, ": cannot stat: ", errno_text(error));
  }
  const char* problem = S_ISDIR(info.st_mode)   ? "is a folder, not a file"
                        : !S_ISREG(info.st_mode) ? "is not a regular file"
                        : info.st_size == 0      ? "is empty"
                                                 : nullptr;
  if (problem) {
    ::close(fd);
    FRUGAL_THROW(FileError, path, ": ", problem);
  }
  return {fd, static_cast<std::uint64_t>(info.st_size)};
}

}  // namespace

std::string path_error_text(int error) {
  if (error == ENOENT) return "does not exist";
  if (error == ELOOP) return "is a symlink loop (too many levels of symbolic links)";
  return errno_text(error);
}

// ---- MappedFile

MappedFile::MappedFile(std::string path, Access access) : file_(std::move(path)) {
  size_ = static_cast<std::size_t>(file_.size());
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file_.fd(), 0);
  FRUGAL_CHECK_AS(FileError, mapped != MAP_FAILED, file_.path(), ": mmap of ", size_, " bytes failed: ",
                  errno_text(errno));
  data_ = static_cast<const std::uint8_t*>(mapped);
  // A hint: if the kernel refuses it, only the speed of reading changes.
  ::madvise(mapped, size_, madvise_flag(access));
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : file_(std::move(other.file_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    file_ = std::move(other.file_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

// ---- RandomAccessFile

RandomAccessFile::RandomAccessFile(std::string path) : path_(std::move(path)) {
  const OpenedFile opened = open_regular_file(path_);
  fd_ = opened.fd;
  size_ = opened.size;
}

RandomAccessFile::~RandomAccessFile() { close(); }

RandomAccessFile::RandomAccessFile(RandomAccessFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

RandomAccessFile& RandomAccessFile::operator=(RandomAccessFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void RandomAccessFile::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RandomAccessFile::read_at(std::uint64_t offset, void* first, std::size_t first_count, void* second,
                               std::size_t second_count) const {
  std::array<iovec, 2> parts{iovec{first, first_count}, iovec{second, second_count}};
  const ssize_t done = retry([&] { return ::preadv(fd_, parts.data(), 2, static_cast<off_t>(offset)); });
  FRUGAL_CHECK_AS(FileError, done >= 0, path_, ": read of ", first_count + second_count, " bytes at offset ", offset,
                  " failed: ", errno_text(errno));
  // Short (signals, a file that shrank): the rest one part at a time, where read_at reports a shrunk file.
  const auto read = static_cast<std::size_t>(done);
  if (read < first_count) {
    read_at(offset + read, static_cast<std::uint8_t*>(first) + read, first_count - read);
    read_at(offset + first_count, second, second_count);
  } else if (read < first_count + second_count) {
    const std::size_t second_read = read - first_count;
    read_at(offset + read, static_cast<std::uint8_t*>(second) + second_read, second_count - second_read);
  }
}

void RandomAccessFile::read_at(std::uint64_t offset, void* out, std::size_t count) const {
  auto* next = static_cast<std::uint8_t*>(out);
  while (count > 0) {  // pread may return less than asked (signals); loop until all is in
    const ssize_t done = retry([&] { return ::pread(fd_, next, count, static_cast<off_t>(offset)); });
    FRUGAL_CHECK_AS(FileError, done >= 0, path_, ": read of ", count, " bytes at offset ", offset,
                    " failed: ", errno_text(errno));
    FRUGAL_CHECK_AS(FileError, done > 0, path_, ": ends at offset ", offset, ", it was ", size_,
                    " bytes when opened (changed while being read?)");
    next += done, offset += static_cast<std::uint64_t>(done), count -= static_cast<std::size_t>(done);
  }
}

// ---- AtomicFile

namespace {

constexpr std::size_t kFlushBytes = std::size_t{1} << 20;  // large enough that write() calls cost nothing

// "PATH.tmp-PID-": every temporary name of PATH written by this process starts so (the Note in mapped_file.h).
std::string temp_prefix(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()) + "-"; }

// Removes the files "NAME.tmp-PID-*" beside `path` whose process PID is no longer running: what a
// killed writer of the same file left. A running writer's files, and anything else, are left alone.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(path).filename().string() + ".tmp-";
  std::error_code error;
  for (fs::directory_iterator entry(folder_of(path), error), end; !error && entry != end; entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    pid_t pid = 0;
    const auto [after, parsed] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    const bool named_by_pid = parsed == std::errc() && pid > 0 && after != rest.data() + rest.size() && *after == '-';
    // kill(pid, 0) sends nothing: it fails with ESRCH only when no such process exists.
    if (named_by_pid && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(entry->path().c_str());
  }
}

// A file with no name in `folder`, freed by the kernel when its descriptor closes; -1 where the file
// system cannot make one or /proc (which commit() names it through) is missing.
int open_unnamed_file(const std::string& folder) {
#ifdef O_TMPFILE
  if (::access("/proc/self/fd", X_OK) != 0) return -1;
  return retry([&] { return ::open(folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644); });
#else
  (void)folder;
  return -1;
#endif
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(resolve_output_path(path)) {
  // The last line of defence of core/output_paths.h: rename() replaces a device node, a FIFO or a
  // folder's entry as readily as a file, so only a regular file (or a new name) is ever replaced.
  const std::string kind = file_kind(path_);
  FRUGAL_CHECK_AS(WriteError, kind.empty() || kind == "a regular file", path_, ": is ", kind,
                  "; frugal writes a new file or replaces a regular one, nothing else");
  remove_stale_temporaries(path_);
  fd_ = open_unnamed_file(folder_of(path_));
  if (fd_ < 0) {
    temp_path_ = temp_prefix(path_) + "XXXXXX";
    fd_ = ::mkostemp(temp_path_.data(), O_CLOEXEC);
    FRUGAL_CHECK_AS(WriteError, fd_ >= 0, path_, ": cannot create a temporary file beside it: ", errno_text(errno));
  }
  // mkstemp and O_TMPFILE under a umask create the file readable by fewer than a dataset's readers;
  // a dataset (or a weights file) is for anyone to read, as a plain open() under the usual umask
  // (022) would make it.
  ::fchmod(fd_, 0644);
  buffer_.reserve(kFlushBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* bytes, std::size_t count) {
  check_writable("write");
  const auto* first = static_cast<const std::uint8_t*>(bytes);
  buffer_.insert(buffer_.end(), first, first + count);
  if (buffer_.size() >= kFlushBytes) flush();
}

void AtomicFile::write_at(std::uint64_t offset, const void* bytes, std::size_t count) {
  check_writable("write_at");
  FRUGAL_CHECK_VALUE(offset + count <= size(), path_, ": write_at(", offset, ", ", count,
                     " bytes) reaches past the ", size(), " bytes written");
  flush();
  const auto* next = static_cast<const std::uint8_t*>(bytes);
  while (count > 0) {
    const ssize_t done = retry([&] { return ::pwrite(fd_, next, count, static_cast<off_t>(offset)); });
    if (done <= 0) fail("write", errno);
    next += done, offset += static_cast<std::uint64_t>(done), count -= static_cast<std::size_t>(done);
  }
}

std::string AtomicFile::readable_path() {
  check_writable("readable_path");
  flush();
  return temp_path_.empty() ? "/proc/self/fd/" + std::to_string(fd_) : temp_path_;
}

void AtomicFile::check_writable(const char* what) const {
  FRUGAL_CHECK_AS(FileError, !committed_, path_, ": ", what, " after commit");
  // Some bytes of a failed write may have reached the file, so what follows would not land where
  // the caller thinks: the file is abandoned, and removed with this object.
  FRUGAL_CHECK_AS(FileError, !failed_, path_, ": ", what, " after a failed write: the file is abandoned");
}

void AtomicFile::fail(const char* what, int error) {
  failed_ = true;
  FRUGAL_THROW(WriteError, path_, ": cannot write it: ", what, " failed: ", errno_text(error));
}

void AtomicFile::flush() {
  const std::uint8_t* next = buffer_.data();
  std::size_t left = buffer_.size();
  while (left > 0) {  // write() may write less than asked (signals, pipes); loop until all is out
    const ssize_t done = retry([&] { return ::write(fd_, next, left); });
    if (done <= 0) fail("write", errno);
    next += done, left -= static_cast<std::size_t>(done);
  }
  flushed_ += buffer_.size();
  buffer_.clear();
}

void AtomicFile::commit() {
  check_writable("commit");
  flush();
  if (::fsync(fd_) != 0) fail("fsync", errno);
  if (temp_path_.empty()) {
    link_into_place();
  } else if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail("rename into place", errno);
  }
  committed_ = true;
  const int closed = ::close(std::exchange(fd_, -1));
  FRUGAL_CHECK_AS(WriteError, closed == 0, path_, ": cannot write it: close failed: ", errno_text(errno));
  sync_folder_of(path_);
}

void AtomicFile::link_into_place() {
  static std::atomic<unsigned> next_name{0};  // one process's link names never repeat
  const std::string descriptor = "/proc/self/fd/" + std::to_string(fd_);
  std::string name;
  for (;;) {  // a name taken (by a dead writer with a reused process id) only means: try the next
    name = temp_prefix(path_) + std::to_string(next_name++);
    if (::linkat(AT_FDCWD, descriptor.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) break;
    if (errno != EEXIST) fail("linkat", errno);
  }
  if (::rename(name.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(name.c_str());
    fail("rename into place", error);
  }
}

void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

void write_file_atomically(const std::string& path, std::string_view text) {
  write_file_atomically(path, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

}  // namespace frugal
