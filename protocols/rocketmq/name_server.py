"""The RocketMQ name server: topic routes and cluster info, computed from the topic catalogue.

Routes reflect the queues that exist: a topic's queues are its partitions, spread over brokers
by a QueueMap (queue_map.py: standalone, one broker with every partition; cluster, one broker
per ownership bundle with the partitions of that bundle).  The default topic TBW102 is routed
when auto-creation is on, so Java and C++ producers fall back to it and the broker creates the
topic on first send.  Requests: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224), GET_KV_CONFIG (101),
REGISTER_BROKER / UNREGISTER_BROKER (103/104, accepted and ignored: routes come from the shared
topic catalogue), DELETE_TOPIC_IN_NAMESRV (216, accepted: the broker deletes),
GET_SYSTEM_TOPIC_LIST_FROM_NS (304, the console's topic page).

On a secured broker the listener passes `may_describe` (access.RocketMQGuard for the request's
principal): a topic the principal may not DESCRIBE is answered TOPIC_NOT_EXIST like a missing
one, and left out of topic lists.

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
from protocols.rocketmq.queue_map import BrokerEndpoint, QueueMap, SingleBrokerQueueMap
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import DEFAULT_TOPIC, from_storage, to_storage

Visible = Callable[[str], bool]
PERM_READ_WRITE = 6
PERM_READ_WRITE_INHERIT = 7


@dataclass
class NameServerConfig:
    auto_create_topics: bool = True
    default_queue_nums: int = 4


def _everything(name: str) -> bool:
    return True


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


class NameServer:
    def __init__(self, topics: TopicServiceLike, brokers: Callable[[], list[BrokerEndpoint]],
                 config: NameServerConfig | None = None, *,
                 queue_map: QueueMap | None = None) -> None:
        self.topics = topics
        self.queue_map: QueueMap = queue_map or SingleBrokerQueueMap(brokers)
        self.config = config or NameServerConfig()
        self._handlers: dict[int, Callable[[RemotingCommand, Visible],
                                           Awaitable[RemotingCommand]]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topic_list,
            RequestCode.GET_KV_CONFIG: self._kv_config,
            RequestCode.REGISTER_BROKER: self._accept,
            RequestCode.UNREGISTER_BROKER: self._accept,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._accept,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._system_topic_list,
        }

    async def handle(self, request: RemotingCommand,
                     may_describe: Visible | None = None) -> RemotingCommand:
        """Answer one request; errors become RocketMQ error responses here.  `may_describe`
        (storage name -> bool) hides topics from the request's principal."""
        handler = self._handlers.get(request.code)
        try:
            if handler is None:
                raise RequestCodeNotSupportedError(
                    f"request type {request.code} not supported by the name server")
            return await handler(request, may_describe or _everything)
        except RocketMQError as exc:
            return make_response(request, exc.code, str(exc))

    def route_data(self, topic: str, queues: int, perm: int = PERM_READ_WRITE) -> dict[str, object]:
        if topic == DEFAULT_TOPIC:
            groups = self.queue_map.default_route(queues)
        else:
            groups = self.queue_map.route(to_storage(topic), queues)
        if not groups:
            raise TopicNotExistError(
                f"No topic route info in name server for the topic: {topic} (no live broker)")
        return {
            "queueDatas": [{"brokerName": g.endpoint.broker_name, "readQueueNums": g.queues,
                            "writeQueueNums": g.queues, "perm": perm, "topicSysFlag": 0}
                           for g in groups if g.endpoint.broker_id == 0],
            "brokerDatas": [{"cluster": g.endpoint.cluster_name,
                             "brokerName": g.endpoint.broker_name,
                             "brokerAddrs": {str(g.endpoint.broker_id): g.endpoint.address}}
                            for g in groups],
            "filterServerTable": {},
        }

    def _default_route_allowed(self) -> bool:
        """TBW102 is routed when auto-creation is on and the default namespace's policy does
        not turn it off (the broker still refuses a send to a topic whose own namespace does)."""
        namespaces = getattr(self.topics, "namespaces", None)
        return self.config.auto_create_topics and (
            namespaces is None
            or namespaces.topic_policies(DEFAULT_TOPIC).auto_create_topics is not False)

    async def _route(self, request: RemotingCommand,
                          visible: Visible) -> RemotingCommand:
        topic = ext_required(request.ext_fields, "topic")
        if topic == DEFAULT_TOPIC and self._default_route_allowed():
            data = self.route_data(topic, self.config.default_queue_nums,
                                   PERM_READ_WRITE_INHERIT)
            return make_response(request, ResponseCode.SUCCESS, None, None, _json(data))
        try:
            name = to_storage(topic)
        except RocketMQError as exc:
            raise TopicNotExistError(
                f"No topic route info in name server for the topic: {topic}") from exc
        info = self.topics.topics().get(name) or await self.topics.refresh_topic(name)
        if info is None or not visible(name):
            raise TopicNotExistError(
                f"No topic route info in name server for the topic: {topic}")
        return make_response(request, ResponseCode.SUCCESS, None, None,
                             _json(self.route_data(topic, info.partitions)))

    async def _cluster_info(self, request: RemotingCommand,
                                 visible: Visible) -> RemotingCommand:
        broker_table: dict[str, dict[str, object]] = {}
        clusters: dict[str, list[str]] = {}
        for b in self.queue_map.brokers():
            entry = broker_table.setdefault(b.broker_name, {
                "cluster": b.cluster_name, "brokerName": b.broker_name, "brokerAddrs": {}})
            entry["brokerAddrs"][str(b.broker_id)] = b.address  # type: ignore[index]
            names = clusters.setdefault(b.cluster_name, [])
            if b.broker_name not in names:
                names.append(b.broker_name)
        body = {"brokerAddrTable": broker_table, "clusterAddrTable": clusters}
        return make_response(request, ResponseCode.SUCCESS, None, None, _json(body))

    async def _topic_list(self, request: RemotingCommand,
                               visible: Visible) -> RemotingCommand:
        names = sorted(from_storage(n) for n in self.topics.topics() if visible(n))
        return make_response(request, ResponseCode.SUCCESS, None, None,
                             _json({"topicList": names}))

    async def _system_topic_list(self, request: RemotingCommand,
                                      visible: Visible) -> RemotingCommand:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS (304, the console's topic page): like Java, the cluster
        and broker names, plus one broker address the client then asks for the broker's own
        system topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER)."""
        names: list[str] = []
        broker_addr: str | None = None
        for b in self.queue_map.brokers():
            for name in (b.cluster_name, b.broker_name):
                if name not in names:
                    names.append(name)
            if broker_addr is None and b.address:
                broker_addr = b.address
        body: dict[str, object] = {"topicList": names}
        if broker_addr is not None:
            body["brokerAddr"] = broker_addr
        return make_response(request, ResponseCode.SUCCESS, None, None, _json(body))

    async def _kv_config(self, request: RemotingCommand,
                              visible: Visible) -> RemotingCommand:
        return make_response(request, ResponseCode.QUERY_NOT_FOUND, "No config item")

    async def _accept(self, request: RemotingCommand,
                           visible: Visible) -> RemotingCommand:
        return make_response(request, ResponseCode.SUCCESS)
