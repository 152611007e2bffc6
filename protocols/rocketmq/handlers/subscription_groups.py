"""Subscription groups as mqadmin updateSubGroup / deleteSubGroup and the console manage them:
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207).

Configs written with 200 are durable (the broker's subscription-group store, in the metadata
store) and enforced where Java enforces them: pulls (handlers/pull.py: consumeEnable,
consumeBroadcastEnable) and send-backs (handlers/messages.py: retryMaxTimes, retryQueueNums),
which read `effective_config` -- the store's in-memory copy, never the store itself.
201 answers a SubscriptionGroupWrapper: the stored configs plus, like Java's
auto-created groups, a default config for every group that is online or has committed offsets.
207 deletes the stored config and, when `removeOffset` is true, the group's committed offsets
(where the offset store can remove them).

This module must never touch partitions.
"""

from __future__ import annotations

import re
from typing import Any

from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import MessageIllegalError, ResponseCode
from protocols.rocketmq.fastjson import dumps_bytes
from protocols.rocketmq.handlers.admin_support import groups_with_offsets, subscription_groups
from protocols.rocketmq.handlers.common import parse_json_body
from protocols.rocketmq.headers import ext_bool, ext_required

MAX_GROUP_LENGTH = 255
_LEGAL_GROUP = re.compile(r"[%|a-zA-Z0-9_-]+")

# SubscriptionGroupConfig's properties and defaults (fastjson order: sorted by name)
DEFAULTS: dict[str, Any] = {
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeMessageOrderly": False,  # RocketMQ 5: a FIFO group (5.x consumers)
    "groupName": "",
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


def validate_group(group: str) -> None:
    if not group:
        raise MessageIllegalError("the specified group is blank")
    if len(group) > MAX_GROUP_LENGTH:
        raise MessageIllegalError(f"the specified group is longer than {MAX_GROUP_LENGTH}")
    if not _LEGAL_GROUP.fullmatch(group):
        raise MessageIllegalError(
            f"the specified group[{group}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$")


def normalise_config(doc: object) -> dict[str, Any]:
    """A SubscriptionGroupConfig body -> every known property with its type (defaults filled);
    unknown properties are dropped, a wrongly typed one is refused."""
    if not isinstance(doc, dict):
        raise MessageIllegalError("subscription group config is not an object")
    config: dict[str, Any] = {}
    for name, default in DEFAULTS.items():
        value = doc.get(name, default)
        if value is None:
            value = default
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise MessageIllegalError(f"{name} must be a boolean, not {value!r}")
        elif isinstance(default, int):
            try:
                value = int(value)
            except (TypeError, ValueError) as exc:
                raise MessageIllegalError(f"{name} must be a number, not {value!r}") from exc
        else:
            value = str(value)
        config[name] = value
    validate_group(config["groupName"])
    if config["retryQueueNums"] < 0 or config["retryMaxTimes"] < -1:
        raise MessageIllegalError("retryQueueNums/retryMaxTimes out of range")
    return config


def default_config(group: str) -> dict[str, Any]:
    return {**DEFAULTS, "groupName": group}


def stored_config(broker: BrokerLike, group: str) -> dict[str, Any] | None:
    """The group's stored config with defaults filled in, from the broker's in-memory copy
    (never a store read: the pull path calls this); None when no config is stored, which is
    Java's auto-created group (autoCreateSubscriptionGroup) with the defaults."""
    store = getattr(broker, "subscription_groups", None)
    found = store.cached(group) if store is not None else None
    return None if found is None else {**default_config(group), **found}


def effective_config(broker: BrokerLike, group: str) -> dict[str, Any]:
    return stored_config(broker, group) or default_config(group)


async def handle_update_and_create_subscription_group(
        broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand) -> RemotingCommand:
    config = normalise_config(parse_json_body(request.body))
    await subscription_groups(broker).put(config["groupName"], config)
    return make_response(request, ResponseCode.SUCCESS)


async def handle_get_all_subscription_group_config(
        broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand) -> RemotingCommand:
    stored = await subscription_groups(broker).all()
    table: dict[str, dict[str, Any]] = {}
    known = set(broker.clients.consumer_groups) | set(groups_with_offsets(broker))
    for group in sorted(known | set(stored)):
        table[group] = ({**default_config(group), **stored[group]} if group in stored
                        else default_config(group))
    body = {"dataVersion": {"counter": len(stored), "timestamp": broker.now_ms()},
            "subscriptionGroupTable": table}
    return make_response(request, ResponseCode.SUCCESS, None, None, dumps_bytes(body))


async def handle_delete_subscription_group(
        broker: BrokerLike, conn: ConnectionLike, request: RemotingCommand) -> RemotingCommand:
    group = ext_required(request.ext_fields, "groupName")
    validate_group(group)
    await subscription_groups(broker).delete(group)
    if ext_bool(request.ext_fields, "removeOffset"):
        remove = getattr(broker.offsets, "remove_group", None)
        if remove is not None:
            await remove(group)
    return make_response(request, ResponseCode.SUCCESS)
