"""Spark reads offloaded ledgers straight from tiered storage (issue 18): a standalone offloads
a topic's closed ledgers to a directory, or to moto's real S3 server, and deletes their bookie
copies at once; `spark.read.format("ledgerwire")` and `ledgerwire replay` given the store then
return every record (keys, null keys, values, headers, timestamps, offsets) exactly as
confluent-kafka acknowledged them; without the store the replay ends in one line naming the
ledger and the options to set."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.standalone import Standalone

from spark_bridge.cli import replay_main
from tests.offload.moto_server import moto_s3

pytestmark = [pytest.mark.integration]

TOPIC = "tiered"
RECORDS = 1500
Row = tuple[int, bytes | None, bytes, list[tuple[str, bytes]], int]


def _produce(bootstrap: str) -> list[Row]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "32768"})])[
        TOPIC].result(30)  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "lz4"})  # fmt: skip
    sent: list[Row] = []
    rng = random.Random(18)
    for i in range(RECORDS):
        key = None if i % 4 == 0 else b"k%d" % (i % 31)
        value = b"%d:" % i + rng.randbytes(rng.randrange(50, 300))  # ~40 ledgers of 32 KB
        headers = [("n", b"%d" % i)] if i % 3 == 0 else []
        ts = 1_700_000_000_000 + i

        def done(err: Any, msg: Any, row: tuple[Any, ...] = (key, value, headers, ts)) -> None:
            assert err is None, err
            sent.append((msg.offset(), *row))

        producer.produce(TOPIC, value, key, timestamp=ts, headers=headers or None,
                         on_delivery=done)  # fmt: skip
        if i % 500 == 499:
            producer.flush(30)
    assert producer.flush(30) == 0
    return sorted(sent)


@pytest.fixture(scope="module", params=["filesystem", "s3"])
def tiered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Standalone, dict[str, str], list[Row]]]:  # fmt: skip
    """A standalone whose topic's closed ledgers live only in the store; the reader options
    that name the store; the records produced."""
    tmp = tmp_path_factory.mktemp(f"tiered-{request.param}")
    with moto_s3("tier") if request.param == "s3" else _no_server() as endpoint:
        if endpoint:
            driver = (f'driver = "s3"\nbucket = "tier"\nprefix = "spark"\nendpoint = '
                      f'"{endpoint}"\naccess_key_id = "test"\nsecret_access_key = "test"\n')
            options = {"ledgerwire.offload.bucket": "tier", "ledgerwire.offload.prefix": "spark",
                       "ledgerwire.offload.endpoint": endpoint,
                       "ledgerwire.offload.accessKeyId": "test",
                       "ledgerwire.offload.secretAccessKey": "test"}  # fmt: skip
        else:
            driver = f'driver = "filesystem"\ndirectory = "{tmp / "tier"}"\n'
            options = {"ledgerwire.offload.directory": str(tmp / "tier")}
        config = tmp / "ledgerwire.toml"
        config.write_text(f"[offload]\n{driver}deletion_lag_s = 0\ninterval_s = 3600\n")
        config.chmod(0o600)
        sa = Standalone(tmp / "data", extra_args=["--config", str(config)])
        sa.start()
        try:
            sent = _produce(sa.bootstrap)
            rows = sa.admin("topics", "offload", TOPIC)
            assert rows[0]["ledgers_offloaded"] >= 2 and rows[0]["ledgers_on_bookies"] == 1, rows
            yield sa, options, sent
        finally:
            sa.stop()


class _no_server:  # noqa: N801 - stands where moto_s3(...) would
    def __enter__(self) -> str:
        return ""

    def __exit__(self, *exc: object) -> None:
        pass


def _rows(records: list[dict[str, Any]]) -> list[Row]:
    """Rows as _produce gives them; timestamps: datetimes (Spark) or int microseconds."""
    return sorted((r["offset"], None if r["key"] is None else bytes(r["key"]), bytes(r["value"]),
                   [(h["key"], bytes(h["value"])) for h in r["headers"] or []],
                   r["timestamp"] // 1000 if isinstance(r["timestamp"], int)
                   else round(r["timestamp"].timestamp() * 1000)) for r in records)  # fmt: skip


def test_spark_read_gets_offloaded_ledgers_from_the_store(spark: Any, tiered: Any) -> None:
    sa, options, sent = tiered
    df = (spark.read.format("ledgerwire").option("ledgerwire.metadata", str(sa.data_dir))
          .option("subscribe", TOPIC).option("includeHeaders", "true").options(**options)
          .load())  # fmt: skip
    assert _rows([r.asDict() for r in df.collect()]) == sent


def test_replay_reads_offloaded_ledgers_and_names_the_missing_store(
        spark: Any, tiered: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sa, options, sent = tiered
    base = ["--topic", TOPIC, "--metadata", str(sa.data_dir), "--include-headers",
            "--master", "local[2]", "--no-ui"]  # fmt: skip
    assert replay_main([*base, "--to", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "is offloaded to tiered storage" in err and "--offload-directory" in err, err
    flags: list[str] = []
    for name, value in options.items():
        option = name.rsplit(".", 1)[1]
        if option == "accessKeyId":
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", value)
        elif option == "secretAccessKey":
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", value)
        else:
            flags += [f"--offload-{option}", value]
    assert replay_main([*base, *flags, "--to", str(tmp_path / "out")]) == 0, \
        capsys.readouterr().err  # fmt: skip
    table = pq.read_table(tmp_path / "out")
    column = table.column("timestamp")  # INT96 (ns) or micros, as Spark chose to write it
    micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", micros)
    assert _rows(table.to_pylist()) == sent
