"""Kafka wire error codes and the one exception root of the Kafka protocol layer.

`ErrorCode` is the complete table of error codes a Kafka broker may put on the wire (numbers and
names as in Apache Kafka's `Errors` enum, up to Kafka 4.x).  `KafkaProtocolError` is the single
root of exceptions that *become an error code in a response*: each subclass carries its wire code
in `code`, and the handler layer turns exceptions into responses in one place.

`MalformedRequestError` is different on purpose: it means the bytes could not be decoded at all,
and the only safe reaction is to close that one connection.  `FrameTooLargeError` is the
malformed-input case where a size prefix exceeds the configured maximum.

This module must never import the codec, Trio, or anything from gateway/: it is plain data.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar


class ErrorCode(enum.IntEnum):
    """Every Kafka protocol error code (Apache Kafka `Errors`), by wire number."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    # Aliases under the names older clients and docs use (same wire numbers).
    INVALID_TOPIC = 17
    NOT_LEADER_FOR_PARTITION = 6
    MESSAGE_SIZE_TOO_LARGE = 10

    @property
    def retriable(self) -> bool:
        """True for codes a Kafka client retries by itself (Kafka's RetriableException set)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class KafkaProtocolError(Exception):
    """Root of every error that is answered with a Kafka error code (never closes the connection).

    `code` is the wire code; subclasses fix it as a class attribute.  A caller that needs a code
    with no dedicated subclass raises `KafkaProtocolError(msg, code=ErrorCode.X)`.
    """

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str | None = None, *, code: ErrorCode | int | None = None) -> None:
        if code is not None:
            self.code = ErrorCode(code)
        super().__init__(message if message is not None else self.code.name)
        self.message = message


class MalformedRequestError(Exception):
    """The bytes of a request could not be decoded; the connection must be closed."""


class FrameTooLargeError(MalformedRequestError):
    """A frame's size prefix is larger than allowed (refused before any buffering)."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_size} bytes")
        self.size = size
        self.max_size = max_size


# --- one subclass per commonly raised code -------------------------------------------------------

_BY_CODE: dict[ErrorCode, type[KafkaProtocolError]] = {}
_E = TypeVar("_E", bound=type[KafkaProtocolError])


def _register(cls: _E) -> _E:
    _BY_CODE[cls.code] = cls
    return cls


@_register
class UnsupportedVersionError(KafkaProtocolError):
    """The (api key, version) pair is not in the schema table (UNSUPPORTED_VERSION, 35).

    Raised by the codec with as much of the request header as could be read, so the caller can
    still answer: `header` is a `codec.RequestHeader` (api key, version, correlation id, client id)
    or None when even those could not be read.  For ApiVersions the broker answers with a v0
    response carrying UNSUPPORTED_VERSION and its supported range.
    """

    code = ErrorCode.UNSUPPORTED_VERSION

    def __init__(self, message: str | None = None, *, header: Any = None) -> None:
        super().__init__(message)
        self.header = header


@_register
class UnknownServerError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


