"""JSON headers through orjson (protocols/rocketmq/codec.py) accept and produce exactly what the
standard-library codec did: hypothesis compares both on arbitrary headers and bytes."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from protocols.rocketmq import codec
from protocols.rocketmq.codec import (
    FLAG_RESPONSE,
    RemotingCommand,
    _decode_json_header,
    _encode_json_header,
)
from protocols.rocketmq.errors import MalformedFrameError


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise orjson.JSONDecodeError("off", "", 0)


def _fail_dumps(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("off")


def decoded(raw: bytes) -> object:
    """What _decode_json_header makes of `raw` (the command, or the refusal's type)."""
    try:
        return _decode_json_header(raw)
    except MalformedFrameError:
        return MalformedFrameError


def stdlib_decoded(raw: bytes) -> object:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec.orjson, "loads", _refuse)
        return decoded(raw)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=2**63, max_value=2**80))
headers = st.fixed_dictionaries(
    {"code": st.one_of(st.integers(-2**31, 2**31 - 1), st.text(max_size=3)),
     "extFields": st.dictionaries(st.text(max_size=8), scalars, max_size=8)},
    optional={"opaque": st.integers(0, 2**31 - 1), "flag": st.integers(0, 3),
              "language": st.one_of(st.sampled_from(["JAVA", "CPP"]), st.integers(0, 20)),
              "version": st.integers(0, 500), "remark": st.one_of(st.none(), st.text())})


@settings(max_examples=300, deadline=None)
@given(headers, st.booleans())
@example({"code": 0, "extFields": {"": -2**63 - 1}}, False)  # orjson reads it as a float
@example({"code": 0, "extFields": {"n": 2**64}, "opaque": 1}, True)
def test_any_json_header_decodes_as_with_the_standard_library(doc: dict[str, Any],
                                                              ascii_only: bool) -> None:
    raw = json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert decoded(raw) == stdlib_decoded(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_as_with_the_standard_library(raw: bytes) -> None:
    assert decoded(raw) == stdlib_decoded(raw)


def test_what_only_the_standard_library_reads_is_still_read() -> None:
    for raw in (b'{"code":10,"extFields":{"n":123456789012345678901234567890}}',
                b'{"code":10,"extFields":{"s":"\\ud800"}}',
                b'{"code":10,"extFields":{"f":NaN}}',
                json.dumps({"code": 10, "extFields": {"a": "b"}}).encode("utf-16")):
        command = _decode_json_header(raw)
        assert command.code == 10 and command.ext_fields
    with pytest.raises(MalformedFrameError):
        _decode_json_header(b'{"code":10,')


texts = st.one_of(st.text(), st.just("lone \ud800 surrogate"), st.just("\u00e9t\u00e9 \u4e2d"))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(texts, texts, max_size=8), st.one_of(st.none(), texts),
       st.integers(-2**31, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_encoded_headers_mean_what_the_standard_library_wrote(
        ext: dict[str, str], remark: str | None, code: int, opaque: int) -> None:
    command = RemotingCommand(code=code, opaque=opaque, flag=FLAG_RESPONSE, remark=remark,
                              ext_fields=ext)
    fast = _encode_json_header(command)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec.orjson, "dumps", _fail_dumps)
        slow = _encode_json_header(command)
    assert json.loads(fast) == json.loads(slow)
    assert _decode_json_header(fast) == _decode_json_header(slow)


json_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4),
                        st.floats(allow_nan=False, allow_infinity=False),
                        st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["code", "opaque", "flag", "version"]), json_values),
       st.one_of(st.none(), st.text(max_size=4), st.integers(-2, 20), st.booleans()))
def test_the_numeric_header_fields_are_integers_or_a_clear_error(
        fields: dict[str, Any], language: Any) -> None:
    """code/opaque/flag/version of any JSON type (read inline when they are JSON integers):
    integers in the command, or MalformedFrameError; never another exception."""
    doc = {**fields, "extFields": {}}
    if language is not None:
        doc["language"] = language
    try:
        command = _decode_json_header(json.dumps(doc).encode())
    except MalformedFrameError:
        assert any(type(fields.get(k, 0)) is not int for k in ("opaque", "flag", "version")) \
            or type(fields.get("code")) is not int
        return
    assert all(type(v) is int for v in (command.code, command.opaque, command.flag,
                                        command.version))
    assert type(command.language) is str
    for name, value in fields.items():
        if type(value) is int:
            assert getattr(command, name) == value
