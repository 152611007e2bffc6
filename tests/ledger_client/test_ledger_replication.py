"""Replication with real processes: bookies (`python -m ledger_backend.bookie`, durable storage,
fsync on) and a writer in subprocesses, sharing a real ZooKeeper. SIGKILL is the failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
from ledger_backend.metadata import MetadataStore, open_store
from tests.ledger_client.ledger_writer_process import entry_payload
from tests.support.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WRITER_SCRIPT = Path(__file__).with_name("ledger_writer_process.py")


class BookieProcess:
    def __init__(self, tmp: Path, index: int, metadata_url: str) -> None:
        self.log_path = tmp / f"bookie-{index}.log"
        self.bookie_id = f"test-bookie-{index}"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ledger_backend.bookie", "--data-dir",
                 str(tmp / f"bookie-{index}"), "--port", "0", "--bookie-id", self.bookie_id,
                 "--metadata", metadata_url, "--log-level", "WARNING"],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            )  # fmt: skip
        self.address = self._wait_for_address()

    def _wait_for_address(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = re.search(r"listening on (\S+)", text)
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"bookie exited: {text}")
            time.sleep(0.05)
        raise TimeoutError(f"bookie did not start: {self.log_path.read_text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path / "zk") as zk:
        yield zk


@pytest.fixture
async def zk_store(zookeeper: ZooKeeperServer) -> AsyncIterator[MetadataStore]:
    store = await open_store(zookeeper.store_url())
    try:
        yield store
    finally:
        await store.close()


def start_bookies(tmp: Path, count: int, url: str) -> list[BookieProcess]:
    bookies: list[BookieProcess] = []
    try:
        for i in range(count):
            bookies.append(BookieProcess(tmp, i, url))
    except BaseException:
        for b in bookies:
            b.stop()
        raise
    return bookies


async def wait_registered(store: MetadataStore, addresses: list[str]) -> None:
    with trio.fail_after(30):
        while True:
            try:
                registered = set(await store.children(AVAILABLE_BOOKIES_PATH))
            except Exception:
                registered = set()
            if set(addresses) <= registered:
                return
            await trio.sleep(0.1)


async def test_sigkill_bookie_during_adds_changes_ensemble_and_keeps_acked(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_store: MetadataStore
) -> None:
    url = zookeeper.store_url()
    bookies = start_bookies(tmp_path, 4, url)  # a 4th so a replacement exists for E=3
    try:
        by_address = {b.address: b for b in bookies}
        await wait_registered(zk_store, list(by_address))
        acked: dict[int, bytes] = {}
        async with BookKeeper(zk_store, timeout_s=3) as bk:
            wh = await bk.create_ledger(3, 2, 2)
            victim = by_address[wh.metadata.current_ensemble[1]]
            limiter = trio.Semaphore(16)

            async def add(seq: int) -> None:
                payload = entry_payload(seq)
                acked[await wh.append(payload)] = payload
                limiter.release()

            async with trio.open_nursery() as nursery:
                for seq in range(600):
                    await limiter.acquire()
                    if seq == 200:
                        await trio.to_thread.run_sync(victim.kill)
                    nursery.start_soon(add, seq)
            assert wh.ensemble_changes >= 1
            assert victim.address not in wh.metadata.current_ensemble
            await wh.close()
        assert sorted(acked) == list(range(600))
        async with BookKeeper(zk_store, timeout_s=3) as reader_bk:
            rh = await reader_bk.open_ledger(wh.ledger_id, recovery=False)
            assert rh.is_closed and rh.last_add_confirmed == 599
            assert len(rh.metadata.ensembles) >= 2
            assert await rh.read(0, 599) == [acked[i] for i in range(600)]
    finally:
        for b in bookies:
            b.stop()


def start_writer(url: str, out_path: Path) -> subprocess.Popen[bytes]:
    with open(out_path, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(WRITER_SCRIPT), url, "32"], stdout=out,
            stderr=subprocess.DEVNULL, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip


def _acks(path: Path) -> tuple[int | None, dict[int, int]]:
    ledger_id = None
    acks: dict[int, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "LEDGER":
            ledger_id = int(parts[1])
        elif len(parts) == 3 and parts[0] == "ACK":
            acks[int(parts[1])] = int(parts[2])
    return ledger_id, acks


async def test_killed_writer_recovery_closes_at_or_after_last_ack(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_store: MetadataStore
) -> None:
    url = zookeeper.store_url()
    bookies = start_bookies(tmp_path, 3, url)
    writer_out = tmp_path / "writer.out"
    try:
        await wait_registered(zk_store, [b.address for b in bookies])
        writer = await trio.to_thread.run_sync(start_writer, url, writer_out)
        try:
            with trio.fail_after(60):
                while len(_acks(writer_out)[1]) < 300:
                    assert writer.poll() is None, "writer exited early"
                    await trio.sleep(0.05)
        finally:
            writer.send_signal(signal.SIGKILL)  # mid-stream: adds are in flight
            writer.wait(timeout=10)
        ledger_id, acks = _acks(writer_out)
        assert ledger_id is not None
        last_acked = max(acks)
        assert sorted(acks) == list(range(last_acked + 1))  # acks complete in order
        async with BookKeeper(zk_store, timeout_s=3) as bk:
            rh = await bk.open_ledger(ledger_id, recovery=True)
            assert rh.is_closed
            assert rh.last_add_confirmed >= last_acked
            entries = await rh.read(0, rh.last_add_confirmed)
            for entry_id, seq in acks.items():
                assert entries[entry_id] == entry_payload(seq)
            assert rh.metadata.length == sum(len(e) for e in entries)
            again = await bk.open_ledger(ledger_id, recovery=True)
            assert again.last_add_confirmed == rh.last_add_confirmed
    finally:
        for b in bookies:
            b.stop()
