"""Primitive Kafka wire types: fixed-width integers, varints, (compact) strings, bytes, uuids.

Readers have the shape `read(buf: memoryview, pos: int) -> (value, new_pos)` and check every
length against the bytes that remain *before* slicing or allocating; a violation raises
`MalformedRequestError`.  (Fixed-width reads rely on `struct.unpack_from`, whose `struct.error`
the codec turns into `MalformedRequestError` at its boundary.)  Writers have the shape
`write(value, out: bytearray) -> None`; when `out` is a `SegmentedOutput`, the bytes writer
hands large blocks to it uncopied instead of appending them.

The factories return small closures specialised once per (type, compact, nullable), so the
compiled schema does no type dispatch at run time.  This module never knows about APIs, the
schema table or sockets.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from .errors import MalformedRequestError

Reader = Callable[[memoryview, int], tuple[Any, int]]
Writer = Callable[[Any, bytearray], None]

# Fixed-width types: struct format character and size.
FIXED_FORMATS: Final[dict[str, str]] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}
FIXED_SIZES: Final[dict[str, int]] = {
    name: struct.calcsize(">" + fmt) for name, fmt in FIXED_FORMATS.items()
}

ZERO_UUID: Final = uuid.UUID(int=0)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32_MAX = 0xFFFFFFFF


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (32 bits), as Kafka writes lengths and tags."""
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise MalformedRequestError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > _UINT32_MAX:
                raise MalformedRequestError("varint out of range")
            return value, pos
        shift += 7
        if shift >= 35:
            raise MalformedRequestError("varint longer than 5 bytes")


def write_uvarint(value: int, out: bytearray) -> None:
    if value < 0 or value > _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _length_reader(compact: bool, nullable: bool, what: str, wide: bool) -> Reader:
    """Reads a length prefix; returns -1 for null.  `wide`: int32 prefix (bytes) vs int16."""
    fixed = _INT32 if wide else _INT16

    if compact:

        def read_compact_length(buf: memoryview, pos: int) -> tuple[int, int]:
            if pos < len(buf) and buf[pos] < 0x80:  # one-byte varint: lengths under 127
                raw = buf[pos]
                pos += 1
            else:
                raw, pos = read_uvarint(buf, pos)
            if raw == 0:
                if not nullable:
                    raise MalformedRequestError(f"non-nullable {what} is null")
                return -1, pos
            length = raw - 1
            if length > len(buf) - pos:
                raise MalformedRequestError(f"{what} length {length} exceeds the frame")
            return length, pos

        return read_compact_length

    unpack_from = fixed.unpack_from
    size = fixed.size

    def read_length(buf: memoryview, pos: int) -> tuple[int, int]:
        (length,) = unpack_from(buf, pos)
        pos += size
        if length < 0:
            if length != -1 or not nullable:
                raise MalformedRequestError(f"bad {what} length {length}")
            return -1, pos
        if length > len(buf) - pos:
            raise MalformedRequestError(f"{what} length {length} exceeds the frame")
        return length, pos

    return read_length


def string_reader(compact: bool, nullable: bool) -> Reader:
    read_length = _length_reader(compact, nullable, "string", wide=False)

    def read_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
        length, pos = read_length(buf, pos)
        if length < 0:
            return None, pos
        end = pos + length
        try:
            return str(buf[pos:end], "utf-8"), end
        except UnicodeDecodeError as exc:
            raise MalformedRequestError("string is not valid UTF-8") from exc

    return read_string


def bytes_reader(compact: bool, nullable: bool, *, zero_copy: bool) -> Reader:
    """`zero_copy`: hand out a memoryview into the frame (records) instead of a bytes copy."""
    read_length = _length_reader(compact, nullable, "bytes", wide=True)

    def read_bytes(buf: memoryview, pos: int) -> tuple[bytes | memoryview | None, int]:
        length, pos = read_length(buf, pos)
        if length < 0:
            return None, pos
        end = pos + length
        return (buf[pos:end] if zero_copy else bytes(buf[pos:end])), end

    return read_bytes


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise MalformedRequestError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def array_length_reader(compact: bool, nullable: bool, min_element_size: int) -> Reader:
    """Reads an array count, refusing counts the remaining bytes cannot possibly hold."""
    min_size = max(1, min_element_size)

    def read_count(buf: memoryview, pos: int) -> tuple[int, int]:
        if compact:
            if pos < len(buf) and buf[pos] < 0x80:
                count = buf[pos] - 1
                pos += 1
            else:
                raw, pos = read_uvarint(buf, pos)
                count = raw - 1
        else:
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
        if count < 0:
            if count != -1 or not nullable:
                raise MalformedRequestError(f"bad array length {count}")
            return -1, pos
        if count * min_size > len(buf) - pos:
            raise MalformedRequestError(f"array of {count} elements exceeds the frame")
        return count, pos

    return read_count


