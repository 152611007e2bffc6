"""Topic administration as mqadmin uses it: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG
(21), DELETE_TOPIC_IN_BROKER (215), GET_BROKER_RUNTIME_INFO (28).

Queues are partitions: creating a topic creates max(readQueueNums, writeQueueNums) partitions;
updating one to more queues adds partitions (a queue count can never shrink: the Kafka offset
space of a partition stays).

This module must never write messages.
"""

from __future__ import annotations

from protocols.kafka.errors import KafkaProtocolError, UnknownTopicOrPartitionError
from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import MessageIllegalError, ResponseCode
from protocols.rocketmq.handlers.common import StorageError, json_body
from protocols.rocketmq.headers import ext_int, ext_required
from protocols.rocketmq.topic_names import from_storage, to_storage

PERM_READ_WRITE = 6


async def handle_update_and_create_topic(broker: BrokerLike, conn: ConnectionLike,
                                         request: RemotingCommand) -> RemotingCommand:
    ext = request.ext_fields
    topic = ext_required(ext, "topic")
    queues = max(ext_int(ext, "readQueueNums", 0), ext_int(ext, "writeQueueNums", 0))
    if queues < 1:
        raise MessageIllegalError("readQueueNums/writeQueueNums must be at least 1")
    name = to_storage(topic)
    try:
        info = broker.topics.topics().get(name) or await broker.topics.refresh_topic(name)
        if info is None:
            await broker.ensure_topic(name, queues, explicit=True)
        elif queues > info.partitions:
            await broker.topics.create_partitions(name, queues)
    except KafkaProtocolError as exc:
        raise StorageError(f"creating topic {topic} failed: {exc}") from exc
    return make_response(request, ResponseCode.SUCCESS)


def topic_config(name: str, partitions: int) -> dict[str, object]:
    return {"topicName": from_storage(name), "readQueueNums": partitions,
            "writeQueueNums": partitions, "perm": PERM_READ_WRITE, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": False}


async def handle_get_all_topic_config(broker: BrokerLike, conn: ConnectionLike,
                                      request: RemotingCommand) -> RemotingCommand:
    table = {from_storage(name): topic_config(name, info.partitions)
             for name, info in broker.topics.topics().items()}
    body = {"topicConfigTable": table,
            "dataVersion": {"timestamp": broker.now_ms(), "counter": len(table)}}
    return make_response(request, ResponseCode.SUCCESS, None, None, json_body(body))


async def handle_delete_topic(broker: BrokerLike, conn: ConnectionLike,
                              request: RemotingCommand) -> RemotingCommand:
    topic = ext_required(request.ext_fields, "topic")
    try:
        await broker.topics.delete_topic(to_storage(topic))
    except UnknownTopicOrPartitionError:
        pass  # already gone: Apache answers SUCCESS too (mqadmin deleteSubGroup relies on it)
    except KafkaProtocolError as exc:
        raise StorageError(str(exc)) from exc
    return make_response(request, ResponseCode.SUCCESS)
