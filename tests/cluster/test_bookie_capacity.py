"""A cluster without a spare bookie is reported (issue 24): one warning when live bookies are
not more than the ensemble size, one line when a spare returns, and the same figures in the
admin API's /admin/v1/bookies/capacity and /metrics."""

from __future__ import annotations

import logging
from functools import partial

import pytest
import trio

from gateway.admin.metrics import BrokerMetrics, MetricsSnapshot, render_metrics
from gateway.cluster.bookie_capacity import BookieCapacity, read_capacity, watch_capacity
from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
from ledger_backend.metadata import open_store


def test_capacity_figures_and_warning() -> None:
    assert BookieCapacity(4, 3).warning is None
    short = BookieCapacity(3, 3)
    assert short.spare_bookies == 0 and "no spare bookie" in (short.warning or "")
    assert BookieCapacity(2, 3).to_json()["spare_bookies"] == -1
    body, _ = render_metrics(MetricsSnapshot(BrokerMetrics(), [], [], [], 0,
                                             capacity=BookieCapacity(3, 3)))
    text = body.decode()
    assert "ledgerwire_live_bookies 3" in text and "ledgerwire_spare_bookies 0" in text


async def test_watch_warns_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    store = await open_store("memory:capacity")
    try:
        for port in (1, 2, 3):
            await store.create(f"{AVAILABLE_BOOKIES_PATH}/127.0.0.1:{port}", b"",
                               make_parents=True)
        with caplog.at_level(logging.INFO, logger="ledgerwire.bookie_capacity"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(watch_capacity, store, 3, settle_s=0.1, recheck_s=0.2))
                await trio.sleep(0.5)
                await store.create(f"{AVAILABLE_BOOKIES_PATH}/127.0.0.1:4", b"")
                await trio.sleep(0.5)
                nursery.cancel_scope.cancel()
        lines = [(r.levelname, r.getMessage()) for r in caplog.records
                 if r.name == "ledgerwire.bookie_capacity"]
        assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
        assert "3 live bookies for ensembles of 3" in lines[0][1]
        assert (await read_capacity(store, 3)).spare_bookies == 1
    finally:
        await store.close()
