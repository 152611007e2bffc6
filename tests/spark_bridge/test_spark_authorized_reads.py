"""Authorized reads (issue 27): on a SASL standalone with ACLs on and a bookie secret, a Spark
read that names a principal gets the brokers' answer first -- alice, with READ on one topic,
reads it; she is refused the other topic by spark.read and by `ledgerwire replay` (one line,
before any Spark job), and a wrong password is refused at login. Her job's executors hold
neither her password nor the bookie secret: only a read ticket the broker issued for her
topic's ledgers, which the bookies refuse for any other ledger; their splits carry the
ledgers' metadata, so they open no metadata store (nor need its credentials). A streaming read
does the same with tickets the driver renews: a ledger created after a ticket, or a ticket
past half its TTL, gets a new one, carried by each micro-batch's splits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from support.standalone import Standalone

from spark_bridge.cli import backfill_main, replay_main
from tests.support.secured_standalone import PASSWORDS, secured_standalone

pytestmark = [pytest.mark.integration]

GRANTED, GUARDED, FILLED, STREAMED = "granted", "guarded", "filled", "streamed"


def _as(user: str, password: str | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password or PASSWORDS[user]}  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    home = tmp_path_factory.mktemp("spark-acls")
    (home / "bookie.secret").write_text("spark-acls-bookie-secret-0123\n")
    (home / "bookie.secret").chmod(0o600)
    sa = secured_standalone(home, extra='delegation_token_secret_key = "spark-acls-token-key-01"\n'
                                         f'[storage]\nbookie_secret_file = '
                                         f'"{home / "bookie.secret"}"\n'
                                         'max_entries_per_ledger = 20')  # ledgers roll
    sa.start()
    try:
        admin = AdminClient({"bootstrap.servers": sa.bootstrap, **_as("admin")})
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in (GRANTED, GUARDED)]
                                          ).values():  # fmt: skip
            future.result(30)
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in (FILLED, STREAMED)]
                                          ).values():  # fmt: skip
            future.result(30)
        for future in admin.create_acls([AclBinding(
                ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                operation, AclPermissionType.ALLOW) for topic, operation in (
                    (GRANTED, AclOperation.READ), (FILLED, AclOperation.READ),
                    (STREAMED, AclOperation.READ),
                    (FILLED, AclOperation.WRITE))]).values():  # fmt: skip
            future.result(30)
        producer = Producer({"bootstrap.servers": sa.bootstrap, **_as("admin")})
        for i in range(200):
            for topic in (GRANTED, GUARDED):
                producer.produce(topic, b"v%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        del producer, admin  # no client left retrying the stopped broker
        yield sa
    finally:
        sa.stop()


def _read(spark: Any, sa: Standalone, topic: str, **kafka: str) -> Any:
    return (spark.read.format("ledgerwire").option("ledgerwire.metadata", str(sa.data_dir))
            .option("subscribe", topic).option("kafka.bootstrap.servers", sa.bootstrap)
            .option("kafka.security.protocol", "SASL_PLAINTEXT")
            .option("ledgerwire.adminUrl", f"http://127.0.0.1:{sa.admin_port}")
            .option("kafka.sasl.mechanism", "PLAIN").options(**kafka).load())  # fmt: skip


def _jaas(user: str, password: str) -> dict[str, str]:
    return {"kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                      f'required username="{user}" password="{password}";'}


def test_a_principal_reads_only_what_its_acls_allow(spark: Any, secured: Standalone) -> None:
    assert _read(spark, secured, GRANTED, **_jaas("alice", PASSWORDS["alice"])).count() == 200
    with pytest.raises(Exception, match="User:alice may not read topic 'guarded'"):
        _read(spark, secured, GUARDED, **_jaas("alice", PASSWORDS["alice"])).count()
    with pytest.raises(Exception, match="refused the login of User:alice"):
        _read(spark, secured, GRANTED, **_jaas("alice", "wrong")).count()
    with pytest.raises(Exception, match="kafka.sasl.jaas.config"):
        _read(spark, secured, GRANTED).count()  # SASL named but no credentials


def test_replay_refuses_an_unauthorized_topic_in_one_line(
        secured: Standalone, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "alice.pw"
    secret.write_text(PASSWORDS["alice"] + "\n")
    code = replay_main(["--topic", GUARDED, "--to", str(tmp_path / "out"),
                        "--metadata", str(secured.data_dir), "--user", "alice",
                        "--password-file", str(secret), "--sasl-mechanism", "PLAIN",
                        "--bootstrap-servers", secured.bootstrap, "--master", "local[1]"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "ledgerwire replay: User:alice may not read topic 'guarded' (no READ in the cluster's "
        "ACLs)"] or "may not read topic 'guarded'" in err.strip().splitlines()[-1], err
    assert not (tmp_path / "out").exists()


def test_the_executors_hold_only_a_ticket_for_the_granted_ledgers(secured: Standalone) -> None:
    """What Spark ships to the executors (the pickled reader and data source) has no password
    and no bookie secret, only a ticket; with it GRANTED's ledgers read and GUARDED's are
    refused by the bookie; nothing at all reads without it; alice gets no GUARDED ticket."""
    from pyspark import cloudpickle

    from ledger_backend.client.errors import LedgerError
    from spark_bridge.authorization import AuthorizationError, read_principal
    from spark_bridge.ledger_access import LedgerAccess
    from spark_bridge.metadata_access import resolve_connection
    from spark_bridge.read_tickets import obtain_read_ticket
    from spark_bridge.reader import LedgerwireBatchReader
    from spark_bridge.source import LedgerwireDataSource

    options = {"ledgerwire.metadata": str(secured.data_dir), "subscribe": GRANTED,
               "kafka.bootstrap.servers": secured.bootstrap,
               "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
               "ledgerwire.adminUrl": f"http://127.0.0.1:{secured.admin_port}",
               **_jaas("alice", PASSWORDS["alice"])}  # fmt: skip
    source = LedgerwireDataSource(dict(options))
    reader = source.reader(None)  # type: ignore[arg-type]
    assert isinstance(reader, LedgerwireBatchReader)
    shipped = cloudpickle.dumps((source, reader))
    assert PASSWORDS["alice"].encode() not in shipped
    assert b"spark-acls-bookie-secret" not in shipped and b"bookie.secret" not in shipped
    ticket = reader.opts.spec.read_ticket
    assert ticket is not None and ticket.encode() in shipped
    # the executors' copy reads every split from the bookies alone: its splits carry their
    # ledgers' metadata, so a metadata address that answers nothing changes nothing
    executor = cloudpickle.loads(shipped)[1]
    executor.opts = replace(executor.opts, spec=replace(executor.opts.spec,
                                                        metadata_url="zk://127.0.0.1:9/none"))
    splits = cloudpickle.loads(cloudpickle.dumps(reader.partitions()))
    assert len(splits) >= 2 and all(s.ledgers for s in splits)
    assert sum(b.num_rows for s in splits for b in executor.read(s)) == 200

    alice = read_principal(options)
    assert alice is not None
    with pytest.raises(AuthorizationError, match="User:alice may not read topics guarded"):
        obtain_read_ticket(f"http://127.0.0.1:{secured.admin_port}", alice, [GUARDED])

    def first_ledger(access: LedgerAccess, topic: str) -> int:
        from ledger_backend.managed_ledger.metadata_format import (
            decode_managed_ledger,
            managed_ledger_path,
        )
        path = managed_ledger_path("/ledgerwire/managed-ledgers", f"public/default/{topic}-0")
        raw = access.get(path)
        assert raw is not None
        return decode_managed_ledger(raw, path).ledgers[0].ledger_id

    base = resolve_connection(str(secured.data_dir))
    with LedgerAccess(replace(base, read_ticket=ticket), "bookies", timeout_s=5) as access:
        granted, guarded = first_ledger(access, GRANTED), first_ledger(access, GUARDED)
        assert access.read(granted, 0, 0)  # the ticket's own ledger reads
        with pytest.raises(LedgerError):
            access.read(guarded, 0, 0)  # the bookie refuses the other topic's
    with LedgerAccess(base, "bookies", timeout_s=5) as bare, pytest.raises(LedgerError):
        bare.read(granted, 0, 0)  # no credential at all: refused too


def test_backfill_as_a_principal_needs_write(
        spark: Any, secured: Standalone, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """alice (READ only on GRANTED) is refused a backfill into it in one line before any job;
    into FILLED (WRITE and READ) her backfill writes every row (the test's Spark session is
    reused: no JVM start), its resume scan reading with a read ticket."""
    secret = tmp_path / "alice.pw"
    secret.write_text(PASSWORDS["alice"] + "\n")
    source = tmp_path / "rows.json"
    source.write_text("".join(f'{{"value": "row {i}"}}\n' for i in range(40)))
    args = ["--from", str(source), "--metadata", str(secured.data_dir), "--user", "alice",
            "--password-file", str(secret), "--sasl-mechanism", "PLAIN",
            "--bootstrap-servers", secured.bootstrap, "--master", "local[1]", "--no-ui",
            "--admin-url", f"http://127.0.0.1:{secured.admin_port}"]  # fmt: skip
    assert backfill_main([*args, "--topic", GRANTED]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == ("ledgerwire backfill: User:alice may not write "
                                            "topic 'granted' (no WRITE in the cluster's ACLs)")
    assert backfill_main([*args, "--topic", FILLED]) == 0, capsys.readouterr().err
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "filled-check",
                         **_as("admin")})  # fmt: skip
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(FILLED, 0), timeout=30)
    finally:
        consumer.close()
    assert (low, high) == (0, 40)


def _produce_entries(sa: Standalone, topic: str, first: int, count: int) -> None:
    """`count` records to partition 0, one entry each (a flush per record), so a ledger
    rolls every 20 of them (the fixture's max_entries_per_ledger)."""
    producer = Producer({"bootstrap.servers": sa.bootstrap, "linger.ms": 0, **_as("admin")})
    for i in range(first, first + count):
        producer.produce(topic, b"s%d" % i, partition=0)
        assert producer.flush(30) == 0


def _stream_options(sa: Standalone, topic: str, **extra: str) -> dict[str, str]:
    return {"ledgerwire.metadata": str(sa.data_dir), "subscribe": topic,
            "startingOffsets": "earliest", "kafka.bootstrap.servers": sa.bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
            "ledgerwire.adminUrl": f"http://127.0.0.1:{sa.admin_port}",
            "ledgerwire.bookieSecretFile": str(sa.data_dir.parent / "bookie.secret"),
            **_jaas("alice", PASSWORDS["alice"]), **extra}  # fmt: skip


def _ledgers_of(ticket: str) -> frozenset[int]:
    from ledger_backend.bookie.read_ticket import ReadTicket
    return ReadTicket.decode(ticket).scope.ledgers


def test_a_stream_reads_with_tickets_the_driver_renews(secured: Standalone) -> None:
    """The stream reader as Spark drives it, without a JVM: what is shipped holds no password
    and no secret (not even the secret file's path, though the option named it); micro-batch
    splits carry a ticket; a ledger created after the first ticket gets a new ticket naming it
    (the first one is refused that ledger by the bookie); once a ticket has expired the bookie
    refuses it, and the next micro-batch's splits carry a fresh one."""
    from pyspark import cloudpickle
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from ledger_backend.client.errors import LedgerError
    from spark_bridge.ledger_access import LedgerAccess
    from spark_bridge.metadata_access import resolve_connection
    from spark_bridge.source import LedgerwireDataSource
    from spark_bridge.stream_reader import StreamSplit

    _produce_entries(secured, STREAMED, 0, 30)  # ledgers: 20 entries, then an open one
    source = LedgerwireDataSource(_stream_options(secured, STREAMED,
                                                  **{"ledgerwire.readTicketTtl": "10"}))
    driver = source.streamReader(None)  # type: ignore[arg-type]
    shipped = cloudpickle.dumps((source, driver))
    assert PASSWORDS["alice"].encode() not in shipped
    assert b"bookie.secret" not in shipped and b"spark-acls-bookie-secret" not in shipped
    executor = cloudpickle.loads(shipped)[1]  # reads bookies only (no metadata store):
    executor.opts = replace(executor.opts, spec=replace(executor.opts.spec,  # none answers
                                                        metadata_url="zk://127.0.0.1:9/none"))

    def batch(start: dict, end: dict) -> tuple[list[bytes], set[str]]:
        parts = cloudpickle.loads(cloudpickle.dumps(driver.partitions(start, end)))
        assert parts and all(isinstance(p, StreamSplit) and p.read_ticket for p in parts)
        values = [v.as_py() for part in parts for b in executor.read(part)
                  for v in b.column("value")]  # fmt: skip
        return values, {p.read_ticket for p in parts}

    try:
        start = driver.initialOffset()
        end = driver.latestOffset(start, ReadAllAvailable())
        values, tickets = batch(start, end)
        assert values == [b"s%d" % i for i in range(30)]
        (first,) = tickets
        _produce_entries(secured, STREAMED, 30, 30)  # rolls to ledgers the ticket lacks
        later = driver.latestOffset(end, ReadAllAvailable())
        values, tickets = batch(end, later)
        assert values == [b"s%d" % i for i in range(30, 60)]
        (second,) = tickets
        new = _ledgers_of(second) - _ledgers_of(first)
        assert new, "no ledger was created after the first ticket"
        base = resolve_connection(str(secured.data_dir))
        with LedgerAccess(replace(base, read_ticket=first), "bookies", timeout_s=5) as old, \
                pytest.raises(LedgerError):  # fmt: skip
            old.read(min(new), 0, 0)

        from ledger_backend.bookie.read_ticket import ReadTicket
        expires_s = ReadTicket.decode(second).scope.expires_ms / 1000
        import time
        while time.time() < expires_s + 0.5:  # let the ticket expire (a 10 s TTL)
            time.sleep(0.2)
        with LedgerAccess(replace(base, read_ticket=second), "bookies", timeout_s=5) as old, \
                pytest.raises(LedgerError):  # fmt: skip
            old.read(min(new), 0, 0)
        values, tickets = batch(end, later)  # the same micro-batch planned again
        assert values == [b"s%d" % i for i in range(30, 60)] and second not in tickets
    finally:
        driver.stop()
    # without a principal the secret file still serves driver and executors (no tickets)
    plain = LedgerwireDataSource({"ledgerwire.metadata": str(secured.data_dir),
                                  "subscribe": STREAMED, "startingOffsets": "earliest",
                                  "ledgerwire.bookieSecretFile":
                                      str(secured.data_dir.parent / "bookie.secret")}
                                 ).streamReader(None)  # type: ignore[arg-type]
    try:
        start = plain.initialOffset()
        parts = plain.partitions(start, plain.latestOffset(start, ReadAllAvailable()))
        assert parts and all(p.read_ticket is None for p in parts)
        assert [v.as_py() for part in cloudpickle.loads(cloudpickle.dumps(parts))
                for b in plain.read(part) for v in b.column("value")
                ] == [b"s%d" % i for i in range(60)]  # fmt: skip
    finally:
        plain.stop()

