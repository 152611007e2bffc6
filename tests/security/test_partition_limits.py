"""A limit on the partitions one request creates ([kafka] max_partitions_per_request), on a real
standalone over the wire: CreateTopics creates topics in request order until the next one would
pass the limit, and refuses it and the rest that do not fit with POLICY_VIOLATION (also with
validate_only); CreatePartitions counts the partitions it adds the same way.  The
controller_mutation_rate quota limits the rate across requests (test_client_quotas.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from protocols.kafka.errors import ErrorCode
from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.secured_standalone import running
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration]

LIMIT = 20
POLICY_VIOLATION = int(ErrorCode.POLICY_VIOLATION)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    directory = tmp_path_factory.mktemp("partition-limits")
    config = directory / "limits.toml"
    config.write_text(f"[kafka]\nmax_partitions_per_request = {LIMIT}\n")
    with running(Standalone(directory / "data", extra_args=["--config", str(config)])) as s:
        yield s


def topics(*wanted: tuple[str, int], validate_only: bool = False) -> dict[str, Any]:
    return {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1}
                       for n, p in wanted], "timeout_ms": 30000, "validate_only": validate_only}


async def test_create_topics_stops_at_the_request_limit(server: Standalone) -> None:
    client = await WireClient.connect(server.kafka_port)
    try:
        answer = await client.request(19, 7, topics(("lim-a", 8), ("lim-b", 8), ("lim-c", 8),
                                                    ("lim-d", 4)), timeout_s=60)
        codes = {t["name"]: t["error_code"] for t in answer["topics"]}
        assert codes == {"lim-a": 0, "lim-b": 0, "lim-c": POLICY_VIOLATION, "lim-d": 0}
        refused = next(t for t in answer["topics"] if t["name"] == "lim-c")
        assert "max_partitions_per_request" in refused["error_message"]
        alone = await client.request(19, 7, topics(("lim-e", LIMIT + 1)))
        assert alone["topics"][0]["error_code"] == POLICY_VIOLATION
        checked = await client.request(19, 7, topics(("lim-f", 15), ("lim-g", 15),
                                                     validate_only=True))
        assert [t["error_code"] for t in checked["topics"]] == [0, POLICY_VIOLATION]
        listed = await client.request(3, 12, {"topics": None})
        names = {t["name"] for t in listed["topics"]}
        assert {"lim-a", "lim-b", "lim-d"} <= names
        assert not names & {"lim-c", "lim-e", "lim-f", "lim-g"}
    finally:
        await client.aclose()


async def test_create_partitions_counts_what_it_adds(server: Standalone) -> None:
    client = await WireClient.connect(server.kafka_port)
    try:
        made = await client.request(19, 7, topics(("grow-a", 2), ("grow-b", 2)))
        assert [t["error_code"] for t in made["topics"]] == [0, 0]
        grown = await client.request(37, 3, {"topics": [
            {"name": "grow-a", "count": 12, "assignments": None},
            {"name": "grow-b", "count": 14, "assignments": None}], "timeout_ms": 30000},
            timeout_s=60)
        assert [r["error_code"] for r in grown["results"]] == [0, POLICY_VIOLATION]
        listed = await client.request(3, 12, {"topics": [{"name": "grow-a"}, {"name": "grow-b"}]})
        counts = {t["name"]: len(t["partitions"]) for t in listed["topics"]}
        assert counts == {"grow-a": 12, "grow-b": 2}
    finally:
        await client.aclose()
