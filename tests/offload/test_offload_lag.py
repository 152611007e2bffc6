"""The offload lag (issue 18's metrics): how far offloading is behind its policy, per
partition, in /metrics and in offload-status, against a `ledgerwire standalone` subprocess
whose background passes never run during the test (interval 3600 s)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.offload.test_offload_clients import TOPIC, metric_values, produce, start_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAG_S = f'ledgerwire_offload_lag_seconds{{partition="0",topic="{TOPIC}"}}'
LAG_BYTES = f'ledgerwire_offload_lag_bytes{{partition="0",topic="{TOPIC}"}}'


@pytest.mark.timeout(300)
def test_the_lag_shows_closed_ledgers_the_policy_wants_offloaded(tmp_path: Path) -> None:
    sa = start_server(tmp_path, 3600)
    try:
        produce(sa.bootstrap)  # several closed ledgers of 64 KB
        status = sa.admin("topics", "offload-status", TOPIC)[0]
        assert status["ledgers_on_bookies"] > 2, status
        metrics = metric_values(sa)
        assert (metrics[LAG_S], metrics[LAG_BYTES]) == (0, 0)  # no policy: nothing is late
        assert (status["lag_seconds"], status["lag_bytes"]) == (0, 0)

        sa.admin("policies", "set", "public/default", "offload_threshold_mb=0")
        time.sleep(1.1)  # the oldest closed ledger is at least this late
        status = sa.admin("topics", "offload-status", TOPIC)[0]
        assert status["lag_seconds"] >= 1.0, status
        assert 0 < status["lag_bytes"] <= status["bytes_on_bookies"], status
        metrics = metric_values(sa)
        assert metrics[LAG_S] >= 1.0 and metrics[LAG_BYTES] == status["lag_bytes"], metrics

        sa.admin("topics", "offload", TOPIC)
        status = sa.admin("topics", "offload-status", TOPIC)[0]
        assert status["ledgers_offloaded"] > 0, status
        assert (status["lag_seconds"], status["lag_bytes"]) == (0, 0), status
        metrics = metric_values(sa)
        assert (metrics[LAG_S], metrics[LAG_BYTES]) == (0, 0)
    finally:
        sa.stop()
