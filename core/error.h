// Errors: the one family of check macros and the typed exceptions they throw.
// Every failure in frugal is an exception that carries the failed expression and file:line, so a
// one-line message says what went wrong and where. Nothing below main() calls exit().
// Not here: the CUDA/cuBLAS/cuDNN/NCCL status checks, which need CUDA headers; they live in
// core/cuda/check.h and are generated from FRUGAL_LIBRARY_CHECK below.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace frugal {

// Text read from a file (a tensor name, a metadata value) as a message may show it: printable ASCII
// and valid UTF-8 letters as they are; control characters (escape codes, NUL, C1 controls such as
// U+009B), Unicode's text-direction overrides and bytes that are not UTF-8 as \xNN or \u{NNNN}, so a
// crafted file can neither drive a terminal nor break a log's lines. Cut after `max_chars` bytes
// of output ("..." follows).
std::string printable(std::string_view text, std::size_t max_chars = 200);

// Base of every frugal exception. what() is the full one-line message:
//   "core/tensor.cpp:120: view: shape [2, 3] is not compatible ... (check failed: numel == n)"
class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line, std::string expression);
  const std::string& message() const { return message_; }    // the text alone, no location
  const std::string& expression() const { return expression_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
  std::string expression_;
};

// The kinds a caller may want to tell apart. Names follow what users know from Python.
struct ValueError : Error { using Error::Error; };        // a bad argument value
struct IndexError : Error { using Error::Error; };        // an index or dim out of range
struct ShapeError : Error { using Error::Error; };        // shapes that do not fit together
struct DTypeError : Error { using Error::Error; };        // wrong or mismatched dtype
struct DeviceError : Error { using Error::Error; };       // wrong device, or device unusable
struct OutOfMemoryError : Error { using Error::Error; };  // an allocation could not be served
struct LibraryError : Error { using Error::Error; };      // CUDA, cuBLAS, cuDNN, NCCL returned an error
struct DistributedError : Error { using Error::Error; };  // a collective failed across ranks: mismatch, timeout, dead rank

namespace detail {
// Joins any streamable arguments into one string: str("got ", 3, " dims") == "got 3 dims".
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Strips the directories before the repository's top-level folder, so messages read "core/tensor.cpp".
const char* short_path(const char* file);

template <typename E>
[[noreturn]] void throw_error(const char* file, int line, const char* expression, std::string message) {
  throw E(std::move(message), short_path(file), line, expression);
}
}  // namespace detail

}  // namespace frugal

// FRUGAL_CHECK_AS(Type, cond, message parts...): throw Type unless cond holds. The other checks are
// this one with the type filled in. Message parts are joined with operator<<.
#define FRUGAL_CHECK_AS(Type, cond, ...)                                                            \
  do {                                                                                              \
    if (!(cond)) [[unlikely]]                                                                       \
      ::frugal::detail::throw_error<Type>(__FILE__, __LINE__, #cond, ::frugal::detail::str(__VA_ARGS__)); \
  } while (0)

#define FRUGAL_CHECK(cond, ...) FRUGAL_CHECK_AS(::frugal::Error, cond, __VA_ARGS__)
#define FRUGAL_CHECK_VALUE(cond, ...) FRUGAL_CHECK_AS(::frugal::ValueError, cond, __VA_ARGS__)
#define FRUGAL_CHECK_INDEX(cond, ...) FRUGAL_CHECK_AS(::frugal::IndexError, cond, __VA_ARGS__)
#define FRUGAL_CHECK_SHAPE(cond, ...) FRUGAL_CHECK_AS(::frugal::ShapeError, cond, __VA_ARGS__)
#define FRUGAL_CHECK_DTYPE(cond, ...) FRUGAL_CHECK_AS(::frugal::DTypeError, cond, __VA_ARGS__)
#define FRUGAL_CHECK_DEVICE(cond, ...) FRUGAL_CHECK_AS(::frugal::DeviceError, cond, __VA_ARGS__)

// Unconditional failure, for switch defaults and unreachable dispatch branches.
#define FRUGAL_THROW(Type, ...) \
  ::frugal::detail::throw_error<Type>(__FILE__, __LINE__, "", ::frugal::detail::str(__VA_ARGS__))

// The generator for library status checks: evaluate `call` once; if its status differs from `ok`,
// throw LibraryError naming the library, the call, the status code and the library's own text for it.
// core/cuda/check.h instantiates it for CUDA, cuBLAS, cuDNN and NCCL.
#define FRUGAL_LIBRARY_CHECK(library, call, ok, to_string)                                           \
  do {                                                                                              \
    const auto frugal_status_ = (call);                                                             \
    if (frugal_status_ != (ok)) [[unlikely]]                                                        \
      ::frugal::detail::throw_error<::frugal::LibraryError>(                                        \
          __FILE__, __LINE__, #call,                                                                \
          ::frugal::detail::str(library, " error ", static_cast<long long>(frugal_status_), ": ",   \
                                to_string(frugal_status_)));                                        \
  } while (0)
