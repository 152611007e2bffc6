"""The send header's direct field lookup (headers.SendHeader.parse) reads every header exactly
as the normalise-then-read path does, errors included (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.rocketmq.errors import RocketMQError
from protocols.rocketmq.headers import SEND_V2_FIELDS, SendHeader, normalise_send_header

names = st.sampled_from(sorted(SEND_V2_FIELDS) + sorted(SEND_V2_FIELDS.values())
                        + ["unitMode", "x", ""])
values = st.one_of(st.sampled_from(["", "0", "1", "-1", "7", "true", "FALSE", " 1 ", "2.0",
                                    "2.5", "1e3", "nan", "abc", "99999999999999999999"]),
                   st.integers().map(str), st.text(max_size=6))


def outcome(ext: dict[str, str], v2: bool, fast: bool) -> object:
    try:
        if fast:
            return SendHeader.parse(ext, v2=v2)
        return SendHeader._parse_named(normalise_send_header(ext) if v2 else ext)
    except RocketMQError as exc:
        return (type(exc), str(exc))


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(names, values, max_size=14), st.booleans())
def test_direct_lookup_reads_as_the_named_fields(ext: dict[str, str], v2: bool) -> None:
    assert outcome(ext, v2, True) == outcome(ext, v2, False)


def test_a_cpp_v2_header() -> None:
    header = SendHeader.parse({"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "2",
                               "f": "0", "g": "1764100000123", "h": "0",
                               "i": "TAGS\x01t\x02", "j": "0", "k": "false", "m": "false"},
                              v2=True)
    assert (header.producer_group, header.topic, header.queue_id, header.born_timestamp,
            header.properties, header.batch) == ("PG", "T", 2, 1764100000123, "TAGS\x01t\x02",
                                                 False)
