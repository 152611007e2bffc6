"""RocketMQ 5 recall handles: what the broker hands out reads back the same, and anything else
a client sends is a clean BAD_REQUEST, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.messages import RecallHandle, parse_recall_handle, recall_handle
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb

names = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1,
                max_size=30).filter(lambda s: " " not in s)


@given(names, st.integers(0, 2**63 - 1), names)
def test_a_handle_reads_back(broker: str, offset: int, message_id: str) -> None:
    handle = recall_handle(broker, offset, message_id)
    assert parse_recall_handle(handle) == RecallHandle(broker, offset, message_id)


@given(st.text(max_size=200))
def test_anything_else_is_a_bad_request_or_a_handle(text: str) -> None:
    try:
        parsed = parse_recall_handle(text)
    except RpcFailure as exc:
        assert exc.code == pb.BAD_REQUEST
    else:
        assert parsed.offset >= 0 and parsed.broker_name and parsed.message_id


@pytest.mark.parametrize("text", ["", "=", "bm90IGEgaGFuZGxl", recall_handle("b", 1, "m")[:-2]])
def test_examples_are_refused(text: str) -> None:
    with pytest.raises(RpcFailure):
        parse_recall_handle(text)
