"""The four Kafka compression codecs, as Kafka clients and brokers frame them.

Codec ids are the values of the low three bits of a record batch's attributes (and of a legacy
message's attributes): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.  The framing matters:

- gzip: the gzip file format (Java's GZIPOutputStream); several members are accepted on input.
- snappy: the "xerial" stream framing Kafka uses (a 16-byte header `\\x82SNAPPY\\x00`, version,
  compatible version, then blocks each prefixed by a 4-byte big-endian length); input without
  that header is taken as one raw snappy block, as Kafka's reader does.
- lz4: the LZ4 *frame* format with independent 64 KB blocks and no content size (what Kafka's
  KafkaLZ4BlockOutputStream writes).  Magic v0 messages were written by Kafka < 0.10 with a wrong
  frame-header checksum (KAFKA-3160); `decompress(..., legacy_lz4=True)` walks the frame itself
  and ignores that checksum.
- zstd: a zstd frame; the content size may be absent (Kafka's streaming writer omits it).

Decompression is bounded by `max_bytes` so that a small compressed batch cannot blow up memory.

This module is sans-IO and never imports Trio or the Kafka error classes: it raises
`CompressionError` (or `UnsupportedCodecError`), which callers turn into wire errors.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.block
import lz4.frame
import zstandard

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

DEFAULT_MAX_DECOMPRESSED_BYTES = 256 << 20

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_BYTES = 32 * 1024
_LZ4_FRAME_MAGIC = 0x184D2204
# what the codec libraries raise for bad input: cramjam's and lz4.block's errors are neither
# ValueError nor RuntimeError (lz4.frame's are RuntimeError)
_CODEC_ERRORS = (zlib.error, RuntimeError, ValueError, zstandard.ZstdError, struct.error,
                 cramjam.DecompressionError, lz4.block.LZ4BlockError)


class CompressionError(ValueError):
    """Compressed data could not be decoded (corrupt, truncated, or larger than allowed)."""


class UnsupportedCodecError(CompressionError):
    """The codec id is not one of 0..4."""


def compress(
    codec: int, data: bytes | bytearray | memoryview, *, level: int | None = None
) -> bytes:
    """Compress `data` with Kafka's framing for `codec`."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        compressor = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 16 + 15)
        return compressor.compress(data) + compressor.flush()
    if codec == SNAPPY:
        return _xerial_snappy_compress(memoryview(data))
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            store_size=False,
        )
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    *,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    legacy_lz4: bool = False,
) -> bytes:
    """Decompress `data` (Kafka framing for `codec`); CompressionError if corrupt or > max_bytes."""
    try:
        if codec == NONE:
            out = bytes(data)
        elif codec == GZIP:
            out = _gzip_decompress(data, max_bytes)
        elif codec == SNAPPY:
            out = _xerial_snappy_decompress(memoryview(data), max_bytes)
        elif codec == LZ4:
            out = _lz4_walk_frame(memoryview(data), max_bytes) if legacy_lz4 else _lz4_decompress(
                data, max_bytes
            )
        elif codec == ZSTD:
            out = _zstd_decompress(data, max_bytes)
        else:
            raise UnsupportedCodecError(f"unknown compression codec {codec}")
    except CompressionError:
        raise
    except _CODEC_ERRORS as exc:
        raise CompressionError(f"{CODEC_NAMES.get(codec, codec)} data is corrupt: {exc}") from exc
    if len(out) > max_bytes:
        raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
    return out


def _gzip_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    remaining = bytes(data)
    while remaining:
        d = zlib.decompressobj(16 + 15)
        chunk = d.decompress(remaining, max_bytes - total + 1)
        total += len(chunk)
        parts.append(chunk)
        if total > max_bytes:
            raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
        if not d.eof:
            raise CompressionError("gzip data is truncated")
        remaining = d.unused_data
    return b"".join(parts)


def _xerial_snappy_compress(data: memoryview) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_BYTES]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _xerial_snappy_decompress(data: memoryview, max_bytes: int) -> bytes:
    if len(data) < _XERIAL_HEADER.size or bytes(data[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("snappy block length is truncated")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CompressionError("snappy block is truncated")
        block = bytes(cramjam.snappy.decompress_raw(data[pos : pos + length]))
        pos += length
        total += len(block)
        if total > max_bytes:
            raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
        parts.append(block)
    return b"".join(parts)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=max_bytes + 1)
    if len(out) > max_bytes:
        raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
    if not d.eof:
        raise CompressionError("lz4 frame is truncated")
    return out


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_walk_frame(data: memoryview, max_bytes: int) -> bytes:
    """Decode an LZ4 frame block by block, not checking the header checksum (KAFKA-3160)."""
    if len(data) < 7 or struct.unpack_from("<I", data, 0)[0] != _LZ4_FRAME_MAGIC:
        raise CompressionError("not an lz4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CompressionError("unsupported lz4 frame version")
    block_checksum = bool(flg & 0x10)
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
    if block_max is None:
        raise CompressionError("bad lz4 block size")
    if not flg & 0x20:
        raise CompressionError("dependent lz4 blocks are not supported in legacy frames")
    parts: list[bytes] = []
    total = 0
    while True:
        if pos + 4 > len(data):
            raise CompressionError("lz4 frame is truncated")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            break
        raw = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if pos + size > len(data):
            raise CompressionError("lz4 block is truncated")
        block = data[pos : pos + size]
        pos += size + (4 if block_checksum else 0)
        out = bytes(block) if raw else lz4.block.decompress(block, uncompressed_size=block_max)
        total += len(out)
        if total > max_bytes:
            raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
        parts.append(out)
    return b"".join(parts)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    with reader:
        parts: list[bytes] = []
        total = 0
        while True:
            chunk = reader.read(min(1 << 20, max_bytes - total + 1))
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise CompressionError(f"decompressed size exceeds {max_bytes} bytes")
            parts.append(chunk)
    return b"".join(parts)
