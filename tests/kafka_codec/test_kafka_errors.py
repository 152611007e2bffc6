"""The error-code table and the exception hierarchy."""

from __future__ import annotations

import pytest

from protocols.kafka import errors
from protocols.kafka.errors import ErrorCode, KafkaProtocolError, error_class_for, error_for


def test_codes_are_unique_and_contiguous() -> None:
    canonical = {member.value: name for name, member in ErrorCode.__members__.items()
                 if member.name == name}  # fmt: skip
    assert sorted(canonical) == list(range(-1, 134))
    assert ErrorCode.NONE == 0
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.INVALID_TOPIC is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert ErrorCode(17).name == "INVALID_TOPIC_EXCEPTION"


def test_known_codes_against_kafka_python() -> None:
    kafka_errors = pytest.importorskip("kafka.errors")
    for value in vars(kafka_errors).values():
        errno = getattr(value, "errno", None)
        if isinstance(value, type) and isinstance(errno, int):
            ErrorCode(errno)  # every code kafka-python knows exists here


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.CorruptMessageError, 2),
        (errors.UnknownTopicOrPartitionError, 3),
        (errors.NotLeaderOrFollowerError, 6),
        (errors.MessageTooLargeError, 10),
        (errors.OutOfOrderSequenceError, 45),
        (errors.DuplicateSequenceError, 46),
        (errors.InvalidProducerEpochError, 47),
        (errors.UnsupportedVersionError, 35),
        (errors.InvalidRequestError, 42),
        (errors.TopicAlreadyExistsError, 36),
        (errors.InvalidPartitionsError, 37),
        (errors.InvalidReplicationFactorError, 38),
        (errors.InvalidTopicError, 17),
        (errors.UnsupportedCompressionTypeError, 76),
    ],
)
def test_subclasses_carry_their_wire_code(cls: type[KafkaProtocolError], code: int) -> None:
    assert issubclass(cls, KafkaProtocolError)
    assert cls.code == code
    assert cls("boom").code == code
    assert error_class_for(code) is cls


def test_error_for_any_code() -> None:
    err = error_for(ErrorCode.SECURITY_DISABLED)
    assert isinstance(err, KafkaProtocolError) and err.code == ErrorCode.SECURITY_DISABLED
    err = error_for(ErrorCode.INVALID_VOTER_KEY, "x")  # no dedicated subclass
    assert type(err) is KafkaProtocolError and err.code == 125 and str(err) == "x"


def test_malformed_is_not_a_protocol_error() -> None:
    assert not issubclass(errors.MalformedRequestError, KafkaProtocolError)
