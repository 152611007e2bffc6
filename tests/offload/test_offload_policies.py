"""Offload policies per namespace and per topic through the admin API (Pulsar's namespace
offload policies and topic-level overrides): the namespace's offload_deletion_lag_seconds
keeps the bookie copies that [offload] deletion_lag_s = 0 would delete at once, and the
topic's offload.deletion.lag.ms (a Kafka topic config) overrides the namespace."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.offload.test_offload_clients import (
    TOPIC,
    consume_all,
    produce,
    start_server,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_the_deletion_lag_is_set_per_namespace_and_overridden_per_topic(tmp_path: Path
                                                                        ) -> None:  # fmt: skip
    sa = start_server(tmp_path, 3600)  # [offload] deletion_lag_s = 0
    try:
        sa.admin("policies", "set", "public/default", "offload_deletion_lag_seconds=3600")
        policies = sa.admin("policies", "get", "public/default")
        assert policies["offload_deletion_lag_seconds"] == 3600, policies
        sent = produce(sa.bootstrap)
        rows = sa.admin("topics", "offload", TOPIC)
        assert rows[0]["ledgers_offloaded"] >= 3, rows
        # every offloaded ledger is still on bookies: the namespace's lag has not passed
        assert rows[0]["ledgers_on_bookies"] == rows[0]["ledgers"], rows

        admin = AdminClient({"bootstrap.servers": sa.bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("offload.deletion.lag.ms", "0",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        rows = sa.admin("topics", "offload", TOPIC)
        assert rows[0]["ledgers_on_bookies"] == 1, rows  # the open ledger only: copies gone
        assert consume_all(sa.bootstrap, len(sent)) == sent

        with pytest.raises(AssertionError):  # not an integer: refused
            sa.admin("policies", "set", "public/default", "offload_deletion_lag_seconds=x")
    finally:
        sa.stop()


@pytest.mark.timeout(300)
def test_a_namespace_offloads_to_its_own_directory(tmp_path: Path) -> None:
    sa = start_server(tmp_path, 3600)  # [offload] directory = tmp_path / "tier"
    try:
        own = tmp_path / "namespace-tier"
        sa.admin("policies", "set", "public/default", f"offload_directory={own}")
        sent = produce(sa.bootstrap)
        rows = sa.admin("topics", "offload", TOPIC)
        assert rows[0]["ledgers_offloaded"] >= 3 and rows[0]["ledgers_on_bookies"] == 1, rows
        assert len(list(own.rglob("*.lwo"))) == rows[0]["ledgers_offloaded"]
        assert list((tmp_path / "tier").rglob("*.lwo")) == []
        # the bookie copies are gone: every record comes from the namespace's directory,
        # also once the namespace points elsewhere again (each record says where it went)
        sa.admin("policies", "set", "public/default", f"offload_directory={tmp_path / 'x'}")
        sa.restart()
        assert consume_all(sa.bootstrap, len(sent)) == sent
    finally:
        sa.stop()
