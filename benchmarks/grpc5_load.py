"""A raw gRPC load for the RocketMQ 5 endpoint: many calls in flight, so the broker is the bound.

    .venv/bin/python benchmarks/grpc5_load.py send --endpoint H:P --topic T [--count N]
    .venv/bin/python benchmarks/grpc5_load.py receive --endpoint H:P --topic T --group G

The real Python client sends one message per round trip and spends milliseconds of its own per
call, so it cannot show what the broker costs per message.  This driver (grpcio's asyncio
client and the generated message classes) keeps `--inflight` SendMessage calls open at once
(one 1 KB message each, as a client's sync send), or receives batches of 32 and acknowledges
each batch in one AckMessage, and prints one JSON line: msg/s and p50/p99 latency.
It is a benchmark helper, never a test of semantics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import grpc  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocols.rocketmq.grpc.v2 import definition_pb2 as pb  # noqa: E402
from protocols.rocketmq.grpc.v2 import service_pb2 as spb  # noqa: E402

PREFIX = "/apache.rocketmq.v2.MessagingService/"
BODY = os.urandom(1024)


def _unary(channel: grpc.aio.Channel, name: str,
           response: type) -> grpc.aio.UnaryUnaryMultiCallable:
    return channel.unary_unary(PREFIX + name, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response.FromString)


def _message(topic: str) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=BODY)
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.tag = "bench"
    m.system_properties.message_type = pb.NORMAL
    m.system_properties.body_encoding = pb.IDENTITY
    m.system_properties.born_host = "127.0.0.1"
    m.system_properties.born_timestamp.GetCurrentTime()
    return m


async def send(args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(args.endpoint) as channel:
        route = _unary(channel, "QueryRoute", spb.QueryRouteResponse)
        await route(spb.QueryRouteRequest(topic=pb.Resource(name=args.topic)))
        call = _unary(channel, "SendMessage", spb.SendMessageResponse)
        metadata = (("x-mq-client-id", "grpc5-load"),)
        latencies: list[float] = []
        left = args.count

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = time.perf_counter()
                answer = await call(spb.SendMessageRequest(messages=[_message(args.topic)]),
                                    metadata=metadata)
                if answer.status.code != pb.OK:
                    raise SystemExit(f"send failed: {answer.status}")
                latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.inflight)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    print(json.dumps({"rate": args.count / elapsed, "p50_ms": latencies[len(latencies) // 2] * 1e3,
                      "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3}), flush=True)


async def receive(args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(args.endpoint) as channel:
        receive_call = channel.unary_stream(
            PREFIX + "ReceiveMessage", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=spb.ReceiveMessageResponse.FromString)
        ack = _unary(channel, "AckMessage", spb.AckMessageResponse)
        metadata = (("x-mq-client-id", "grpc5-load"),)
        got = 0
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal got
            request = spb.ReceiveMessageRequest(
                group=pb.Resource(name=args.group),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=args.topic), id=-1),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=32, auto_renew=False)
            request.invisible_duration.FromSeconds(30)
            request.long_polling_timeout.FromSeconds(2)
            while got < args.count and time.perf_counter() - start < args.max_seconds:
                entries = []
                async for answer in receive_call(request, metadata=metadata):
                    if answer.WhichOneof("content") == "message":
                        m = answer.message
                        entries.append(spb.AckMessageEntry(
                            message_id=m.system_properties.message_id,
                            receipt_handle=m.system_properties.receipt_handle))
                if entries:
                    done = await ack(spb.AckMessageRequest(
                        group=pb.Resource(name=args.group), topic=pb.Resource(name=args.topic),
                        entries=entries), metadata=metadata)
                    if done.status.code != pb.OK:
                        raise SystemExit(f"ack failed: {done.status}")
                    got += len(entries)

        await asyncio.gather(*(worker() for _ in range(args.inflight)))
        elapsed = time.perf_counter() - start
    print(json.dumps({"rate": got / elapsed, "received": got}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["send", "receive"])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="bench5raw")
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--inflight", type=int, default=32)
    p.add_argument("--max-seconds", type=float, default=300.0)
    args = p.parse_args()
    asyncio.run(send(args) if args.command == "send" else receive(args))


if __name__ == "__main__":
    main()
