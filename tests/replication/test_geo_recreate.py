"""A topic deleted and created again under the same name replicates from its new start: the
replicator's checkpoint of the old topic (its position, producer id and sequence) must not be
resumed by the new one, which would skip the new topic's records below the old position."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.replication.checkpoints import (
    Checkpoint,
    CheckpointStore,
    checkpoint_path,
    read_checkpoint,
)
from ledger_backend.metadata import open_store
from tests.replication.geo_pair import (
    PARTITIONS,
    TOPIC,
    drained,
    produce,
    read_all,
    start_pair,
    wait_for,
)
from tests.support.topic_nodes import write_topic_node


@pytest.mark.integration
@pytest.mark.slow
def test_a_recreated_topic_replicates_from_its_new_start(tmp_path: Path) -> None:
    east, west = start_pair(tmp_path)
    try:
        produce(east, "old", 100)
        wait_for(lambda: drained(east), "east to send the old topic's records")
        admin = AdminClient({"bootstrap.servers": east.bootstrap})
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        wait_for(lambda: TOPIC not in admin.list_topics(timeout=10).topics,
                 "the topic to be gone in east")

        def create() -> bool:
            try:
                admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
            except Exception:  # noqa: BLE001 - still being deleted: try again
                return False
            return True

        wait_for(create, "the topic to be created again in east")
        produce(east, "new", 30)  # 15 a partition: below the old position (50 a partition)
        wanted = {b"new-%06d" % i for i in range(30)}
        wait_for(lambda: wanted <= {m.value for m in read_all(west)},
                 "the recreated topic's records to reach west", timeout_s=60)
        in_west = [m.value for m in read_all(west) if m.value and m.value.startswith(b"new-")]
        assert sorted(in_west) == sorted(wanted)  # each once
    finally:
        east.stop()
        west.stop()


async def test_a_checkpoint_kept_for_another_topic_id_is_not_resumed() -> None:
    store = await open_store("memory:")
    ids = [uuid.uuid4() for _ in range(3)]
    try:
        await write_topic_node(store, "t", ids[0])
        first = CheckpointStore(store, "west", "t", 0)
        claimed = await first.claim(str(ids[0]))
        assert (claimed.source_next, claimed.topic_id) == (0, str(ids[0]))
        claimed.source_next, claimed.remote_next, claimed.producer = 50, 70, (9, 0)
        await first.save(claimed)
        again = await CheckpointStore(store, "west", "t", 0).claim(str(ids[0]))
        assert (again.source_next, again.producer) == (50, (9, 0))  # the same topic resumes
        await write_topic_node(store, "t", ids[1])  # deleted and created again
        fresh = await CheckpointStore(store, "west", "t", 0).claim(str(ids[1]))
        assert (fresh.source_next, fresh.remote_next, fresh.producer) == (0, -1, None)
        assert fresh.topic_id == str(ids[1])
        stored = await read_checkpoint(store, "west", "t", 0)
        assert stored is not None and (stored.source_next, stored.topic_id) == (0, str(ids[1]))
        # a node written before topic ids were kept is the topic's own: resumed, id adopted
        await write_topic_node(store, "u", ids[2])
        old = Checkpoint(source_next=30, remote_next=40).to_bytes()
        await store.create(checkpoint_path("west", "u", 0), old, make_parents=True)
        adopted = await CheckpointStore(store, "west", "u", 0).claim(str(ids[2]))
        assert (adopted.source_next, adopted.topic_id) == (30, str(ids[2]))
    finally:
        await store.close()
