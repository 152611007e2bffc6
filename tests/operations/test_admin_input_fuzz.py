"""Bad input to the admin surface is a clear 400, never a crash: the console's parameter
parsers, form decoding, Basic credentials, token strings and the message renderer, under
hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admin.auth import parse_basic
from gateway.admin.console import messages
from gateway.admin.console.rendering import (
    choice,
    group_name,
    int_arg,
    safe_next,
    time_arg,
    topic_name,
)
from gateway.admin.http_server import HttpError, HttpRequest
from gateway.security.admin_tokens import _TOKEN_RE

texts = st.one_of(st.none(), st.text(max_size=300))


@settings(max_examples=150, deadline=None)
@given(texts)
def test_parameter_parsers_raise_only_http_errors(value: str | None) -> None:
    for parse in (topic_name, group_name, time_arg,
                  lambda v: int_arg(v, "n", low=0, high=10, default=None),
                  lambda v: choice(v, messages.FORMATS, "format", "text")):
        try:
            parse(value)
        except HttpError as exc:
            assert exc.status == 400 and exc.message
    target = safe_next(value)
    assert target.startswith("/") and not target.startswith("//")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(
    ["application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8",
     "text/plain", ""]))
def test_form_bodies_decode_or_answer_400(body: bytes, content_type: str) -> None:
    q = HttpRequest("POST", "/x", {}, {"content-type": content_type}, body)
    try:
        form = q.form()
    except HttpError as exc:
        assert exc.status == 400
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in form.items())


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_basic_credentials_and_tokens_never_crash(value: str) -> None:
    pair = parse_basic(value)
    assert pair is None or (pair[0] and isinstance(pair[1], str))
    assert _TOKEN_RE.match(value) is None or value.startswith("lwt_")


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=6000)), st.sampled_from(messages.FORMATS))
def test_any_bytes_render_in_every_format(data: bytes | None, fmt: str) -> None:
    shown = messages.show_bytes(data, fmt)
    assert (shown is None) == (data is None)
    if data is not None and len(data) > messages.SHOW_BYTES:
        assert shown is not None and f"({len(data)} bytes)" in shown


def test_examples() -> None:
    assert time_arg("1700000000000") == 1700000000000
    assert time_arg("2026-01-31T12:00:00") == 1769860800000
    with pytest.raises(HttpError):
        time_arg("yesterday")
    assert messages.show_bytes(b'{"a":1}', "json") == '{\n  "a": 1\n}'
    assert messages.show_bytes(b"\xff\x00", "text") == "hex: ff 00"
    assert safe_next("//evil.example/x") == "/" and safe_next("/console/topics") == \
        "/console/topics"
