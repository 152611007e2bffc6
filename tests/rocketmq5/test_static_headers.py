"""The server's header encoder: whatever it writes, a standard HPACK decoder reads back exactly,
block after block and across peer table-size changes (its output never depends on state)."""

from __future__ import annotations

from hpack import Decoder
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.rocketmq.grpc.static_headers import StaticHeaderEncoder

NAMES = st.sampled_from([b":status", b"content-type", b"grpc-status", b"grpc-message",
                         b"x-mq-anything", b"content-length", b"a" * 200])
VALUES = st.one_of(st.sampled_from([b"200", b"application/grpc", b"0", b"404"]),
                   st.binary(max_size=300).map(lambda b: b.replace(b"\x00", b"")))
BLOCK = st.lists(st.tuples(NAMES, VALUES), min_size=1, max_size=6)
STEP = st.tuples(BLOCK, st.one_of(st.none(), st.integers(0, 1 << 20)))


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=8))
def test_every_block_decodes_to_what_was_given(steps: list) -> None:
    encoder = StaticHeaderEncoder()
    decoder = Decoder()
    for headers, new_table_size in steps:
        if new_table_size is not None:
            encoder.header_table_size = new_table_size  # the peer's SETTINGS, as h2 sets it
            decoder.max_allowed_table_size = new_table_size
        block = encoder.encode(headers)
        assert decoder.decode(block, raw=True) == headers
    assert len(decoder.header_table.dynamic_entries) == 0  # nothing was ever indexed


def test_a_table_size_change_is_acknowledged_once_then_blocks_are_cached() -> None:
    encoder = StaticHeaderEncoder()
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    first = encoder.encode(headers)
    assert first[0] == 0x88  # :status 200 is static index 8
    encoder.header_table_size = 0
    updated = encoder.encode(headers)
    assert updated == b"\x20" + first  # size update to 0, then the same fields
    assert encoder.encode(headers) == first
