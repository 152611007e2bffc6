"""ListTransactions (66) and DescribeTransactions (65): what `kafka-transactions.sh list` and
`describe` (AdminClient.listTransactions / describeTransactions) show.

ListTransactions answers the transactions this broker coordinates (the admin client asks every
broker and merges), filtered as Kafka's coordinator does: by state names (names it does not
know come back in `unknown_state_filters`), by producer ids, and (v1) by duration — only
transactions whose current transaction started more than `duration_filter` ms ago.  Dead ids
are never listed, and only those the caller may DESCRIBE (TRANSACTIONAL_ID) appear.
DescribeTransactions answers each id from its coordinator: state, producer id and epoch,
timeout, start time and partitions; TRANSACTIONAL_ID_NOT_FOUND for an id it does not know,
NOT_COORDINATOR when another broker coordinates it, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
without DESCRIBE on it.

The coordinator (protocols.kafka.transaction_coordinator, or the cluster's per-partition one)
provides `list_transactions()` and `describe(id)`.  This module must never change a
transaction: it only reads the coordinator's table.
"""

from __future__ import annotations

import time
from typing import Any

from protocols.kafka.acl_model import OP_DESCRIBE, RES_TRANSACTIONAL_ID
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    TransactionalIdNotFoundError,
)
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.transaction_coordinator import TransactionMetadata, TxnState

DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
_STATE_NAMES = {state.value: state for state in TxnState}


def _coordinator(ctx: RequestContext) -> Any:
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        raise CoordinatorNotAvailableError("this broker coordinates no transactions")
    return coordinator


def _listed(txn: TransactionMetadata, states: set[TxnState], producer_ids: set[int],
            duration_ms: int, now_ms: int) -> bool:
    if txn.state is TxnState.DEAD:
        return False
    if states and txn.state not in states:
        return False
    if producer_ids and txn.producer_id not in producer_ids:
        return False
    return not (duration_ms >= 0 and now_ms - txn.txn_start_ms <= duration_ms)


async def handle_list_transactions(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0,
                              "unknown_state_filters": [], "transaction_states": []}
    states: set[TxnState] = set()
    for name in body.get("state_filters") or []:
        if name in _STATE_NAMES:
            states.add(_STATE_NAMES[name])
        else:
            answer["unknown_state_filters"].append(name)
    producer_ids = {int(p) for p in body.get("producer_id_filters") or []}
    duration_ms = int(body.get("duration_filter", -1))
    try:
        listed = list(_coordinator(ctx).list_transactions())
    except Exception as exc:  # noqa: BLE001 - the whole answer carries the code
        answer["error_code"] = int(error_code_of(exc))
        return answer
    now_ms = int(time.time() * 1000)
    answer["transaction_states"] = [
        {"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
         "transaction_state": txn.state.value}
        for txn in sorted(listed, key=lambda t: t.transactional_id)
        if _listed(txn, states, producer_ids, duration_ms, now_ms)
        and ctx.authorize(OP_DESCRIBE, RES_TRANSACTIONAL_ID, txn.transactional_id)
    ]
    return answer


def _described(ctx: RequestContext, transactional_id: str) -> dict:
    out: dict[str, Any] = {"error_code": 0, "transactional_id": transactional_id,
                           "transaction_state": "", "transaction_timeout_ms": 0,
                           "transaction_start_time_ms": -1, "producer_id": -1,
                           "producer_epoch": -1, "topics": []}
    if not ctx.authorize(OP_DESCRIBE, RES_TRANSACTIONAL_ID, transactional_id):
        out["error_code"] = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return out
    try:
        txn = _coordinator(ctx).describe(transactional_id)
        if txn is None or txn.state is TxnState.DEAD:
            raise TransactionalIdNotFoundError(f"unknown transactional id {transactional_id!r}")
    except Exception as exc:  # noqa: BLE001 - this id's error code
        out["error_code"] = int(error_code_of(exc))
        return out
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out.update(
        transaction_state=txn.state.value, transaction_timeout_ms=txn.timeout_ms,
        transaction_start_time_ms=txn.txn_start_ms if txn.state is not TxnState.EMPTY else -1,
        producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
        topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    )
    return out


async def handle_describe_transactions(ctx: RequestContext, header: RequestHeader,
                                       body: dict) -> dict:
    return {"throttle_time_ms": 0,
            "transaction_states": [_described(ctx, str(tid))
                                   for tid in body.get("transactional_ids") or []]}
