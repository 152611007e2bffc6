"""Consumer offsets among three real standalones replicating one namespace with each other
("east", "west", "north"): a group that consumed in east resumes in west at the offset east
pushed there, translated with west's checkpoints (served by west's admin API), skips nothing
and, since everything it read had been synced everywhere, re-reads nothing.  Without that
wiring no offset reaches west for a topic among three clusters, and the moved group
(auto.offset.reset=latest) misses what arrived later; with only west's inbound pairs from
north it resumed after west's last record from north, re-reading 180 of 240."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.replication.geo_pair import PARTITIONS, TOPIC, _start, drained, produce, wait_for
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMES = ("east", "west", "north")
GROUP = "geo-three"


@pytest.fixture(scope="module")
def trio_of(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Standalone]]:
    base: Path = tmp_path_factory.mktemp("geo-three")
    servers: dict[str, Standalone] = {}
    try:
        for name in NAMES:
            servers[name] = _start(base, name)
        for here in NAMES:
            for there in NAMES:
                if there != here:
                    servers[here].admin(
                        "clusters", "add", there, "--kafka", servers[there].bootstrap,
                        "--remote-admin-url", f"http://127.0.0.1:{servers[there].admin_port}")
            servers[here].admin("tenants", "create", "geo")
            servers[here].admin("namespaces", "create", "geo/ns", "--policy",
                                "replication_clusters=" + ",".join(NAMES))
        servers["east"].admin("topics", "create", TOPIC, "--partitions", str(PARTITIONS))
        for name in ("west", "north"):
            wait_for(lambda n=name: TOPIC in AdminClient(  # type: ignore[misc]
                {"bootstrap.servers": servers[n].bootstrap}).list_topics(timeout=10).topics,
                f"the topic to be created in {name}")
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _ends(server: Standalone) -> list[int]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "geo-three-ends"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10,
                                               cached=False)[1] for p in range(PARTITIONS)]
    finally:
        consumer.close()


def _all_drained(servers: dict[str, Standalone], total: int) -> bool:
    return (all(drained(s) for s in servers.values())
            and all(sum(_ends(s)) >= total for s in servers.values()))


def _group(server: Standalone, reset: str = "latest") -> Consumer:
    return Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP,
                     "enable.auto.commit": False, "auto.offset.reset": reset,
                     "session.timeout.ms": 6000})


def _committed(server: Standalone) -> list[int]:
    consumer = _group(server)
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)]
    finally:
        consumer.close()


def test_a_group_moved_to_a_third_cluster_skips_nothing(trio_of: dict[str, Standalone]
                                                        ) -> None:
    east, west, north = (trio_of[n] for n in NAMES)
    for server, prefix in ((north, "n1"), (west, "w1"), (east, "e1"), (north, "n2")):
        produce(server, prefix, 60)
    wait_for(lambda: _all_drained(trio_of, 240), "all three to hold all 240 messages", 180)

    consumer = _group(east, "earliest")  # the group reads everything in east and commits
    consumer.subscribe([TOPIC])
    read = 0
    deadline = time.monotonic() + 120
    while read < 240 and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=500, timeout=0.5):
            assert msg.error() is None, msg.error()
            read += 1
    assert read == 240
    consumer.commit(asynchronous=False)
    consumer.close()
    east_committed = _committed(east)
    assert sum(east_committed) == 240

    # east pushes the group's offsets to west, translated through north's records there too.
    # The re-read bound: all 240 were replicated, noted and synced everywhere before the group
    # committed, so nothing arrived since the last sync and west's offsets reach west's ends
    # (the group will re-read nothing)
    west_ends = _ends(west)
    seen: list[list[int]] = []

    def reached() -> bool:
        seen.append(_committed(west))
        return seen[-1] == west_ends

    try:
        wait_for(reached, "the group's offsets in west to reach west's ends", 120)
    except AssertionError:
        raise AssertionError(f"the group's offsets in west stayed at {seen[-1]}, below west's "
                             f"ends {west_ends} (re-read bound: 0)") from None

    produce(north, "n3", 40)  # arrives after the group left east: it must not be skipped
    wait_for(lambda: _all_drained(trio_of, 280), "all three to hold all 280 messages", 180)
    resume_at = _committed(west)

    moved = _group(west)
    moved.subscribe([TOPIC])
    values: list[bytes] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(v.startswith(b"n3-") for v in values) < 40:
        for msg in moved.consume(num_messages=500, timeout=0.5):
            assert msg.error() is None, msg.error()
            values.append(msg.value() or b"")
    moved.close()
    assert sorted(v for v in values if v.startswith(b"n3-")) == [
        f"n3-{i:06d}".encode() for i in range(40)]
    re_read = len(values) - 40
    print(f"resumed in west at {resume_at} (east committed {east_committed}, west's ends "
          f"{west_ends}); re-read {re_read} of 240 already read (bound: 0, nothing arrived "
          "between the last sync and the commit)")
    assert resume_at == west_ends and re_read == 0, (resume_at, re_read)