@_register
class OffsetOutOfRangeError(KafkaProtocolError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


@_register
class CorruptMessageError(KafkaProtocolError):
    code = ErrorCode.CORRUPT_MESSAGE


@_register
class UnknownTopicOrPartitionError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@_register
class InvalidFetchSizeError(KafkaProtocolError):
    code = ErrorCode.INVALID_FETCH_SIZE


@_register
class LeaderNotAvailableError(KafkaProtocolError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


@_register
class NotLeaderOrFollowerError(KafkaProtocolError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


@_register
class RequestTimedOutError(KafkaProtocolError):
    code = ErrorCode.REQUEST_TIMED_OUT


@_register
class BrokerNotAvailableError(KafkaProtocolError):
    code = ErrorCode.BROKER_NOT_AVAILABLE


@_register
class MessageTooLargeError(KafkaProtocolError):
    code = ErrorCode.MESSAGE_TOO_LARGE


@_register
class OffsetMetadataTooLargeError(KafkaProtocolError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE


@_register
class CoordinatorLoadInProgressError(KafkaProtocolError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


@_register
class CoordinatorNotAvailableError(KafkaProtocolError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


@_register
class NotCoordinatorError(KafkaProtocolError):
    code = ErrorCode.NOT_COORDINATOR


@_register
class InvalidTopicError(KafkaProtocolError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


@_register
class RecordListTooLargeError(KafkaProtocolError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE


@_register
class NotEnoughReplicasError(KafkaProtocolError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


@_register
class NotEnoughReplicasAfterAppendError(KafkaProtocolError):
    """The batch may be stored but is not acknowledged (a retry with the same producer
    sequence is answered from the producer state, not stored again)."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


@_register
class InvalidRequiredAcksError(KafkaProtocolError):
    code = ErrorCode.INVALID_REQUIRED_ACKS


@_register
class IllegalGenerationError(KafkaProtocolError):
    code = ErrorCode.ILLEGAL_GENERATION


@_register
class InconsistentGroupProtocolError(KafkaProtocolError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@_register
class InvalidGroupIdError(KafkaProtocolError):
    code = ErrorCode.INVALID_GROUP_ID


@_register
class UnknownMemberIdError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


@_register
class InvalidSessionTimeoutError(KafkaProtocolError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT


@_register
class RebalanceInProgressError(KafkaProtocolError):
    code = ErrorCode.REBALANCE_IN_PROGRESS


@_register
class InvalidCommitOffsetSizeError(KafkaProtocolError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE


@_register
class TopicAuthorizationFailedError(KafkaProtocolError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


@_register
class GroupAuthorizationFailedError(KafkaProtocolError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


@_register
class ClusterAuthorizationFailedError(KafkaProtocolError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@_register
class TransactionalIdAuthorizationFailedError(KafkaProtocolError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@_register
class InvalidTimestampError(KafkaProtocolError):
    code = ErrorCode.INVALID_TIMESTAMP


@_register
class UnsupportedSaslMechanismError(KafkaProtocolError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


@_register
class IllegalSaslStateError(KafkaProtocolError):
    code = ErrorCode.ILLEGAL_SASL_STATE


@_register
class TopicAlreadyExistsError(KafkaProtocolError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


@_register
class InvalidPartitionsError(KafkaProtocolError):
    code = ErrorCode.INVALID_PARTITIONS


@_register
class InvalidReplicationFactorError(KafkaProtocolError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


@_register
class InvalidReplicaAssignmentError(KafkaProtocolError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


@_register
class InvalidConfigError(KafkaProtocolError):
    code = ErrorCode.INVALID_CONFIG


@_register
class NotControllerError(KafkaProtocolError):
    code = ErrorCode.NOT_CONTROLLER


@_register
class InvalidRequestError(KafkaProtocolError):
    code = ErrorCode.INVALID_REQUEST


@_register
class PolicyViolationError(KafkaProtocolError):
    code = ErrorCode.POLICY_VIOLATION


@_register
class OutOfOrderSequenceError(KafkaProtocolError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@_register
class DuplicateSequenceError(KafkaProtocolError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


@_register
class InvalidProducerEpochError(KafkaProtocolError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


@_register
class InvalidTxnStateError(KafkaProtocolError):
    code = ErrorCode.INVALID_TXN_STATE


@_register
class InvalidProducerIdMappingError(KafkaProtocolError):
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


@_register
class InvalidTransactionTimeoutError(KafkaProtocolError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


@_register
class ConcurrentTransactionsError(KafkaProtocolError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS


@_register
class TransactionCoordinatorFencedError(KafkaProtocolError):
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


@_register
class SecurityDisabledError(KafkaProtocolError):
    code = ErrorCode.SECURITY_DISABLED


@_register
class KafkaStorageError(KafkaProtocolError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


@_register
class SaslAuthenticationFailedError(KafkaProtocolError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED


@_register
class UnknownProducerIdError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


@_register
class NonEmptyGroupError(KafkaProtocolError):
    code = ErrorCode.NON_EMPTY_GROUP


@_register
class GroupIdNotFoundError(KafkaProtocolError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


@_register
class FetchSessionIdNotFoundError(KafkaProtocolError):
    code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND


@_register
class InvalidFetchSessionEpochError(KafkaProtocolError):
    code = ErrorCode.INVALID_FETCH_SESSION_EPOCH


@_register
class TopicDeletionDisabledError(KafkaProtocolError):
    code = ErrorCode.TOPIC_DELETION_DISABLED


@_register
class FencedLeaderEpochError(KafkaProtocolError):
    code = ErrorCode.FENCED_LEADER_EPOCH


@_register
class UnknownLeaderEpochError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


@_register
class UnsupportedCompressionTypeError(KafkaProtocolError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@_register
class OffsetNotAvailableError(KafkaProtocolError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE


@_register
class MemberIdRequiredError(KafkaProtocolError):
    code = ErrorCode.MEMBER_ID_REQUIRED


@_register
class GroupMaxSizeReachedError(KafkaProtocolError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


@_register
class FencedInstanceIdError(KafkaProtocolError):
    code = ErrorCode.FENCED_INSTANCE_ID


@_register
class GroupSubscribedToTopicError(KafkaProtocolError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC


@_register
class InvalidRecordError(KafkaProtocolError):
    code = ErrorCode.INVALID_RECORD

    # KIP-467: (batch index, message) of each refused record; the others of the batch fail
    # with the partition's code (this one) and no message of their own, as in Kafka.
    record_errors: tuple[tuple[int, str], ...] = ()


@_register
class UnstableOffsetCommitError(KafkaProtocolError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT


@_register
class ThrottlingQuotaExceededError(KafkaProtocolError):
    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED


@_register
class ProducerFencedError(KafkaProtocolError):
    code = ErrorCode.PRODUCER_FENCED


@_register
class ResourceNotFoundError(KafkaProtocolError):
    code = ErrorCode.RESOURCE_NOT_FOUND


@_register
class DuplicateResourceError(KafkaProtocolError):
    code = ErrorCode.DUPLICATE_RESOURCE


@_register
class UnknownTopicIdError(KafkaProtocolError):
    code = ErrorCode.UNKNOWN_TOPIC_ID


@_register
class InconsistentTopicIdError(KafkaProtocolError):
    code = ErrorCode.INCONSISTENT_TOPIC_ID


@_register
class TransactionalIdNotFoundError(KafkaProtocolError):
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


@_register
class FencedMemberEpochError(KafkaProtocolError):
    code = ErrorCode.FENCED_MEMBER_EPOCH


@_register
class UnreleasedInstanceIdError(KafkaProtocolError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID


@_register
class UnsupportedAssignorError(KafkaProtocolError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR


@_register
class StaleMemberEpochError(KafkaProtocolError):
    code = ErrorCode.STALE_MEMBER_EPOCH


@_register
class TransactionAbortableError(KafkaProtocolError):
    code = ErrorCode.TRANSACTION_ABORTABLE


@_register
class InvalidRegularExpressionError(KafkaProtocolError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION


def error_class_for(code: ErrorCode | int) -> type[KafkaProtocolError]:
    """The dedicated subclass for `code`, or `KafkaProtocolError` itself when there is none."""
    return _BY_CODE.get(ErrorCode(code), KafkaProtocolError)


def error_for(code: ErrorCode | int, message: str | None = None) -> KafkaProtocolError:
    """An exception instance carrying `code` (dedicated subclass when one exists)."""
    cls = error_class_for(code)
    if cls is KafkaProtocolError:
        return KafkaProtocolError(message, code=code)
    return cls(message)
