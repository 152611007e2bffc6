"""Compiles schema-table fields for one (version, flexible) into a decoder and an encoder.

`compile_struct(fields, version, flexible)` walks the declarative `Field` list once and returns
closures specialised for that version: consecutive fixed-width fields are merged into one
`struct.Struct`, each variable field gets a reader/writer chosen once, tagged fields get a tag
table.  At run time no schema attribute is looked up: decoding is a loop over prepared steps.

Semantics (Kafka's): nullable per version; compact strings/bytes/arrays (unsigned varint
length + 1) in flexible versions unless a field overrides `flexible` (the request header's
ClientId); tagged fields written only when they differ from their default, unknown tags
skipped on read; keys missing from an encoded dict take the spec default; decoded dicts carry
every field of the struct, with defaults for fields absent from the version or not sent.
Records fields decode to a memoryview into the frame and are never parsed here.

This module never touches sockets and never decides which schema applies; codec.py does that.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import MalformedRequestError
from .schema.model import MISSING, Field, parse_versions
from .types import (
    FIXED_FORMATS,
    ZERO_UUID,
    Reader,
    Writer,
    array_length_reader,
    array_length_writer,
    bytes_reader,
    bytes_writer,
    min_wire_size,
    read_uuid,
    read_uvarint,
    string_reader,
    string_writer,
    write_uuid,
    write_uvarint,
)

Step = Callable[[memoryview, int, dict[str, Any]], int]
WriteStep = Callable[[dict[str, Any], bytearray], None]
StructDecoder = Callable[[memoryview, int], tuple[dict[str, Any], int]]
StructEncoder = Callable[[dict[str, Any], bytearray], None]


class PreEncoded(bytes):
    """A struct value already encoded for the version being written (see `compile_struct`):
    written as these bytes, e.g. a cached Metadata topic entry."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class CompiledStruct:
    decode: StructDecoder
    encode: StructEncoder
    min_size: int  # fewest bytes an encoding of this struct can take


def type_default(field: Field) -> Any:
    """The value a field takes when the spec gives no default (Kafka's generator rules)."""
    if field.default is not MISSING:
        if field.default is None:
            return None
        if field.is_array:
            return []
        return field.default
    if field.is_array:
        return []
    if field.is_struct:
        return struct_defaults(field.fields)
    element = field.type
    if element == "string":
        return ""
    if element == "bytes":
        return b""
    if element == "records":
        return None
    if element == "uuid":
        return ZERO_UUID
    if element == "bool":
        return False
    if element == "float64":
        return 0.0
    return 0


def struct_defaults(fields: tuple[Field, ...]) -> dict[str, Any]:
    return {f.key: type_default(f) for f in fields}


def _fresh(value: Any) -> Any:
    """Copies mutable defaults so decoded dicts never share a list or dict."""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _compact(field: Field, version: int, flexible: bool) -> bool:
    if field.flexible is not None:
        return version in parse_versions(field.flexible)
    return flexible


def _value_codec(
    field: Field, version: int, flexible: bool, element: bool = False
) -> tuple[Reader, Writer, int]:
    """Reader, writer and minimum size for one value of `field` (or one array element)."""
    compact = _compact(field, version, flexible)
    nullable = field.nullable_in(version) and not element
    type_name = field.element_type if element else field.type
    if field.is_array and not element:
        return _array_codec(field, version, flexible, compact, nullable)
    if field.is_struct:
        inner = compile_struct(field.fields, version, flexible)
        if element or not nullable:
            return inner.decode, _non_null(inner.encode, field.name), inner.min_size
        return _nullable_struct(inner)
    if type_name in FIXED_FORMATS:
        packer = struct.Struct(">" + FIXED_FORMATS[type_name])
        unpack_from, pack, size = packer.unpack_from, packer.pack, packer.size

        def read_fixed(buf: memoryview, pos: int) -> tuple[Any, int]:
            return unpack_from(buf, pos)[0], pos + size

        def write_fixed(value: Any, out: bytearray) -> None:
            out += pack(value)

        return read_fixed, write_fixed, size
    if type_name == "uuid":
        return read_uuid, write_uuid, 16
    if type_name == "string":
        return (
            string_reader(compact, nullable),
            string_writer(compact, nullable),
            min_wire_size("string", compact),
        )
    if type_name in ("bytes", "records"):
        zero_copy = type_name == "records"
        return (
            bytes_reader(compact, nullable, zero_copy=zero_copy),
            bytes_writer(compact, nullable),
            min_wire_size(type_name, compact),
        )
    raise ValueError(f"unknown type {type_name!r} for field {field.name}")


