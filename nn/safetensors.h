// safetensors files (huggingface/safetensors): read, checked strictly, and written.
// A file is 8 bytes N (little-endian u64), N bytes of JSON, then one byte buffer:
//   {"__metadata__": {"format": "pt"},
//    "attn.0": {"dtype": "F32", "shape": [1, 2, 3], "data_offsets": [0, 24]}, ...}   padded with spaces
// Offsets count from the buffer's start (file offset 8 + N); each tensor is its elements in C order,
// little-endian, with no strides. Every file the reference reader refuses is refused here too, and
// a few more (an entry with keys besides its three, dtypes frugal has no tensors of), with one line
// that names the file, the tensor and what is wrong (see parse_safetensors_header).
// Not here: which module a tensor belongs to (Module::state_dict / load_state_dict), models.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "nn/state_dict.h"

namespace frugal::nn {

// "__metadata__": free text, string to string, in file order.
using Metadata = std::vector<std::pair<std::string, std::string>>;

// The reference reader's bound on N: a header larger than this is refused before it is read.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

// One tensor as the header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype{};
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // its bytes in the buffer: [begin, end)
};

// A checked header: every entry's bytes lie inside the buffer, and together they fill it exactly.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the order of the file's JSON
  Metadata metadata;
  std::uint64_t data_start = 0;  // 8 + N: where the buffer starts in the file
};

struct SafetensorsFile {
  StateDict tensors;  // CPU tensors of their own, in the order of the file's JSON
  Metadata metadata;
};

// The dtype's name in safetensors ("F32", "BF16", "BOOL", ...), and the inverse for the dtypes frugal
// has (BOOL, U8, I32, I64, F16, BF16, F32, F64); ValueError naming `tensor` for any other string,
// saying whether it is a safetensors dtype frugal lacks (I8, U16, F8_E4M3, ...) or no dtype at all.
std::string_view safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(std::string_view name, const std::string& tensor, const std::string& source);

// Checks the header at the start of `bytes`, the first bytes of a file of `file_size` bytes named
// `source` in messages (bytes may hold the whole file, or only its first 8 + N bytes). ValueError,
// one line starting "SOURCE: ", for anything the format forbids: a file shorter than 8 bytes or than
// 8 + N, N over kMaxSafetensorsHeader, a header that is not one UTF-8 JSON object starting with '{'
// (spaces after it allowed), a key twice in one object, arrays or objects nested deeper than
// {name: {"shape": [dims]}}, an entry without exactly "dtype" (a string), "shape" (an
// array of integers >= 0 whose product fits in int64) and "data_offsets" ([begin, end], begin <=
// end), end - begin not numel * dtype size, a gap or an overlap between entries sorted by offset, a
// buffer they do not fill exactly, "__metadata__" not mapping strings to strings.
SafetensorsHeader parse_safetensors_header(std::span<const std::uint8_t> bytes, std::uint64_t file_size,
                                           const std::string& source);

// The header of the file `path`, read with pread: nothing of the tensors is read. FileError if the
// file cannot be read, ValueError as parse_safetensors_header.
SafetensorsHeader read_safetensors_header(const std::string& path);

// A whole file held in memory (the fuzz target's entry point): checked as parse_safetensors_header,
// then each tensor copied out. ValueError also for a BOOL byte other than 0 or 1.
SafetensorsFile parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& source);

// The file `path`, each tensor read with pread straight into a fresh CPU tensor: no mapping, so a
// file truncated while it is read is a FileError naming it, never SIGBUS (core/mapped_file.h).
SafetensorsFile read_safetensors(const std::string& path);

// Writes `tensors` (any device, any layout: copied to contiguous CPU bytes first) and `metadata`
// as the file `path`, through AtomicFile: an error leaves nothing under `path`. Tensors are written
// in the order given, the header first ("__metadata__" first when there is metadata), padded with
// spaces to a multiple of 8 bytes. The reference writer sorts by dtype alignment then name; readers
// assume no order, and keeping the caller's keeps a state dict's order through a round trip.
// ValueError for an undefined tensor, a name given twice, the name "__metadata__", a name or
// metadata that is not valid UTF-8; WriteError if the write fails (a full disk).
void write_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata = {});

// As write_safetensors, then `verify` is called with a path that reads the bytes written, before they
// appear under `path` (AtomicFile::readable_path): an exception from it leaves nothing under `path`
// and a previous file there untouched.
void write_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata,
                       const std::function<void(const std::string& written)>& verify);

// The bytes write_safetensors writes, in memory.
std::vector<std::uint8_t> encode_safetensors(const StateDict& tensors, const Metadata& metadata = {});

}  // namespace frugal::nn
