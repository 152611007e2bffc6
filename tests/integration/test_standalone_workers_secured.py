"""The secured admin listener of `ledgerwire standalone --workers 2`: the supervisor's one
listener refuses callers without valid credentials, lets the ACLs refuse a user without
rights, and answers an authenticated operator for the whole node (both workers' brokers,
/metrics and /ready of both workers).  The workers check the credentials the supervisor
forwards; SASL users and ACLs live in the shared metadata store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_standalone_workers import WORKERS, WorkersStandalone, serving
from tests.operations.test_admin_secured_standalone import http, wait_for_admin
from tests.support.secured_standalone import secured_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[WorkersStandalone]:
    server = WorkersStandalone(tmp_path / "data")
    server.extra_args += ["--config", str(secured_config(tmp_path))]
    with serving(server):
        wait_for_admin(server)
        yield server


def test_two_worker_admin_listener_needs_credentials_and_answers_for_the_node(
        node: WorkersStandalone) -> None:
    base = f"http://127.0.0.1:{node.admin_port}"
    for method, path in [("GET", "/admin/v1/topics"), ("GET", "/admin/v1/brokers"),
                         ("PUT", "/admin/v1/topics/secret"), ("GET", "/metrics")]:
        body = {"partitions": 2} if method == "PUT" else None
        assert http(base + path, method, body)[0] == 401, path
        assert http(base + path, method, body, user="admin", password="wrong")[0] == 401, path
    assert http(f"{base}/admin/v1/topics/secret", "PUT", {"partitions": 2},
                user="mallory")[0] == 403

    assert http(f"{base}/admin/v1/topics/secret", "PUT", {"partitions": 2},
                user="admin")[0] == 201
    status, topics = http(f"{base}/admin/v1/topics", user="admin")
    assert status == 200 and "secret" in [t["topic"] for t in topics], topics
    status, brokers = http(f"{base}/admin/v1/brokers", user="admin")
    assert status == 200 and sorted(b["broker_id"] for b in brokers) == list(range(WORKERS))
    status, metrics = http(f"{base}/metrics", user="admin")
    assert status == 200, metrics
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    assert sorted(s.labels["worker"] for s in families["ledgerwire_start_time_seconds"].samples
                  ) == [str(i) for i in range(WORKERS)]
    assert http(f"{base}/ready") == (200, {"ready": True, "workers": {
        str(i): "ready" for i in range(WORKERS)}})
    assert "admin request refused" in node.full_log()
    assert "admin-pw" not in node.full_log()
