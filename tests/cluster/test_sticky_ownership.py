"""A failover moves each bundle once (issue 24): after broker 2 is killed, broker 1 takes its
bundles; when broker 2 comes back it does not pull them back at once, but is handed its share
after `--handback-delay`, gracefully (real processes, real ZooKeeper)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.cluster.ownership import target_broker
from tests.cluster.cluster_processes import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_restarted_broker_is_handed_its_bundles_after_the_delay(tmp_path: Path) -> None:
    with Cluster(tmp_path, bookies=3, brokers=2, handback_delay_s=6.0) as cluster:
        expected = {b: target_broker(b, [1, 2]) for b in range(cluster.bundles)}
        deadline = time.monotonic() + 90
        while cluster.bundle_owners() != expected:  # the initial share, after the delay
            assert time.monotonic() < deadline, cluster.bundle_owners()
            time.sleep(0.5)
        cluster.brokers[2].kill()
        cluster.wait_all_bundles_owned(by={1}, timeout_s=60)
        cluster.add_broker(2)  # returns once it is registered and ready
        back = time.monotonic()
        time.sleep(3.0)
        assert set(cluster.bundle_owners().values()) == {1}, "bundles were pulled back at once"
        while cluster.bundle_owners() != expected:
            assert time.monotonic() < back + 90, cluster.bundle_owners()
            time.sleep(0.5)
        assert time.monotonic() - back >= 6.0
        assert "released bundle" in cluster.brokers[1].log()