def _non_null(encode: StructEncoder, name: str) -> Writer:
    def write_struct(value: Any, out: bytearray) -> None:
        if value is None:
            raise ValueError(f"struct {name} is not nullable in this version")
        encode(value, out)

    return write_struct


def _nullable_struct(inner: CompiledStruct) -> tuple[Reader, Writer, int]:
    decode, encode = inner.decode, inner.encode

    def read_nullable_struct(buf: memoryview, pos: int) -> tuple[Any, int]:
        marker = struct.unpack_from(">b", buf, pos)[0]
        if marker < 0:
            return None, pos + 1
        return decode(buf, pos + 1)

    def write_nullable_struct(value: Any, out: bytearray) -> None:
        if value is None:
            out.append(0xFF)
        else:
            out.append(1)
            encode(value, out)

    return read_nullable_struct, write_nullable_struct, 1


def _array_codec(
    field: Field, version: int, flexible: bool, compact: bool, nullable: bool
) -> tuple[Reader, Writer, int]:
    read_element, write_element, element_size = _value_codec(field, version, flexible, True)
    read_count = array_length_reader(compact, nullable, element_size)
    write_count = array_length_writer(compact, nullable)
    fixed_format = FIXED_FORMATS.get(field.element_type)

    if fixed_format is not None:
        # Whole array in one struct call: the fast path for []int32 / []int64.
        def read_fixed_array(buf: memoryview, pos: int) -> tuple[Any, int]:
            count, pos = read_count(buf, pos)
            if count < 0:
                return None, pos
            values = struct.unpack_from(f">{count}{fixed_format}", buf, pos)
            return list(values), pos + count * element_size

        def write_fixed_array(value: Any, out: bytearray) -> None:
            if value is None:
                write_count(-1, out)
                return
            write_count(len(value), out)
            out += struct.pack(f">{len(value)}{fixed_format}", *value)

        return read_fixed_array, write_fixed_array, 1 if compact else 4

    def read_array(buf: memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_count(buf, pos)
        if count < 0:
            return None, pos
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item, pos = read_element(buf, pos)
            append(item)
        return items, pos

    def write_array(value: Any, out: bytearray) -> None:
        if value is None:
            write_count(-1, out)
            return
        write_count(len(value), out)
        for item in value:
            write_element(item, out)

    return read_array, write_array, 1 if compact else 4


def _fixed_group_steps(group: list[Field], defaults: dict[str, Any]) -> tuple[Step, WriteStep, int]:
    packer = struct.Struct(">" + "".join(FIXED_FORMATS[f.type] for f in group))
    keys = tuple(f.key for f in group)
    key_defaults = tuple(defaults[k] for k in keys)
    unpack_from, pack, size = packer.unpack_from, packer.pack, packer.size
    if len(keys) == 1:
        (key,) = keys
        (default,) = key_defaults

        def read_one(buf: memoryview, pos: int, d: dict[str, Any]) -> int:
            d[key] = unpack_from(buf, pos)[0]
            return pos + size

        def write_one(d: dict[str, Any], out: bytearray) -> None:
            out += pack(d.get(key, default))

        return read_one, write_one, size

    def read_group(buf: memoryview, pos: int, d: dict[str, Any]) -> int:
        d.update(zip(keys, unpack_from(buf, pos), strict=True))
        return pos + size

    def write_group(d: dict[str, Any], out: bytearray) -> None:
        out += pack(*map(d.get, keys, key_defaults))

    return read_group, write_group, size


def _variable_steps(key: str, default: Any, read: Reader, write: Writer) -> tuple[Step, WriteStep]:
    def read_step(buf: memoryview, pos: int, d: dict[str, Any]) -> int:
        d[key], pos = read(buf, pos)
        return pos

    def write_step(d: dict[str, Any], out: bytearray) -> None:
        write(d.get(key, default), out)

    return read_step, write_step


def compile_struct(fields: tuple[Field, ...], version: int, flexible: bool) -> CompiledStruct:
    """Decoder/encoder for `fields` at `version` (`flexible`: tagged fields section present)."""
    defaults = struct_defaults(fields)
    read_steps: list[Step] = []
    write_steps: list[WriteStep] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    tagged_writes: list[tuple[int, str, Any, Writer]] = []
    min_size = 1 if flexible else 0
    group: list[Field] = []

    def flush_group() -> None:
        nonlocal min_size
        if group:
            read_step, write_step, size = _fixed_group_steps(group, defaults)
            read_steps.append(read_step)
            write_steps.append(write_step)
            min_size += size
            group.clear()

    for field in fields:
        if not field.present_in(version):
            continue
        if flexible and field.tagged_in(version):
            read, write, _ = _value_codec(field, version, flexible)
            assert field.tag is not None
            tagged[field.tag] = (field.key, read)
            tagged_writes.append((field.tag, field.key, defaults[field.key], write))
            continue
        if field.type in FIXED_FORMATS:
            group.append(field)
            continue
        flush_group()
        read, write, size = _value_codec(field, version, flexible)
        read_step, write_step = _variable_steps(field.key, defaults[field.key], read, write)
        read_steps.append(read_step)
        write_steps.append(write_step)
        min_size += size
    flush_group()
    tagged_writes.sort(key=lambda entry: entry[0])

    # Decoded dicts start from the defaults (keys in wire order); lists/dicts are fresh copies.
    template = dict(defaults)
    read_keys = {
        f.key for f in fields if f.present_in(version) and not (flexible and f.tagged_in(version))
    }
    # Only defaults that no read step overwrites need a fresh copy per decode.
    mutable = [
        (k, v) for k, v in defaults.items() if isinstance(v, list | dict) and k not in read_keys
    ]
    read_tags = _tag_reader(tagged) if flexible else None
    write_tags = _tag_writer(tagged_writes) if flexible else None

    def decode(buf: memoryview, pos: int) -> tuple[dict[str, Any], int]:
        d = template.copy()
        for key, value in mutable:
            d[key] = _fresh(value)
        for step in read_steps:
            pos = step(buf, pos, d)
        if read_tags is not None:
            pos = read_tags(buf, pos, d)
        return d, pos

    def encode(d: dict[str, Any], out: bytearray) -> None:
        if d.__class__ is PreEncoded:  # encoded earlier for this very version
            out += d  # type: ignore[arg-type]
            return
        for step in write_steps:
            step(d, out)
        if write_tags is not None:
            write_tags(d, out)

    return CompiledStruct(decode, encode, min_size)


def _tag_reader(tagged: dict[int, tuple[str, Reader]]) -> Step:
    def read_tags(buf: memoryview, pos: int, d: dict[str, Any]) -> int:
        if pos < len(buf) and buf[pos] == 0:  # the common case: no tagged fields
            return pos + 1
        count, pos = read_uvarint(buf, pos)
        if count * 2 > len(buf) - pos:
            raise MalformedRequestError(f"{count} tagged fields exceed the frame")
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise MalformedRequestError("tagged field exceeds the frame")
            entry = tagged.get(tag)
            if entry is not None:
                key, read = entry
                # Bound the field's reader by its declared size.
                d[key], _ = read(buf[:end], pos)
            pos = end
        return pos

    return read_tags


def _tag_writer(tagged_writes: list[tuple[int, str, Any, Writer]]) -> WriteStep:
    if not tagged_writes:

        def write_no_tags(d: dict[str, Any], out: bytearray) -> None:
            out.append(0)

        return write_no_tags

    def write_tags(d: dict[str, Any], out: bytearray) -> None:
        chosen: list[tuple[int, bytearray]] = []
        for tag, key, default, write in tagged_writes:
            value = d.get(key, default)
            if value is default or value == default:
                continue
            encoded = bytearray()
            write(value, encoded)
            chosen.append((tag, encoded))
        write_uvarint(len(chosen), out)
        for tag, encoded in chosen:
            write_uvarint(tag, out)
            write_uvarint(len(encoded), out)
            out += encoded

    return write_tags
