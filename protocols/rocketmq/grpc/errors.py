"""How a RocketMQ 5 call fails: a `Status` with a `Code` inside an ordinary response.

RocketMQ 5 answers most failures with gRPC status OK and a response whose `status.code` says
what went wrong (the clients retry on TOO_MANY_REQUESTS, INTERNAL_SERVER_ERROR and timeouts,
and give up on BAD_REQUEST, FORBIDDEN, NOT_FOUND and friends).  `RpcFailure` carries that code
to the one place that builds responses; `code_of` maps the 4.x front's exceptions (shared
send, transaction and offset paths) to the same codes.

This module never does I/O.
"""

from __future__ import annotations

from protocols.kafka.errors import KafkaProtocolError
from protocols.rocketmq.errors import ResponseCode, RocketMQError
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_FROM_REMOTING = {
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.TOO_MANY_REQUESTS,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
}


def failure_of(exc: BaseException) -> RpcFailure:
    """The RocketMQ 5 code for an exception raised by a shared broker path."""
    if isinstance(exc, RpcFailure):
        return exc
    if isinstance(exc, RocketMQError):
        code = _FROM_REMOTING.get(exc.code, pb.INTERNAL_SERVER_ERROR)  # type: ignore[call-overload]
        return RpcFailure(code, str(exc))
    if isinstance(exc, KafkaProtocolError):
        # Storage and ownership faults: the client retries these.
        return RpcFailure(pb.INTERNAL_SERVER_ERROR, str(exc))
    raise exc