# --- writers -------------------------------------------------------------------------------------


def _null_error(what: str) -> ValueError:
    return ValueError(f"{what} is not nullable in this version")


def string_writer(compact: bool, nullable: bool) -> Writer:
    pack16 = _INT16.pack

    def write_string(value: str | None, out: bytearray) -> None:
        if value is None:
            if not nullable:
                raise _null_error("string")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff"
            return
        data = value.encode("utf-8")
        if compact:
            write_uvarint(len(data) + 1, out)
        else:
            out += pack16(len(data))
        out += data

    return write_string


# Buffers at least this large are passed through a `SegmentedOutput` uncopied.
PASS_THROUGH_MIN_BYTES: Final = 8 * 1024


class SegmentedOutput(bytearray):
    """An encoding target that keeps large byte blocks (stored record batches) uncopied.

    Writers append to it like to any bytearray; `bytes_writer` hands a large block to
    `pass_through`, which closes the bytes written so far into a segment of their own and
    records the block as the next segment.  `segments()` is then the whole encoding as a list
    of buffers, ready for one vectored send.
    """

    def __init__(self, initial: bytes | bytearray = b"") -> None:
        super().__init__(initial)
        self.done: list[Any] = []

    def pass_through(self, block: Any) -> None:
        self.done.append(self[:])
        del self[:]
        self.done.append(block)

    def segments(self) -> list[Any]:
        """Every segment in order; the first one is a bytearray (the caller may patch it)."""
        parts = self.done
        if self or not parts:
            parts.append(self[:])
        return parts


def _buffers(value: Any) -> Sequence[Any]:
    """Records may be given as one buffer or as a sequence of buffers (stored batches)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return (value,)
    return value  # type: ignore[no-any-return]


def bytes_writer(compact: bool, nullable: bool) -> Writer:
    pack32 = _INT32.pack

    def write_bytes(value: Any, out: bytearray) -> None:
        if value is None:
            if not nullable:
                raise _null_error("bytes")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
            return
        if isinstance(value, bytes | bytearray):
            if compact:
                write_uvarint(len(value) + 1, out)
            else:
                out += pack32(len(value))
            if len(value) >= PASS_THROUGH_MIN_BYTES and type(out) is SegmentedOutput:
                out.pass_through(value)
            else:
                out += value
            return
        parts = _buffers(value)
        sizes = [len(part) if type(part) is bytes else memoryview(part).nbytes for part in parts]
        length = sum(sizes)
        if compact:
            write_uvarint(length + 1, out)
        else:
            out += pack32(length)
        if type(out) is SegmentedOutput:
            for part, size in zip(parts, sizes, strict=True):
                if size >= PASS_THROUGH_MIN_BYTES:
                    out.pass_through(part)
                else:
                    out += part
        else:
            for part in parts:
                out += part

    return write_bytes


def write_uuid(value: uuid.UUID | bytes | None, out: bytearray) -> None:
    if value is None:
        out += ZERO_UUID.bytes
    elif isinstance(value, uuid.UUID):
        out += value.bytes
    else:
        if len(value) != 16:
            raise ValueError("uuid must be 16 bytes")
        out += value


def array_length_writer(compact: bool, nullable: bool) -> Callable[[int, bytearray], None]:
    pack32 = _INT32.pack

    def write_count(count: int, out: bytearray) -> None:
        if count < 0:
            if not nullable:
                raise _null_error("array")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
        elif compact:
            write_uvarint(count + 1, out)
        else:
            out += pack32(count)

    return write_count


def min_wire_size(type_name: str, compact: bool) -> int:
    """The fewest bytes a value of a non-struct type occupies (for array count checks)."""
    if type_name in FIXED_SIZES:
        return FIXED_SIZES[type_name]
    if type_name == "uuid":
        return 16
    if type_name == "string":
        return 1 if compact else 2
    if type_name in ("bytes", "records"):
        return 1 if compact else 4
    raise KeyError(type_name)
