"""A lost bookie is a pause, never an error a client sees (issue 24).

Three bookies at E=3 Qw=2 Qa=2 (no spare: a failed bookie cannot be replaced) and two brokers,
an idempotent confluent-kafka producer on a 4-partition topic. One bookie is killed with
SIGKILL and comes back after its ZooKeeper session expired: the producer sees no error at all
(every storage failure was answered with a code it retries), nothing acknowledged is lost,
nothing is stored twice, and produce resumes once the bookie is back.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import ProduceRun, create_topic, read_topic, verify

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "bookie-faults"
PARTITIONS = 4


def _tracebacks(cluster: Cluster) -> list[str]:
    """Each traceback in the process logs, as its process name and the lines after it."""
    found = []
    for process in [*cluster.brokers.values(), *cluster.bookies]:
        lines = process.log_path.read_text(errors="replace").splitlines()
        found += [f"{process.name}: " + "\n".join(lines[i:i + 30])
                  for i, line in enumerate(lines) if "Traceback" in line]
    return found


def test_sigkill_of_a_bookie_without_a_spare_is_retried_through(tmp_path: Path) -> None:
    with Cluster(tmp_path, bookies=3, brokers=2, quorum=(3, 2, 2), session_timeout_s=4.0,
                 partitions=PARTITIONS) as cluster:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        run = ProduceRun(cluster.bootstrap, TOPIC, run_id="bk", rate_per_s=200).start()
        try:
            deadline = time.monotonic() + 60
            while len(run.acked) < 400 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(run.acked) >= 400, f"no produce before the fault: {run.errors[:5]}"
            victim = cluster.bookies[1]
            victim.kill()
            time.sleep(cluster.session_timeout_s + 4)  # its registration is gone by now
            victim.start()
            back = time.monotonic()
            deadline = back + 90
            while run.acked_since(back) < 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            resumed = run.first_ack_after(back)
            assert run.acked_since(back) >= 200, (
                f"produce did not resume after the bookie returned; errors {run.errors[:5]}\n"
                + cluster.logs())
        finally:
            run.stop()
        assert run.errors == [], run.errors[:10]
        verdict = verify(run.acked, read_topic(cluster.bootstrap, TOPIC, PARTITIONS))
        assert (verdict.lost, verdict.duplicated) == (0, 0), verdict
        assert resumed is not None and resumed - back < 60
        tracebacks = _tracebacks(cluster)
        assert tracebacks == [], "\n".join(tracebacks[:5])
