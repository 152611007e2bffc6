"""The broker's request table: request code -> handler, and the one place errors become
RocketMQ error responses.

A `RocketMQError` is answered with its response code and message; a header field that cannot
be parsed is a SYSTEM_ERROR answer, like Java's; an unknown code REQUEST_CODE_NOT_SUPPORTED;
an expected storage fault (ledger_backend/faults.py), or a handler's StorageError raised from one,
SERVICE_NOT_AVAILABLE, which clients retry.
Anything else propagates (the listener logs it and answers SYSTEM_ERROR).  Oneway requests are
run but never answered.

This module must never do I/O beyond what the handlers do through the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ledger_backend.faults import StorageFault, storage_fault_of, warn_fault
from protocols.rocketmq.access import RocketMQGuard
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import ResponseCode, RocketMQError
from protocols.rocketmq.handlers import (
    admin,
    admin_stats,
    clients,
    messages,
    offsets,
    pull,
    reset_offset,
    send,
    subscription_groups,
    transactions,
)
from protocols.rocketmq.handlers.common import StorageError
from protocols.rocketmq.request_codes import RequestCode

log = logging.getLogger("ledgerwire.rocketmq.acl")
fault_log = logging.getLogger("ledgerwire.rocketmq.faults")

Handler = Callable[[BrokerLike, ConnectionLike, RemotingCommand], Awaitable[RemotingCommand]]

BROKER_HANDLERS: dict[int, Handler] = {
    RequestCode.SEND_MESSAGE: send.handle_send,
    RequestCode.SEND_MESSAGE_V2: send.handle_send,
    RequestCode.SEND_BATCH_MESSAGE: send.handle_send,
    RequestCode.PULL_MESSAGE: pull.handle_pull,
    RequestCode.QUERY_CONSUMER_OFFSET: offsets.handle_query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: offsets.handle_update_consumer_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offsets.handle_search_offset_by_timestamp,
    RequestCode.GET_MAX_OFFSET: offsets.handle_get_max_offset,
    RequestCode.GET_MIN_OFFSET: offsets.handle_get_min_offset,
    RequestCode.GET_EARLIEST_MSG_STORETIME: offsets.handle_get_earliest_msg_storetime,
    RequestCode.HEART_BEAT: admin_stats.handle_heartbeat_recording_client,
    RequestCode.UNREGISTER_CLIENT: clients.handle_unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: clients.handle_get_consumer_list,
    RequestCode.LOCK_BATCH_MQ: clients.handle_lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: clients.handle_unlock_batch,
    RequestCode.CHECK_CLIENT_CONFIG: clients.handle_check_client_config,
    RequestCode.UPDATE_AND_CREATE_TOPIC: admin.handle_update_and_create_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: admin.handle_get_all_topic_config,
    RequestCode.DELETE_TOPIC_IN_BROKER: admin.handle_delete_topic,
    RequestCode.GET_BROKER_RUNTIME_INFO: admin_stats.handle_get_broker_runtime_info,
    RequestCode.VIEW_MESSAGE_BY_ID: messages.handle_view_message_by_id,
    RequestCode.QUERY_MESSAGE: messages.handle_query_message,
    RequestCode.CONSUMER_SEND_MSG_BACK: messages.handle_consumer_send_msg_back,
    RequestCode.END_TRANSACTION: transactions.handle_end_transaction,
    # mqadmin / console statistics and administration
    RequestCode.GET_TOPIC_STATS_INFO: admin_stats.handle_get_topic_stats_info,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: admin_stats.handle_get_consumer_connection_list,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: admin_stats.handle_get_producer_connection_list,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: admin_stats.handle_query_topic_consume_by_who,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER:
        admin_stats.handle_get_system_topic_list_from_broker,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        subscription_groups.handle_update_and_create_subscription_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
        subscription_groups.handle_get_all_subscription_group_config,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: subscription_groups.handle_delete_subscription_group,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_offset.handle_invoke_broker_to_reset_offset,
}


ListingHandler = Callable[[BrokerLike, ConnectionLike, RemotingCommand, Callable[[str], bool]],
                         Awaitable[RemotingCommand]]

# Handlers that list topics the request does not name: they leave out the topics the
# requester may not see (`RocketMQGuard.visible_topics`; everything without one).
LISTING_HANDLERS: dict[int, ListingHandler] = {
    RequestCode.GET_CONSUME_STATS: admin_stats.handle_get_consume_stats,
}


def _everything(topic: str) -> bool:
    return True


class RequestGuard(Protocol):
    """access.RocketMQGuard (one principal, the Kafka ACLs) or acl.PlainAclValidator."""

    def check(self, conn: Any, request: RemotingCommand, broker: Any = None) -> object: ...


async def dispatch(broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand,
                   acl: RequestGuard | None = None) -> RemotingCommand:
    """Answer one request; with `acl`, a request it refuses is answered NO_PERMISSION before
    any handler runs (protocols/rocketmq/access.py, acl.py)."""
    visible: Callable[[str], bool] = _everything
    if acl is not None:
        try:
            checked = acl.check(conn, request, broker)
        except RocketMQError as exc:
            log.info("request refused by the ACL", extra={
                "code": request.code, "client": f"{conn.peer[0]}:{conn.peer[1]}",
                "reason": str(exc)})
            return make_response(request, exc.code, str(exc))
        if isinstance(acl, RocketMQGuard) and isinstance(checked, str):
            visible = acl.visible_topics(conn, checked, broker)
    listing = LISTING_HANDLERS.get(request.code)
    handler = BROKER_HANDLERS.get(request.code)
    if handler is None and listing is None:
        return make_response(request, 3, f"request type {request.code} not supported")
    try:
        if listing is not None:
            return await listing(broker, conn, request, visible)
        assert handler is not None
        return await handler(broker, conn, request)
    except Exception as exc:
        answer = error_response(request, exc)
        if answer is None:
            raise
        return answer


def start_request(broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand,
                  acl: RequestGuard | None,
                  respond: Callable[[RemotingCommand | BaseException], None]) -> bool:
    """Start answering a request without a waiting task where its handler can (a plain send:
    handlers/send.py start_send): `respond` gets what dispatch() would return, or the
    unexpected exception dispatch() would raise, in the Trio thread.  False: nothing was
    started; answer it with dispatch()."""
    if request.code not in _STARTS_AT_ONCE:
        return False
    if acl is not None:
        try:
            acl.check(conn, request, broker)
        except RocketMQError:
            return False  # dispatch() refuses it, with its log line

    def answered(result: RemotingCommand | BaseException) -> None:
        if isinstance(result, Exception):
            respond(error_response(request, result) or result)
        else:
            respond(result)

    return send.start_send(broker, conn, request, answered)


_STARTS_AT_ONCE = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2})


def error_response(request: RemotingCommand, exc: Exception) -> RemotingCommand | None:
    """The answer to a request whose handler raised `exc`; None for an unexpected error."""
    fault = storage_fault_of(exc)
    if isinstance(exc, RocketMQError) and (fault is None or not isinstance(exc, StorageError)):
        return make_response(request, exc.code, str(exc))
    if fault is None:
        return None
    # (also a handler's StorageError raised from such a fault: the handler names what failed)
    # A bookie or the metadata store is out of reach, or the queue just changed owner:
    # SERVICE_NOT_AVAILABLE, which producers retry (on another queue) and consumers
    # re-pull after their back-off; one rate-limited line, no traceback.
    # A missing or corrupt offloaded object: SYSTEM_ERROR naming it (retrying will not
    # help until it is restored; consumers still re-pull after their back-off).
    damaged = fault is StorageFault.DAMAGED
    code = ResponseCode.SYSTEM_ERROR if damaged else ResponseCode.SERVICE_NOT_AVAILABLE
    warn_fault(fault_log, f"{type(exc).__name__}:{request.code}",
               "storage fault answered %s to request %d: %r",
               code.name, request.code, exc)  # fmt: skip
    what = "stored data is damaged" if damaged else "storage unavailable, retry"
    cause: BaseException = exc
    while damaged and cause.__cause__ is not None and \
            storage_fault_of(cause.__cause__) is StorageFault.DAMAGED:
        cause = cause.__cause__  # down to the error that names the object
    return make_response(request, code, f"{what}: {type(cause).__name__}: {cause}")
