#!/usr/bin/env python3
"""Writes the committed seed corpus of the fuzz targets: fuzz/corpus/<target>/, a few tiny valid files
and a few invalid ones per format, each named for what it is. It is a second implementation of the
formats (data/idx.h, data/cifar.h, data/shard.h, nn/safetensors.h, train/checkpoint.h,
memory/alloc_trace.h), written from their documentation.
Run from anywhere: python3 fuzz/make_corpus.py"""
import base64
import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def idx(type_code, dims, payload):  # 00 00 TYPE NDIMS, big-endian u32 dims, big-endian data
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def cifar(labels_per_record):  # label byte(s), then 3072 pixel bytes
    return b"".join(bytes(labels) + bytes((7 * r + i) % 256 for i in range(3072))
                    for r, labels in enumerate(labels_per_record))


DTYPE_CODES = {"f32": 1, "f64": 2, "f16": 3, "bf16": 4, "i32": 5, "i64": 6, "u8": 7, "bool": 8}
DTYPE_SIZES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "u8": 1, "bool": 1}
LABEL_FORMATS = {"u8": "<B", "i32": "<i", "i64": "<q"}


def shard(shape, sample_dtype, label_dtype, samples, labels):
    sample_bytes = DTYPE_SIZES[sample_dtype]
    for d in shape:
        sample_bytes *= d
    label_size = DTYPE_SIZES[label_dtype]
    label_offset = -(-sample_bytes // label_size) * label_size
    record_size = -(-(label_offset + label_size) // 64) * 64
    header = bytearray(128)
    header[0:8] = b"FRUGALSH"
    struct.pack_into("<IBBBB", header, 8, 1, DTYPE_CODES[sample_dtype], DTYPE_CODES[label_dtype], len(shape), 0)
    struct.pack_into("<QQQQ", header, 16, len(labels), record_size, 128, max(labels, default=-1) + 1)
    for i, d in enumerate(shape):
        struct.pack_into("<q", header, 48 + 8 * i, d)
    struct.pack_into("<I", header, 124, zlib.crc32(bytes(header[:124])))
    body = b""
    for sample, label in zip(samples, labels):
        record = bytearray(record_size)
        record[0:sample_bytes] = sample
        record[label_offset:label_offset + label_size] = struct.pack(LABEL_FORMATS[label_dtype], label)
        body += record
    return bytes(header) + body


write("fuzz_idx", "labels_u8_4", idx(0x08, [4], bytes([3, 0, 9, 1])))
write("fuzz_idx", "images_u8_2x3x3", idx(0x08, [2, 3, 3], bytes(range(18))))
write("fuzz_idx", "i16_2x2", idx(0x0B, [2, 2], struct.pack(">4h", -32768, -2, 258, 32767)))
write("fuzz_idx", "i32_3", idx(0x0C, [3], struct.pack(">3i", 16777217, -1, 2**31 - 1)))
write("fuzz_idx", "f32_2", idx(0x0D, [2], struct.pack(">2f", 1.5, -0.0)))
write("fuzz_idx", "f64_1x2", idx(0x0E, [1, 2], struct.pack(">2d", 0.1, -1e300)))
write("fuzz_idx", "i8_1", idx(0x09, [1], bytes([0x80])))
write("fuzz_idx", "bad_magic", bytes([1, 0, 8, 1, 0, 0, 0, 1, 5]))
write("fuzz_idx", "bad_truncated", idx(0x08, [3, 2, 2], bytes(11)))
write("fuzz_idx", "bad_zero_dim", idx(0x08, [2, 0], b""))

write("fuzz_cifar", "cifar10_2_records", cifar([[3], [9]]))
write("fuzz_cifar", "cifar100_1_record", cifar([[19, 99]]))
write("fuzz_cifar", "bad_label", cifar([[200, 200]]))
write("fuzz_cifar", "bad_size", bytes(100))

u8_2x2 = shard([2, 2], "u8", "i64", [bytes([1, 2, 3, 4]), bytes([5, 6, 7, 8])], [1, 0])
write("fuzz_shard", "u8_2x2_i64", u8_2x2)
write("fuzz_shard", "f32_3_i32", shard([3], "f32", "i32", [struct.pack("<3f", 1, 2, 3)], [4]))
write("fuzz_shard", "f64_scalar_u8", shard([], "f64", "u8", [struct.pack("<d", 0.5)] * 3, [0, 2, 1]))
write("fuzz_shard", "empty_shard", shard([5], "bf16", "u8", [], []))
corrupt = bytearray(u8_2x2)
corrupt[48] = 3  # a dim changed without resealing the CRC
write("fuzz_shard", "bad_crc", bytes(corrupt))
write("fuzz_shard", "bad_truncated", u8_2x2[:-1])


# Images for fuzz_image (data/image_folder.h): PNG and BMP written here, one JPEG made by stb_image_write.
def png(width, height, color_type, channels, pixels):  # 8-bit samples, filter 0 on every row
    raw = b"".join(b"\0" + pixels[y * width * channels:(y + 1) * width * channels] for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def bmp(width, height, rgb):  # 24-bit; rows stored bottom-up as BGR, each padded to 4 bytes
    stride = (3 * width + 3) & ~3
    rows = [b"".join(rgb[3 * (y * width + x):3 * (y * width + x) + 3][::-1] for x in range(width)).ljust(stride, b"\0")
            for y in reversed(range(height))]
    body = b"".join(rows)
    return (b"BM" + struct.pack("<IHHI", 54 + len(body), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(body), 2835, 2835, 0, 0) + body)


# stbi_write_jpg of a 2x2 grey image at quality 1 (baseline JPEG, standard Huffman tables).
JPEG_2X2 = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wCEAP//////////////////////////////////////////////////////////////"
    "//////////////////////8B////////////////////////////////////////////////////////////////////////"
    "///////////////AABEIAAIAAgMBIgACEQEDEQH/xAGiAAABBQEBAQEBAQAAAAAAAAAAAQIDBAUGBwgJCgsQAAIBAwMCBAMF"
    "BQQEAAABfQECAwAEEQUSITFBBhNRYQcicRQygZGhCCNCscEVUtHwJDNicoIJChYXGBkaJSYnKCkqNDU2Nzg5OkNERUZHSElK"
    "U1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6g4SFhoeIiYqSk5SVlpeYmZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV"
    "1tfY2drh4uPk5ebn6Onq8fLz9PX29/j5+gEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoLEQACAQIEBAMEBwUEBAABAncA"
    "AQIDEQQFITEGEkFRB2FxEyIygQgUQpGhscEJIzNS8BVictEKFiQ04SXxFxgZGiYnKCkqNTY3ODk6Q0RFRkdISUpTVFVWV1hZ"
    "WmNkZWZnaGlqc3R1dnd4eXqCg4SFhoeIiYqSk5SVlpeYmZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV1tfY2dri"
    "4+Tl5ufo6ery8/T19vf4+fr/2gAMAwEAAhEDEQA/AI6KKKAP/9k=")
grey_png = png(3, 2, 0, 1, bytes(range(0, 60, 10)))
rgb_bmp = bmp(3, 2, bytes(range(0, 180, 10)))
write("fuzz_image", "grey_3x2.png", grey_png)
write("fuzz_image", "rgb_3x2.png", png(3, 2, 2, 3, bytes(range(18))))
write("fuzz_image", "rgba_2x2.png", png(2, 2, 6, 4, bytes(range(16))))
write("fuzz_image", "rgb_3x2.bmp", rgb_bmp)
write("fuzz_image", "grey_2x2.jpg", JPEG_2X2)
write("fuzz_image", "bad_truncated.png", grey_png[:-20])
write("fuzz_image", "bad_truncated.bmp", rgb_bmp[:-10])
write("fuzz_image", "bad_truncated.jpg", JPEG_2X2[:300])
write("fuzz_image", "bad_zero_width.bmp", bmp(0, 2, b""))
# A JPEG fuzz_image found: the 2x2 one with its height raised to 14082 rows (bytes 159-160 of its SOF0)
# and its Huffman tables damaged, so every 8x8 block adds to the DC predictor until predictor x quantiser
# overflows an int inside stb_image (data/CMakeLists.txt builds it with -fwrapv for this). The bytes are
# the fuzzer's, kept as edits of JPEG_2X2 (offset: new byte).
DC_OVERFLOW_EDITS = {159: 0x37, 166: 0x02, 194: 0x0B, 225: 0xFE, 226: 0xFF, 227: 0xFF, 228: 0xFF, 229: 0xFF,
                     230: 0xFF, 231: 0xFF, 232: 0x7F, 242: 0x31, 365: 0x61, 439: 0x30, 445: 0x58, 446: 0x40,
                     484: 0x3B, 500: 0x27, 592: 0x07}
write("fuzz_image", "bad_dc_overflow.jpg",
      bytes(DC_OVERFLOW_EDITS.get(i, byte) for i, byte in enumerate(JPEG_2X2)))


# safetensors (nn/safetensors.h): 8 bytes N (little-endian), N bytes of JSON padded with spaces to a
# multiple of 8, then the tensors' bytes at their data_offsets.
def safetensors_header(entries, metadata=None, pad=True):
    header = {"__metadata__": metadata} if metadata else {}
    header.update(entries)
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b" " * ((-len(text) % 8) if pad else 0)


def safetensors(tensors, metadata=None):  # tensors: [(name, dtype, shape, bytes)], stored in that order
    entries, data = {}, b""
    for name, dtype, shape, payload in tensors:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    header = safetensors_header(entries, metadata)
    return struct.pack("<Q", len(header)) + header + data


attn = safetensors([("attn.0", "F32", [1, 2, 3], struct.pack("<6f", 0, 1, 2, 3, 4, 5))])
write("fuzz_safetensors", "golden_attn", attn)
write("fuzz_safetensors", "golden_empty", safetensors([]))
write("fuzz_safetensors", "golden_metadata", safetensors([], {"framework": "pt"}))
write("fuzz_safetensors", "every_dtype", safetensors([
    ("f64", "F64", [2], struct.pack("<2d", 0.5, -2)),
    ("i64.scalar", "I64", [], struct.pack("<q", -7)),
    ("f32", "F32", [2, 1], struct.pack("<2f", 1.5, 3)),
    ("i32", "I32", [3], struct.pack("<3i", -1, 0, 2**31 - 1)),
    ("f16", "F16", [2], struct.pack("<2e", 1.0, -0.5)),
    ("bf16", "BF16", [1, 2], bytes([0x80, 0x3f, 0x00, 0xc0])),  # 1.0, -2.0
    ("u8", "U8", [3], bytes([0, 128, 255])),
    ("bool", "BOOL", [2, 2], bytes([1, 0, 0, 1])),
], {"format": "pt", "note": "one tensor of each dtype"}))
write("fuzz_safetensors", "empty_tensors", safetensors([
    ("rows", "F32", [0, 3], b""), ("weight", "F32", [2], struct.pack("<2f", 1, 2)), ("cols", "I64", [3, 0], b"")]))
# Listed out of offset order: readers must not assume any order.
out_of_order = safetensors_header({"b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                                   "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})
write("fuzz_safetensors", "out_of_order", struct.pack("<Q", len(out_of_order)) + out_of_order + bytes([1, 2, 3, 4]))


def raw_safetensors(text, data=b""):  # a header exactly as written, duplicates and all
    return struct.pack("<Q", len(text)) + text + data


write("fuzz_safetensors", "bad_duplicate", raw_safetensors(
    b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\1"))
write("fuzz_safetensors", "bad_gap", raw_safetensors(
    b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}', b"123"))
write("fuzz_safetensors", "bad_overlap", raw_safetensors(
    b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"123"))
write("fuzz_safetensors", "bad_size", raw_safetensors(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"1234"))
write("fuzz_safetensors", "bad_dtype", raw_safetensors(b'{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"1"))
write("fuzz_safetensors", "bad_metadata", raw_safetensors(b'{"__metadata__":{"epoch":3}}'))
write("fuzz_safetensors", "bad_bool", raw_safetensors(b'{"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}', b"\0\2"))
write("fuzz_safetensors", "bad_truncated", attn[:-1])
write("fuzz_safetensors", "bad_header_length", struct.pack("<Q", 2**40) + b"{}")


# frugal checkpoints (train/checkpoint.h): safetensors whose metadata names the format, version 2,
# the position, the run, the data, every tensor's CRC-32 (8 hex digits of zlib's crc32) and the
# metadata's own.
def checkpoint(tensors, position=None, data=None, crcs=None):
    if position is None:
        position = {"epoch": 0, "batch": 2, "global_step": 2, "generator_seed": "1", "generator_offset": "2",
                    "loss_sum": "3.5", "correct": 3, "samples": 8}
    metadata = {"format": "frugal-checkpoint", "version": "2", "position": json.dumps(position),
                "run": "{}", "data": json.dumps(data or {"samples": 8, "fingerprint": "deadbeef"}),
                "crc32": json.dumps(crcs if crcs is not None else {n: "%08x" % zlib.crc32(p) for n, _, _, p in tensors})}
    # metadata_crc32: CRC-32 of the values above in this order, each ended by a NUL byte.
    values = b"".join(metadata[k].encode() + b"\0" for k in ("format", "version", "position", "run", "data", "crc32"))
    metadata["metadata_crc32"] = "%08x" % zlib.crc32(values)
    return safetensors(tensors, metadata)


ckpt_tensors = [("model.w", "F32", [2, 2], struct.pack("<4f", 0.25, -1, 2, 0.5)),
                ("optimizer.state.0.step", "I64", [], struct.pack("<q", 2)),
                ("schedule.last_epoch", "I64", [], struct.pack("<q", 2))]
write("fuzz_checkpoint", "golden_small", checkpoint(ckpt_tensors))
write("fuzz_checkpoint", "golden_nan_loss", checkpoint(ckpt_tensors, position={
    "epoch": 0, "batch": 2, "global_step": 2, "generator_seed": "1", "generator_offset": "2",
    "loss_sum": "nan", "correct": 3, "samples": 8}))
write("fuzz_checkpoint", "bad_crc", checkpoint(ckpt_tensors, crcs={"model.w": "00000000"}))
write("fuzz_checkpoint", "bad_schedule", checkpoint(ckpt_tensors[:2] + [("schedule.last_epoch", "I64", [], struct.pack("<q", 10**12))]))
write("fuzz_checkpoint", "bad_position", checkpoint(ckpt_tensors, position={"epoch": -1}))
flipped = bytearray(checkpoint(ckpt_tensors))
flipped[flipped.index(b'correct') + 11] ^= 1  # a digit of the position's count: only metadata_crc32 sees it
write("fuzz_checkpoint", "bad_metadata_bit", bytes(flipped))


# Allocation traces (memory/alloc_trace.h): frugal's text, one event per line (`+ ID BYTES [STREAM]
# [TAG]`, `- ID`, `#` comments), or RMM's logging CSV, told apart by its header line.
RMM_HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
write("fuzz_alloc_trace", "frugal_small", b"# three blocks: c takes a's slot once a is freed\n"
      b"+ a 1024\n+ b 2KiB 3 grad   # a trailing comment\n\n- a\r\n+ c 1MiB 0x10 workspace\n- b\n")
write("fuzz_alloc_trace", "frugal_every_tag", "".join(
    f"+ {tag} {512 << i} {i} {tag}\n" for i, tag in enumerate(
        ["param", "grad", "optimizer", "activation", "workspace", "data", "other"])).encode())
write("fuzz_alloc_trace", "frugal_units", b"\xef\xbb\xbf+ a 1.5KiB\n+ b 2MB 0\n+ c 1G activation\n- c\n+ d 1T\n")
write("fuzz_alloc_trace", "rmm_small", (RMM_HEADER +
      "140,10.5,allocate,0x7f0000,4096,0x0\n"
      "140,10.6,allocate failure,0x0,1099511627776,0x0\n"
      "141,10.7,allocate,0x7f1000,256,0x5a\n"
      "140,10.8,free,0x7f0000,4096,0x0\n"
      "141,10.9,free,0x7f1000,256,90\n").encode())
write("fuzz_alloc_trace", "bad_double_free", b"+ a 1\n- a\n- a\n")
write("fuzz_alloc_trace", "bad_over_1pib", b"+ a 600TiB\n+ b 600TiB\n")
write("fuzz_alloc_trace", "bad_tag_before_stream", b"+ a 1 param 0\n")
write("fuzz_alloc_trace", "bad_rmm_fields", (RMM_HEADER + "1,0,allocate,0x1,10\n").encode())
# Lines of 4096 bytes are read, longer ones refused where they start: a comment line of each length.
write("fuzz_alloc_trace", "long_comment", b"+ a 1\n#" + b"c" * 4095 + b"\n- a\n")
write("fuzz_alloc_trace", "bad_long_line", b"+ a 1\n#" + b"c" * 4096 + b"\n- a\n")
