"""Running the real RocketMQ 5 Python client (client5.py, in .venv-rocketmq5) against a
standalone's gRPC endpoint, and reading its JSON lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
SCRIPT = Path(__file__).with_name("client5.py")


def run5(command: str, endpoint: str, topic: str, *args: str,
         timeout_s: float = 90.0) -> list[dict[str, Any]]:
    """Run one client5.py scenario; its JSON lines (fails the test on a non-zero exit)."""
    done = subprocess.run([str(PYTHON), str(SCRIPT), command, "--endpoint", endpoint,
                           "--topic", topic, *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd="/tmp")
    assert done.returncode == 0, f"client5 {command} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def received(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "body" in line]


def run5_refused(command: str, endpoint: str, topic: str, *args: str,
                 timeout_s: float = 90.0) -> str:
    """Run a scenario that must fail; the client's output (for the reason)."""
    done = subprocess.run([str(PYTHON), str(SCRIPT), command, "--endpoint", endpoint,
                           "--topic", topic, *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd="/tmp")
    assert done.returncode != 0, f"client5 {command} was not refused:\n{done.stdout}"
    return done.stdout + done.stderr


PREFIX = "/apache.rocketmq.v2.MessagingService/"


class RawClient:
    """Raw MessagingService calls (grpcio and the generated classes): what the real clients do
    not let a test choose, such as several receipt handles in one AckMessage."""

    def __init__(self, endpoint: str) -> None:
        import grpc

        self.channel = grpc.insecure_channel(endpoint)
        self.metadata = (("x-mq-client-id", "raw-test-client"),)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unary(self, name: str, request: Any, response: Any) -> Any:
        call = self.channel.unary_unary(PREFIX + name,
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response.FromString)
        return call(request, metadata=self.metadata, timeout=30)

    def route(self, topic: str) -> Any:
        """QueryRoute (creates the topic, as a producer's start does)."""
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        return self.unary("QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                          spb.QueryRouteResponse)

    def send(self, topic: str, body: bytes, message_id: str, **properties: str) -> Any:
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        message = pb.Message(topic=pb.Resource(name=topic), body=body,
                             user_properties=properties,
                             system_properties=pb.SystemProperties(
                                 message_id=message_id, message_type=pb.NORMAL))
        return self.unary("SendMessage", spb.SendMessageRequest(messages=[message]),
                          spb.SendMessageResponse)

    def receive(self, topic: str, group: str, batch: int = 32, invisible_s: int = 30,
                poll_s: int = 2, expression: str = "*", sql: bool = False) -> tuple[int, list]:
        """(status code of the first answer, the messages received)."""
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.SQL if sql else pb.TAG,
                                                  expression=expression),
            batch_size=batch, auto_renew=False)
        request.invisible_duration.FromSeconds(invisible_s)
        request.long_polling_timeout.FromSeconds(poll_s)
        call = self.channel.unary_stream(PREFIX + "ReceiveMessage",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=spb.ReceiveMessageResponse.FromString)
        code, messages = -1, []
        for answer in call(request, metadata=self.metadata, timeout=poll_s + 30):
            kind = answer.WhichOneof("content")
            if kind == "status" and code == -1:
                code = int(answer.status.code)
            elif kind == "message":
                messages.append(answer.message)
        return code, messages

    def ack(self, topic: str, group: str, handles: list[tuple[str, str]]) -> Any:
        """AckMessage with (message id, receipt handle) entries."""
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        return self.unary("AckMessage", spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id=m, receipt_handle=h) for m, h in handles]),
            spb.AckMessageResponse)

    def change_invisible(self, topic: str, group: str, message_id: str, handle: str,
                         invisible_s: float) -> Any:
        """ChangeInvisibleDuration of one received message."""
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        request = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            receipt_handle=handle, message_id=message_id)
        request.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
        return self.unary("ChangeInvisibleDuration", request,
                          spb.ChangeInvisibleDurationResponse)

    def pull(self, topic: str, group: str, offset: int, batch: int = 32, poll_s: float = 0,
             sql: str = "") -> tuple[int, list, int]:
        """PullMessage on queue 0: (status code, messages, next offset)."""
        from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
        from protocols.rocketmq.grpc.v2 import service_pb2 as spb

        request = spb.PullMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
            offset=offset, batch_size=batch,
            filter_expression=pb.FilterExpression(type=pb.SQL if sql else pb.TAG,
                                                  expression=sql or "*"))
        request.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
        call = self.channel.unary_stream(PREFIX + "PullMessage",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=spb.PullMessageResponse.FromString)
        code, messages, next_offset = -1, [], -1
        for answer in call(request, metadata=self.metadata, timeout=poll_s + 30):
            kind = answer.WhichOneof("content")
            if kind == "status":
                code = int(answer.status.code)
            elif kind == "message":
                messages.append(answer.message)
            elif kind == "next_offset":
                next_offset = answer.next_offset
        return code, messages, next_offset
