// MappedFile (mmap + madvise), AtomicFile (temporary file, fsync, rename, fsync of the folder) and
// tensor_from_bytes. POSIX only.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/allocator.h"

namespace frugal::data {

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
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? std::string(".") : parent.string();
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

// ---- MappedFile

MappedFile::MappedFile(std::string path, Access access) : path_(std::move(path)) {
  const OpenedFile opened = open_regular_file(path_);
  const int fd = opened.fd;
  size_ = static_cast<std::size_t>(opened.size);
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  FRUGAL_CHECK_AS(FileError, mapped != MAP_FAILED, path_, ": mmap of ", size_, " bytes failed: ", errno_text(error));
  data_ = static_cast<const std::uint8_t*>(mapped);
  // A hint: if the kernel refuses it, only the speed of reading changes.
  ::madvise(mapped, size_, madvise_flag(access));
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
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
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_path_(path_ + ".tmp-XXXXXX") {
  fd_ = ::mkostemp(temp_path_.data(), O_CLOEXEC);
  FRUGAL_CHECK_AS(FileError, fd_ >= 0, path_, ": cannot create a temporary file beside it: ", errno_text(errno));
  // mkstemp creates the file readable by its owner only; a dataset is for anyone to read, as a plain
  // open() under the usual umask (022) would make it.
  ::fchmod(fd_, 0644);
  buffer_.reserve(kFlushBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
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

void AtomicFile::check_writable(const char* what) const {
  FRUGAL_CHECK_AS(FileError, !committed_, path_, ": ", what, " after commit");
  // Some bytes of a failed write may have reached the file, so what follows would not land where
  // the caller thinks: the file is abandoned, and removed with this object.
  FRUGAL_CHECK_AS(FileError, !failed_, path_, ": ", what, " after a failed write: the file is abandoned");
}

void AtomicFile::fail(const char* what, int error) {
  failed_ = true;
  FRUGAL_THROW(FileError, temp_path_, ": ", what, " failed: ", errno_text(error));
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
  const int closed = ::close(fd_);
  fd_ = -1;
  FRUGAL_CHECK_AS(FileError, closed == 0, temp_path_, ": close failed: ", errno_text(errno));
  FRUGAL_CHECK_AS(FileError, ::rename(temp_path_.c_str(), path_.c_str()) == 0, "cannot rename ", temp_path_,
                  " to ", path_, ": ", errno_text(errno));
  committed_ = true;
  sync_folder_of(path_);
}

void write_file_atomically(const std::string& path, std::span<const std::uint8_t> bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

// ---- records to tensors

Tensor tensor_from_bytes(const std::uint8_t* record, const Shape& shape, DType dtype) {
  MemoryTagScope scope(MemoryTag::data);
  Tensor tensor = empty(shape, {.dtype = dtype});
  std::memcpy(tensor.data_ptr(), record, tensor.nbytes());
  return tensor;
}

}  // namespace frugal::data
