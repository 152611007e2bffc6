"""Bookie loss with E=3 Qw=2 Qa=2 on four bookies: writes continue through an ensemble
change, re-replication (automatic, or `ledgerwire recover` by hand) restores two copies of
every entry on the remaining bookies, and every entry stays readable after a second bookie
is killed. The automatic case runs on an open and on a secured cluster (bookie secret, ledger
password, ZooKeeper ACLs for an identity that logs in with SASL DIGEST-MD5 over ZooKeeper's TLS
port with client certificates: brokers, bookies, auto-recovery and the CLI): there,
re-replication presents the ledgers' keys, and an anonymous bookie client and an anonymous
kazoo client (or one with the cluster's password in the digest scheme) get nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.cluster_processes import Cluster
from tests.cluster.kafka_workload import ProduceRun, create_topic, read_topic, verify
from tests.cluster.ledger_check import check_ledgers
from tests.support.ledger_passwords import ledger_password_hashes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "events"
PARTITIONS = 4


def wait_acks(run: ProduceRun, count: int, since: float, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while run.acked_since(since) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {run.acked_since(since)} acks; errors {run.errors[-5:]}")
        time.sleep(0.1)


def _assert_closed_to_strangers(cluster: Cluster) -> None:
    """No read, add or fence on a real bookie without the secret; no znode for anonymous."""
    import socket

    from kazoo import exceptions as kz
    from kazoo.client import KazooClient

    from ledger_backend.bookie.frame_decoder import FrameDecoder
    from ledger_backend.bookie.protocol import (
        AddEntryRequest,
        ReadEntryRequest,
        Status,
        encode,
    )

    host, _, port = cluster.bookies[-1].bookie_id.rpartition(":")  # type: ignore[attr-defined]
    for request in (ReadEntryRequest(1, 1, 0), AddEntryRequest(2, 1, 0, -1, True, b"forged"),
                    ReadEntryRequest(3, 1, -1, fence=True)):  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(encode(request))
            answer = FrameDecoder(accept="responses").feed(raw.recv(1 << 16))
            assert [getattr(a, "status", None) for a in answer] == [Status.UNAUTHORIZED]
            assert raw.recv(1 << 16) == b""  # and the bookie hung up
    assert all(ledger_password_hashes(cluster.metadata_url))  # every ledger has a key
    anonymous = KazooClient(hosts=cluster.zk.connect_string, timeout=10)
    anonymous.start(timeout=20)
    try:
        for attempt in ("anonymous", "digest with the cluster's password"):
            if attempt != "anonymous":  # the nodes belong to sasl:<user>, not digest:<user>
                anonymous.add_auth("digest", cluster.zk_auth_file.read_text().strip())
            for path in ("/ledgerwire-test/ledgerwire/ledgers", "/ledgerwire-test/ledgerwire"):
                try:
                    anonymous.get_children(path)
                    raise AssertionError(f"{path} is readable {attempt}")
                except kz.NoAuthError:
                    pass
    finally:
        anonymous.stop()
        anonymous.close()


@pytest.mark.parametrize("secure", [False, True], ids=["open", "secured"])
def test_auto_recovery_after_bookie_loss(tmp_path: Path, secure: bool) -> None:
    with Cluster(tmp_path / "c", bookies=4, brokers=1, partitions=PARTITIONS,
                 lost_bookie_delay_s=1.0, open_ledger_grace_s=3.0, secure=secure,
                 zk_sasl_tls=secure) as cluster:
        secret = cluster.bookie_secret_file if secure else None
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        run = ProduceRun(cluster.bootstrap, TOPIC, "auto").start()
        try:
            wait_acks(run, 400, 0.0)
            victim = cluster.bookies[0]
            killed_at = time.monotonic()
            victim.kill()
            wait_acks(run, 400, killed_at)  # writes continue: ensemble change
        finally:
            run.stop()
        assert not run.errors, run.errors[:5]
        dead = {victim.bookie_id}  # type: ignore[attr-defined]
        deadline = time.monotonic() + 90
        while True:
            report = check_ledgers(cluster.metadata_url, dead, read=False, secret_file=secret)
            if not report.on_dead and not cluster.status()["underreplicated_ledgers"]:
                break
            assert time.monotonic() < deadline, (report, cluster.logs())
            time.sleep(0.5)
        verdict = verify(run.acked, read_topic(cluster.bootstrap, TOPIC, PARTITIONS))
        assert verdict.ok, verdict
        second = cluster.bookies[1]
        second.kill()
        report = check_ledgers(cluster.metadata_url, dead | {second.bookie_id},  # type: ignore[attr-defined]
                               secret_file=secret)  # fmt: skip
        assert not report.unreadable, report.unreadable
        assert report.entries >= 1
        if secure:
            _assert_closed_to_strangers(cluster)


def test_manual_recover_ledger_then_bookie(tmp_path: Path) -> None:
    with Cluster(tmp_path / "c", bookies=4, brokers=1, partitions=PARTITIONS,
                 autorecovery=False) as cluster:
        again = cluster.cli("cluster", "init")  # the brokers initialised it: a no-op now
        assert again.returncode == 0 and "already initialised" in again.stdout, again.stdout
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        run = ProduceRun(cluster.bootstrap, TOPIC, "manual").start()
        try:
            wait_acks(run, 400, 0.0)
        finally:
            run.stop()
        victim = cluster.bookies[2]
        dead = {victim.bookie_id}  # type: ignore[attr-defined]
        victim.kill()
        deadline = time.monotonic() + 30  # its registration goes with its session
        while victim.bookie_id in cluster.status()["bookies"]:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline
            time.sleep(0.3)
        on_dead = check_ledgers(cluster.metadata_url, dead, read=False).on_dead
        assert on_dead, "the victim held no ledger"

        one = cluster.cli("recover", "--ledger", str(on_dead[0]))
        assert one.returncode == 0, one.stdout + one.stderr
        shown = cluster.cli("ledgers", "show", str(on_dead[0]))
        assert shown.returncode == 0 and victim.bookie_id not in shown.stdout, (one.stdout, shown.stdout)  # type: ignore[attr-defined]  # noqa: E501
        assert on_dead[0] not in check_ledgers(cluster.metadata_url, dead, read=False).on_dead

        rest = cluster.cli("recover", "--bookie", victim.bookie_id)  # type: ignore[attr-defined]
        assert rest.returncode == 0, rest.stdout + rest.stderr
        assert "complete" in rest.stdout
        listed = cluster.cli("ledgers", "list")
        assert listed.returncode == 0 and victim.bookie_id not in listed.stdout  # type: ignore[attr-defined]

        verdict = verify(run.acked, read_topic(cluster.bootstrap, TOPIC, PARTITIONS))
        assert verdict.ok, verdict
        second = cluster.bookies[0]
        second.kill()
        report = check_ledgers(cluster.metadata_url, dead | {second.bookie_id})  # type: ignore[attr-defined]
        assert not report.unreadable, report.unreadable
        assert report.entries >= 1
