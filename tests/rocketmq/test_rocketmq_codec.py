"""The remoting codec and message layouts, with hypothesis round trips and fuzzing."""

from __future__ import annotations

import json
import struct
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka.built_batch import built_batch
from protocols.kafka.record_batch import Record, build_batch, parse_header
from protocols.rocketmq.codec import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameReader,
    RemotingCommand,
    decode_command,
    encode_command,
)
from protocols.rocketmq.errors import FrameTooLargeError, MalformedFrameError, MessageIllegalError
from protocols.rocketmq.headers import SendHeader, ext_bool, ext_int
from protocols.rocketmq.message_encoding import (
    BatchedMessage,
    MessageMeta,
    StoredMessage,
    decode_batch_body,
    decode_properties,
    decode_stored_messages,
    encode_batch_body,
    encode_properties,
    encode_stored_message,
    from_record,
    java_string_hash,
    message_batch,
    to_record,
)
from protocols.rocketmq.message_id import (
    commit_log_offset,
    decode_commit_log_offset,
    decode_offset_message_id,
    offset_message_id,
    topic_hash,
)
from protocols.rocketmq.subscription import parse_tag_expression
from protocols.rocketmq.topic_names import from_storage, to_storage

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # not encodable as UTF-8
text = st.text(alphabet=st.characters(blacklist_categories=SURROGATES,
                                      blacklist_characters="\x01\x02"), max_size=30)
ext_fields = st.dictionaries(st.text(min_size=1, max_size=12), text, max_size=6)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from(["JAVA", "CPP", "GO", "PYTHON"]),
    version=st.integers(0, 32767),
    remark=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    ext_fields=ext_fields,
    body=st.binary(max_size=200),
    serialize_type=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
)


@given(commands)
def test_command_round_trip(command: RemotingCommand) -> None:
    frame = encode_command(command)
    [inner] = FrameReader().feed(frame)
    assert decode_command(inner) == command


@given(st.lists(commands, min_size=1, max_size=5), st.integers(1, 50))
def test_frame_reader_any_chunking(cmds: list[RemotingCommand], chunk: int) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    reader = FrameReader()
    frames: list[bytes] = []
    for i in range(0, len(stream), chunk):
        frames += reader.feed(stream[i : i + chunk])
    assert [decode_command(f) for f in frames] == cmds
    assert reader.buffered == 0


def test_oversize_frame_refused_before_the_body_arrives() -> None:
    reader = FrameReader(max_frame_bytes=1024)
    with pytest.raises(FrameTooLargeError):
        reader.feed(struct.pack(">i", 1025))  # only the prefix: nothing allocated for the body
    with pytest.raises(FrameTooLargeError):
        decode_command(struct.pack(">I", 2000) + b"x" * 2000, max_header_bytes=1000)


def test_wrong_serialisation_byte() -> None:
    with pytest.raises(MalformedFrameError):
        decode_command(struct.pack(">I", (7 << 24) | 2) + b"{}")


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_fuzzed_frames_only_raise_malformed(data: bytes) -> None:
    for serialize in (0, 1):
        frame = struct.pack(">I", (serialize << 24) | min(len(data), 0xFFFFFF)) + data
        try:
            decode_command(frame)
        except MalformedFrameError:
            pass


def test_ext_values_in_every_client_form() -> None:
    header = json.dumps({"code": 310, "flag": 0, "opaque": 5, "language": "CPP", "version": 1,
                         "extFields": {"a": "pg", "b": "t", "e": 3, "f": 0, "g": "1700",
                                       "m": True, "k": "0", "d": 4.0}}).encode()
    cmd = decode_command(struct.pack(">I", len(header)) + header)
    h = SendHeader.parse(cmd.ext_fields, v2=True)
    assert (h.topic, h.queue_id, h.born_timestamp, h.batch) == ("t", 3, 1700, True)
    assert h.default_topic_queue_nums == 4
    assert ext_bool({"x": "1"}, "x") and ext_bool({"x": "true"}, "x")
    assert not ext_bool({"x": "0"}, "x") and not ext_bool({"x": "false"}, "x")
    assert ext_int({"x": "12"}, "x") == 12


props = st.dictionaries(st.text(alphabet="abcdefgXYZ_", min_size=1, max_size=8), text,
                        max_size=5)


@given(props)
def test_properties_round_trip(p: dict[str, str]) -> None:
    assert decode_properties(encode_properties(p)) == p


@given(st.lists(st.tuples(st.binary(max_size=100), st.integers(0, 100), props),
                min_size=1, max_size=5))
def test_batch_body_round_trip(items: list[tuple[bytes, int, dict[str, str]]]) -> None:
    messages = [BatchedMessage(b, f, p) for b, f, p in items]
    assert decode_batch_body(encode_batch_body(messages)) == messages


@given(st.binary(max_size=200))
def test_fuzzed_batch_bodies_only_raise_illegal(data: bytes) -> None:
    try:
        decode_batch_body(data)
    except MessageIllegalError:
        pass


@given(st.builds(
    StoredMessage, topic=st.text(alphabet="abcXYZ%_-", min_size=1, max_size=20),
    queue_id=st.integers(0, 4095), queue_offset=st.integers(0, 2**40),
    commit_log_offset=st.integers(0, 2**62), body=st.binary(max_size=100), properties=props,
    flag=st.integers(0, 100), sys_flag=st.sampled_from([0, 2, 4, 8]),
    born_timestamp=st.integers(0, 2**42), born_host=st.just(("10.1.2.3", 5555)),
    store_timestamp=st.integers(0, 2**42), store_host=st.just(("127.0.0.1", 10911)),
    reconsume_times=st.integers(0, 16)))
