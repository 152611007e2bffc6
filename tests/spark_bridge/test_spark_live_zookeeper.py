"""Reading a live partition through ZooKeeper metadata while its writer keeps writing.

A real ZooKeeper server; three bookie servers (E=3, Qw=2, Qa=2) and a managed ledger writer
run in a Trio thread of this process. Spark reads with `ledgerwire.metadata=zk://...`: every
acknowledged batch, including the last one (past the bookies' LAC: the quorum rule), and the
writer's next appends still succeed, so the reader fenced nothing. The bookies authenticate
their connections: Spark reads with `ledgerwire.bookieSecretFile`, and without it reads nothing."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.zookeeper import ZooKeeperServer

from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.record_batch import build_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS_PER_BATCH = 4
SECRET = "live-log-bookie-secret-0123"


class LiveLog:
    """One partition's managed ledger, written from a Trio loop in a thread."""

    def __init__(self, url: str, secret_file: Path) -> None:
        self.url = url
        self.secret_file = secret_file
        self.next_offset = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None or self._token is None:
            raise RuntimeError(f"live log did not start: {self._error!r}")

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        store = await open_store(self.url)
        secret = BookieSecret(SECRET.encode())
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    await nursery.start(lambda task_status: serve_bookie(
                        MemoryBookieStorage(), store, "127.0.0.1", 0, secret=secret,
                        task_status=task_status))  # fmt: skip
                # No explicit LAC: the tail-rule test needs the bookies' LAC to trail the
                # last entry, as it does while adds keep coming.
                async with BookKeeper(store, explicit_lac_delay_s=0, bookie_secret=secret) as bk:
                    factory = ManagedLedgerFactory(store, bk)
                    self.ml = await factory.open("public/default/live-0", ManagedLedgerConfig(
                        ensemble_size=3, write_quorum=2, ack_quorum=2,
                        max_entries_per_ledger=10))
                    topic = {"format": 1, "topic_id": str(uuid.uuid4()), "partitions": 1,
                             "configs": {}}  # fmt: skip
                    await store.create("/ledgerwire/topics/live", json.dumps(topic).encode(),
                                       make_parents=True)  # fmt: skip
                    self._stop = trio.Event()
                    self._token = trio.lowlevel.current_trio_token()
                    self._ready.set()
                    await self._stop.wait()
                    await self.ml.close()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await store.close()

    def append(self, batches: int) -> None:
        async def append() -> None:
            for _ in range(batches):
                base = self.next_offset
                pairs = [(b"k", f"v{base + i}".encode()) for i in range(RECORDS_PER_BATCH)]
                await self.ml.append(build_batch(pairs, base_offset=base))
                self.next_offset += RECORDS_PER_BATCH

        trio.from_thread.run(append, trio_token=self._token)

    def close(self) -> None:
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveLog]:
    secret_file = Path(tmp_path_factory.mktemp("secret")) / "bookie.secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    with ZooKeeperServer(Path(tmp_path_factory.mktemp("zk"))) as zk:
        log = LiveLog(zk.store_url("/lw"), secret_file)
        try:
            yield log
        finally:
            log.close()


def _offsets(spark: Any, live: LiveLog) -> list[int]:
    df = (spark.read.format("ledgerwire").option("ledgerwire.metadata", live.url)
          .option("ledgerwire.bookieSecretFile", str(live.secret_file))
          .option("subscribe", "live").load())  # fmt: skip
    rows = df.select("offset", "value").collect()
    assert all(bytes(r["value"]) == f"v{r['offset']}".encode() for r in rows)
    return sorted(r["offset"] for r in rows)


def test_reads_an_open_ledger_to_its_last_acknowledged_batch(spark: Any, live: LiveLog) -> None:
    live.append(25)  # ledgers of 10, 10 and an open one holding 5 entries
    assert _offsets(spark, live) == list(range(100))
    live.append(5)  # the writer was not fenced by the reads
    assert _offsets(spark, live) == list(range(120))


def test_quorum_tail_rule_goes_one_past_the_lac(live: LiveLog) -> None:
    from spark_bridge.ledger_access import LedgerAccess
    from spark_bridge.metadata_access import resolve_connection
    from spark_bridge.topic_layout import partition_layout

    spec = resolve_connection(live.url, {"ledgerwire.bookieSecretFile": str(live.secret_file)})
    with LedgerAccess(spec, "bookies", tail="lac") as lac_reader, \
            LedgerAccess(spec, "bookies", tail="quorum") as quorum_reader:  # fmt: skip
        by_lac = partition_layout(lac_reader, "live", 0)
        by_quorum = partition_layout(quorum_reader, "live", 0)
    assert not by_quorum.ledgers[-1].closed
    assert by_quorum.end_offset == live.next_offset
    assert by_lac.ledgers[-1].last_entry == by_quorum.ledgers[-1].last_entry - 1


def test_without_the_bookie_secret_nothing_is_read(live: LiveLog) -> None:
    from ledger_backend.client.errors import LedgerError
    from spark_bridge.ledger_access import LedgerAccess
    from spark_bridge.metadata_access import resolve_connection
    from spark_bridge.topic_layout import partition_layout

    live.append(1)
    with LedgerAccess(resolve_connection(live.url), "bookies", timeout_s=30) as anonymous, \
            pytest.raises((LedgerError, ExceptionGroup)) as refused:  # fmt: skip
        partition_layout(anonymous, "live", 0)  # parallel reads fail as a group
    errors = (refused.value.exceptions if isinstance(refused.value, ExceptionGroup)
              else (refused.value,))  # fmt: skip
    assert all(isinstance(e, LedgerError) and "UNAUTHORIZED" in str(e) for e in errors), \
        [repr(e) for e in errors]
