// data/'s names for the general file pieces of core/mapped_file.h (MappedFile, RandomAccessFile,
// AtomicFile, FileError, WriteError, ...), and the one piece that is data's own: the copy of a mapped
// record into a fresh tensor that every mapped dataset's get() hands out.
// Not here: the files themselves, and why they are read and written as they are (core/mapped_file.h).
#pragma once

#include <cstdint>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace frugal::data {

using frugal::Access;
using frugal::AtomicFile;
using frugal::FileError;
using frugal::MappedFile;
using frugal::path_error_text;
using frugal::RandomAccessFile;
using frugal::write_file_atomically;
using frugal::WriteError;

// A fresh contiguous CPU tensor of `shape` and `dtype` holding a copy of the bytes at `record`,
// allocated under MemoryTag::data: what a mapped dataset's get() returns, so a sample never keeps
// the mapping's pages alive.
Tensor tensor_from_bytes(const std::uint8_t* record, const Shape& shape, DType dtype);

}  // namespace frugal::data