def test_stored_message_round_trip(m: StoredMessage) -> None:
    encoded = encode_stored_message(m)
    assert decode_stored_messages(encoded + encoded) == [m, m]


def test_record_mapping() -> None:
    meta = MessageMeta(flag=3, sys_flag=0, born_host=("10.0.0.9", 4321), store_timestamp=99,
                       reconsume_times=2)
    record = to_record(b"body", {"TAGS": "a", "KEYS": "k1 k2", "x": "y"}, meta, 1234)
    assert record.key == b"k1 k2" and record.value == b"body"
    body, p, back = from_record(record)
    assert (body, p, back) == (b"body", {"TAGS": "a", "KEYS": "k1 k2", "x": "y"}, meta)
    # a Kafka record: headers become properties, the key KEYS, separators are dropped
    body, p, back = from_record(Record(5, 77, b"kk", b"v", [("h\x01", b"v\x02al"), ("n", None)]))
    assert p == {"h": "val", "n": "", "KEYS": "kk"} and back.store_timestamp == 77


@settings(max_examples=120)
@given(st.one_of(st.binary(max_size=300),  # and every varint width of the body and record
                 st.sampled_from([30, 31, 63, 64, 8000, 8191, 8192, 20000]).map(bytes)),
       st.one_of(st.dictionaries(text, text, max_size=5),
                 st.just({f"p{i}": "v" * i for i in range(70)}),  # 71 headers, a long key
                 st.just({"KEYS": "k" * 100, "big": "\u00e9" * 5000})), st.builds(
    MessageMeta, flag=st.integers(-(2**31), 2**31 - 1), sys_flag=st.integers(0, 2**31 - 1),
    born_host=st.tuples(st.sampled_from(["10.0.0.9", "not an address"]), st.integers(0, 65535)),
    store_timestamp=st.integers(0, 2**41), reconsume_times=st.integers(0, 16)),
    st.integers(0, 2**41))
def test_one_message_batch_is_the_generic_batch(body: bytes, props: dict[str, str],
                                                meta: MessageMeta, born: int) -> None:
    built = message_batch(body, props, meta, born)
    generic = built_batch([to_record(body, props, meta, born)])
    assert built.data == generic.data == build_batch([to_record(body, props, meta, born)])
    assert built.header == generic.header == parse_header(built.data)


@given(st.text(alphabet="abcXYZ_-%", min_size=1, max_size=30), st.integers(0, 4095),
       st.integers(0, 2**36 - 1))
def test_message_ids_round_trip(topic: str, queue: int, offset: int) -> None:
    clo = commit_log_offset(topic, queue, offset)
    assert clo >= 0
    assert decode_commit_log_offset(clo) == (topic_hash(topic), queue, offset)
    assert decode_offset_message_id(offset_message_id("192.168.0.7", 10911, clo)) == (
        "192.168.0.7", 10911, clo)
    assert from_storage(to_storage(topic)) == topic


def test_java_hash_and_subscriptions() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2147483648
    f = parse_tag_expression("TagA || TagB ||  ")
    assert f.matches("TagA") and f.matches("TagB") and not f.matches("TagC")
    assert not f.matches(None)
    assert parse_tag_expression("*").matches(None)
    assert parse_tag_expression("").matches("x")


def test_stored_message_bytes_are_fixed() -> None:
    """The pull-response layout byte for byte (pinned from the field-by-field encoder that the
    one-pack encoder replaced; an unparsable store host is written as 127.0.0.1)."""
    m = StoredMessage(topic="T\u00e9", queue_id=3, queue_offset=77, commit_log_offset=123456789,
                      body=b"hello body", properties={"TAGS": "a", "KEYS": "k1 k2"}, flag=5,
                      sys_flag=0x31, born_timestamp=1764100000123, born_host=("10.1.2.3", 5555),
                      store_timestamp=1764100000456, store_host=("not-an-ip", 10911),
                      reconsume_times=2, prepared_transaction_offset=9)
    assert encode_stored_message(m).hex() == (
        "0000007adaa320a73e933d590000000300000005000000000000004d00000000075bcd15000000000000"
        "019abc8dc97b0a010203000015b30000019abc8dcac87f00000100002a9f000000020000000000000009"
        "0000000a68656c6c6f20626f64790354c3a90012544147530161024b455953016b31206b3202")


@given(st.lists(st.tuples(st.text(alphabet="ab\x01\x02", max_size=4),
                          st.one_of(st.none(), st.text(alphabet="xy\x01\x02", max_size=4))),
                max_size=6))
def test_headers_become_properties_without_separators(
        headers: list[tuple[str, str | None]]) -> None:
    record = Record(0, 1, None, b"v", [(n, None if v is None else v.encode()) for n, v in headers])
    _body, props, _meta = from_record(record)
    expected: dict[str, str] = {}
    for name, value in headers:
        clean = name.replace("\x01", "").replace("\x02", "")
        if clean:
            expected[clean] = (value or "").replace("\x01", "").replace("\x02", "")
    assert props == expected
