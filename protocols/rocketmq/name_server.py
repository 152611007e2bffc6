"""The RocketMQ name server: topic routes and cluster info, computed from the topic catalogue.

Routes reflect the queues that exist: a topic's queues are its partitions, all served by the
brokers this name server knows about (standalone: one).  The default topic TBW102 is routed
when auto-creation is on, so Java and C++ producers fall back to it and the broker creates the
topic on first send.  Requests: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224), GET_KV_CONFIG (101),
REGISTER_BROKER / UNREGISTER_BROKER (103/104, accepted and ignored: routes come from the shared
topic catalogue), DELETE_TOPIC_IN_NAMESRV (216, accepted: the broker deletes).

This module must never do I/O itself (the topic catalogue is an injected object).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocols.rocketmq.broker_api import TopicServiceLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import (
    RequestCodeNotSupportedError,
    ResponseCode,
    RocketMQError,
    TopicNotExistError,
)
from protocols.rocketmq.headers import ext_required
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import DEFAULT_TOPIC, from_storage, to_storage

PERM_READ_WRITE = 6
PERM_READ_WRITE_INHERIT = 7


@dataclass
class BrokerEndpoint:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str  # host:port as clients should dial it


@dataclass
class NameServerConfig:
    auto_create_topics: bool = True
    default_queue_nums: int = 4


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


class NameServer:
    def __init__(self, topics: TopicServiceLike, brokers: Callable[[], list[BrokerEndpoint]],
                 config: NameServerConfig | None = None) -> None:
        self.topics = topics
        self.brokers = brokers
        self.config = config or NameServerConfig()
        self._handlers: dict[int, Callable[[RemotingCommand], Awaitable[RemotingCommand]]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topic_list,
            RequestCode.GET_KV_CONFIG: self._kv_config,
            RequestCode.REGISTER_BROKER: self._accept,
            RequestCode.UNREGISTER_BROKER: self._accept,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._accept,
        }

    async def handle(self, request: RemotingCommand) -> RemotingCommand:
        """Answer one request; errors become RocketMQ error responses here."""
        handler = self._handlers.get(request.code)
        try:
            if handler is None:
                raise RequestCodeNotSupportedError(
                    f"request type {request.code} not supported by the name server")
            return await handler(request)
        except RocketMQError as exc:
            return make_response(request, exc.code, str(exc))

    def route_data(self, topic: str, queues: int, perm: int = PERM_READ_WRITE) -> dict[str, object]:
        brokers = self.brokers()
        return {
            "queueDatas": [{"brokerName": b.broker_name, "readQueueNums": queues,
                            "writeQueueNums": queues, "perm": perm, "topicSysFlag": 0}
                           for b in brokers if b.broker_id == 0],
            "brokerDatas": [{"cluster": b.cluster_name, "brokerName": b.broker_name,
                             "brokerAddrs": {str(b.broker_id): b.address}} for b in brokers],
            "filterServerTable": {},
        }

    async def _route(self, request: RemotingCommand) -> RemotingCommand:
        topic = ext_required(request.ext_fields, "topic")
        if topic == DEFAULT_TOPIC and self.config.auto_create_topics:
            data = self.route_data(topic, self.config.default_queue_nums,
                                   PERM_READ_WRITE_INHERIT)
            return make_response(request, ResponseCode.SUCCESS, None, None, _json(data))
        try:
            name = to_storage(topic)
        except RocketMQError as exc:
            raise TopicNotExistError(
                f"No topic route info in name server for the topic: {topic}") from exc
        info = self.topics.topics().get(name) or await self.topics.refresh_topic(name)
        if info is None:
            raise TopicNotExistError(
                f"No topic route info in name server for the topic: {topic}")
        return make_response(request, ResponseCode.SUCCESS, None, None,
                             _json(self.route_data(topic, info.partitions)))

    async def _cluster_info(self, request: RemotingCommand) -> RemotingCommand:
        broker_table: dict[str, dict[str, object]] = {}
        clusters: dict[str, list[str]] = {}
        for b in self.brokers():
            entry = broker_table.setdefault(b.broker_name, {
                "cluster": b.cluster_name, "brokerName": b.broker_name, "brokerAddrs": {}})
            entry["brokerAddrs"][str(b.broker_id)] = b.address  # type: ignore[index]
            names = clusters.setdefault(b.cluster_name, [])
            if b.broker_name not in names:
                names.append(b.broker_name)
        body = {"brokerAddrTable": broker_table, "clusterAddrTable": clusters}
        return make_response(request, ResponseCode.SUCCESS, None, None, _json(body))

    async def _topic_list(self, request: RemotingCommand) -> RemotingCommand:
        names = sorted(from_storage(n) for n in self.topics.topics())
        return make_response(request, ResponseCode.SUCCESS, None, None,
                             _json({"topicList": names}))

    async def _kv_config(self, request: RemotingCommand) -> RemotingCommand:
        return make_response(request, ResponseCode.QUERY_NOT_FOUND, "No config item")

    async def _accept(self, request: RemotingCommand) -> RemotingCommand:
        return make_response(request, ResponseCode.SUCCESS)
