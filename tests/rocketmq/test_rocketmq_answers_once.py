"""Every request on a RocketMQ connection is answered exactly once, with its own opaque, and a
send answered SUCCESS is stored at the offset it was given, whatever mix of requests is
pipelined and however the bytes are cut: sends answered from their append's completion (the
queues whose log is open, 5f490d2), sends through a request task (the last queue's first), pulls on
parked request tasks (bcd1411), oneway sends and requests (never answered) and unknown codes, on the
durable backend.  Hypothesis picks the mix and the cuts."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger_backend.metadata import open_store
from protocols.kafka.record_batch import decode_records
from protocols.rocketmq.codec import RemotingCommand, encode_command, make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext

QUEUES = 3
KINDS = ["send", "send", "send_v1", "send_oneway", "pull", "oneway", "unknown"]


def _request(kind: str, queue: int, opaque: int) -> RemotingCommand:
    if kind.startswith("send"):
        code = RC.SEND_MESSAGE if kind == "send_v1" else RC.SEND_MESSAGE_V2
        return make_request(code, send_ext("mix", {"TAGS": "t"}, queue_id=queue,
                                           v2=kind != "send_v1"),
                            f"body-{opaque}".encode(), opaque=opaque,
                            oneway=kind == "send_oneway")
    if kind == "pull":
        return make_request(RC.PULL_MESSAGE, pull_ext("mix", queue, 0), opaque=opaque)
    if kind == "oneway":
        return make_request(RC.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "cg", "topic": "mix", "queueId": queue, "commitOffset": 0},
            oneway=True, opaque=opaque)
    return make_request(9999, {}, opaque=opaque)


async def _check(bookie_dir: Path, requests: list[tuple[str, int]], cuts: list[int]) -> None:
    store = await open_store("memory:")
    try:
        async with durable_stack(store, bookie_dir, fsync=False, timeout_s=30) as stack:
            await stack.topics.create_topic("mix", QUEUES)
            client = await RawClient.connect(stack.broker_addr)
            for queue in range(QUEUES - 1):  # their logs open: sends answered at completion
                r = await client.call(RC.SEND_MESSAGE_V2, send_ext("mix", {}, queue_id=queue),
                                      b"warm")
                assert r.code == ResponseCode.SUCCESS, r.remark
            commands = [_request(kind, queue, 100 + i)
                        for i, (kind, queue) in enumerate(requests)]
            data = b"".join(encode_command(c) for c in commands)
            start = 0
            for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
                if cut > start:
                    await client.stream.send_all(data[start:cut])
                    await trio.lowlevel.checkpoint()
                    start = cut
            expected = {c.opaque: c for c in commands if not c.is_oneway}
            marker = make_request(9999, {}, opaque=99)  # sent once all others are answered
            answers: dict[int, RemotingCommand] = {}
            if not expected:  # only oneway requests: nothing to wait for before the marker
                await client.stream.send_all(encode_command(marker))
            with trio.fail_after(60):
                while True:
                    answer = await client.receive(wait_s=60)
                    assert answer is not None and answer.is_response, answer
                    if answer.opaque == 99:
                        break
                    assert answer.opaque in expected, f"an answer to no request: {answer}"
                    assert answer.opaque not in answers, f"answered twice: {answer.opaque}"
                    answers[answer.opaque] = answer
                    if len(answers) == len(expected):
                        await client.stream.send_all(encode_command(marker))
            assert answers.keys() == expected.keys()
            sends = sum(kind.startswith("send") for kind, _ in requests)
            stored: dict[tuple[int, int], bytes | None] = {}
            with trio.move_on_after(30):  # oneway sends are stored with nobody told when
                while len(stored) < sends + QUEUES - 1:
                    await trio.sleep(0.01)
                    stored = {}
                    for queue in range(QUEUES):
                        plog = await stack.topics.partition("mix", queue)
                        for batch in await plog.read(0, 1 << 22):
                            for record in decode_records(batch):
                                stored[(queue, record.offset)] = record.value
            for opaque, answer in answers.items():
                request = expected[opaque]
                if request.code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2):
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    queue = int(answer.ext_fields["queueId"])
                    offset = int(answer.ext_fields["queueOffset"])
                    assert stored.get((queue, offset)) == f"body-{opaque}".encode()
                elif request.code == RC.PULL_MESSAGE:
                    assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                           ResponseCode.PULL_OFFSET_MOVED), answer.remark
                else:
                    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert len(stored) == sends + QUEUES - 1  # nothing stored twice, oneway ones too
            oneway_bodies = {f"body-{c.opaque}".encode() for c in commands
                             if c.is_oneway and c.code == RC.SEND_MESSAGE_V2}
            assert oneway_bodies <= set(stored.values())
            await client.aclose()
    finally:
        await store.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(requests=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, QUEUES - 1)),
                         min_size=1, max_size=40),
       cuts=st.lists(st.integers(0, 1 << 16), max_size=6))
def test_every_request_is_answered_once_and_every_send_stored_where_answered(
        tmp_path_factory: pytest.TempPathFactory, requests: list[tuple[str, int]],
        cuts: list[int]) -> None:
    trio.run(_check, tmp_path_factory.mktemp("bookie"), requests, cuts)
