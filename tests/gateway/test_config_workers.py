"""`workers` (standalone --workers N): what the setting accepts, and what each worker gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.loading import load_config
from gateway.config.settings import ConfigError
from gateway.process.supervisor import cluster_layout, worker_config


def test_workers_default_to_one_process() -> None:
    assert load_config(None).worker_count() == 1


def test_workers_from_toml_flag_and_auto(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("workers = 3\n")
    assert load_config(path).worker_count() == 3
    assert load_config(path, {"workers": "2"}).worker_count() == 2  # the flag wins
    assert load_config(None, {"workers": "auto"}).worker_count() >= 1


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", True])
def test_bad_worker_counts_are_refused(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f"workers = {str(bad).lower() if isinstance(bad, bool) else repr(bad)}\n")
    with pytest.raises(ConfigError):
        load_config(path)


def test_each_worker_gets_its_node_id_and_port_and_a_private_admin_socket() -> None:
    config = load_config(None, {"kafka.listener": "127.0.0.1:9092", "kafka.broker_id": 5,
                                "admin.listener": "127.0.0.1:8080", "workers": "3",
                                "rocketmq.broker_listener": "127.0.0.1:10911",
                                "rocketmq.grpc_listener": "127.0.0.1:8081",
                                "rocketmq.name_server_listener": "127.0.0.1:9876"})
    workers = [worker_config(config, i, f"/d/admin-{i}.sock", 16) for i in range(3)]
    assert [w.kafka.listener for w in workers] == ["127.0.0.1:9092", "127.0.0.1:9093",
                                                   "127.0.0.1:9094"]
    assert [w.kafka.broker_id for w in workers] == [5, 6, 7]
    assert [w.admin_listener() for w in workers] == [f"unix:/d/admin-{i}.sock" for i in range(3)]
    assert not any(w.admin_tls() for w in workers)  # the supervisor's listener has the TLS
    assert all(w.worker_count() == 1 and w.rocketmq.enabled for w in workers)
    # RocketMQ: bundle b of worker i on base + 16 i + b; one name server port for the node
    assert [w.rocketmq.broker_listener for w in workers] == [
        "127.0.0.1:10911", "127.0.0.1:10927", "127.0.0.1:10943"]
    assert [w.rocketmq.grpc_listener for w in workers] == [
        "127.0.0.1:8081", "127.0.0.1:8097", "127.0.0.1:8113"]
    assert {w.rocketmq.name_server_listener for w in workers} == {"127.0.0.1:9876"}
    assert config.admin_listener() == "127.0.0.1:8080"
    assert config.kafka.listener == "127.0.0.1:9092"  # the node's own config is untouched
    assert cluster_layout(config, 3).bundles >= 12


def test_workers_do_not_probe_each_others_kafka_ports() -> None:
    # the shared store ends a dead worker's session when its socket closes: a refused port
    # tells nothing sooner, and each probe costs both workers a connection
    config = load_config(None, {"workers": "2"})
    assert config.cluster.expel_refusing_brokers  # a cluster broker's default is untouched
    workers = [worker_config(config, i, f"/d/admin-{i}.sock", 16) for i in range(2)]
    assert not any(w.cluster.expel_refusing_brokers for w in workers)
