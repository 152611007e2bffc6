"""`ledgerwire backfill` and `ledgerwire replay`: the Spark bridge from the command line.

    ledgerwire backfill --from PATH --topic T [--format parquet|json|csv] [--key-column K]
                        [--timestamp-column TS] [--value-column V] [--backfill-id ID] ...
    ledgerwire replay --topic T --to PATH [--metadata DIR|zk://...] [--starting-offsets ...]

Both start a Spark session (local[*] unless --master), register the "ledgerwire" source, show
Spark's console progress bar while the job runs, and print a summary (rows, bytes, time).
`backfill_main(argv)` / `replay_main(argv)` return a process exit code (0 ok, 1 the job failed,
2 bad arguments or options); gateway/cli/main.py wires them in as subcommands.

Backfill ids: without --backfill-id the id is derived from the input path, the topic and the
column choices, so running the same command again after an interruption resumes it (the writer
skips what the first run wrote; see writer.py). A value column: --value-column, else a column
named "value", else every other column as one JSON object.

This module must never hold job logic of its own: it builds DataFrames and hands over to the
data source.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_bridge.authorization import AuthorizationError, check_write_access, read_principal
from spark_bridge.backfill_resume import PROGRESS_OPTION, encode_progress, scan_progress_job
from spark_bridge.job_tokens import (
    DEFAULT_MAX_LIFETIME_MS,
    DELEGATION_TOKEN_OPTION,
    EXECUTOR_CREDENTIALS_OPTION,
    JobToken,
    create_job_token,
    expire_job_token,
)
from spark_bridge.parquet_backfill import backfill_parquet, plan_parquet
from spark_bridge.parquet_replay import local_bytes, replay_to_parquet, writes_locally
from spark_bridge.preflight import PreflightError, check_master, check_metadata, check_read
from spark_bridge.progress import Progress
from spark_bridge.spark_session import (
    RunLog,
    failure_line,
    output_bytes,
    start_session,
    ui_address,
)

DEFAULT_METADATA = "./data"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _summary(what: str, rows: int, nbytes: int, measured: str, seconds: float,
             extra: str = "", spark_start_s: float = 0.0) -> str:
    """The closing line; `measured` says what `nbytes` counts (a replay's Parquet files are
    compressed: their size says little of the data read); the rates are the job's own
    (`seconds` after Spark started)."""
    rate = rows / seconds if seconds > 0 else 0.0
    mib_s = nbytes / seconds / (1 << 20) if seconds > 0 else 0.0
    started = f", Spark start {spark_start_s:.1f} s" if spark_start_s > 0.05 else ""
    return (f"{what}: {rows} rows in {seconds:.1f} s ({rate:,.0f} rows/s{started}); "
            f"{measured}: {nbytes / (1 << 20):.1f} MiB ({mib_s:.1f} MiB/s){extra}")


def _report_failure(command: str, exc: BaseException, log: RunLog) -> int:
    """One line for a failed job (option errors exit 2, anything else 1); the whole stack
    goes to the run's log file, which the line names."""
    log.write_stack(exc)
    line, code = failure_line(exc)
    where = "" if log.verbose else f" (details: {log.path})"
    print(f"ledgerwire {command}: {line}{where}", file=sys.stderr)
    return code


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[*]",
                   help="Spark master: local[*] (default), spark://host:7077, yarn, ...")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's own output and stacks on stderr (default: a log file)")
    p.add_argument("--log-file", help="where Spark's output and stacks go (default: a new "
                   "file in the temp directory, named in any error)")
    p.add_argument("--progress-interval", type=float, help="seconds between progress lines "
                   "(default: 1 on a terminal, rewritten in place; 30 otherwise)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for this run (repeatable), e.g. "
                   "spark.executor.memory=2g")
    p.add_argument("--no-ship-code", dest="ship_code", action="store_false",
                   help="do not add the bridge's own code (a zip) to the job: every worker's "
                   "Python must then have ledgerwire installed")
    p.add_argument("--no-ui", dest="ui", action="store_false",
                   help="do not start Spark's web UI (its address is printed otherwise)")


# ---- backfill ------------------------------------------------------------------------------

def backfill_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ledgerwire backfill",
                                description="write a Parquet/JSON/CSV dump into a topic")
    add_backfill_arguments(p)
    return p


def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    """The backfill flags (for gateway/commands: add_arguments)."""
    p.add_argument("--from", dest="source", required=True, help="input file or directory")
    p.add_argument("--format", choices=["parquet", "json", "csv"],
                   help="input format (default: from the file extension, else parquet)")
    p.add_argument("--topic", required=True)
    p.add_argument("--key-column")
    p.add_argument("--timestamp-column")
    p.add_argument("--value-column")
    p.add_argument("--partition-column")
    p.add_argument("--headers-column")
    p.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP)
    p.add_argument("--metadata", default=DEFAULT_METADATA,
                   help="ledgerwire standalone data dir or zk://... (to resume a backfill)")
    p.add_argument("--backfill-id", help="restart id (default: derived from the arguments)")
    p.add_argument("--partitions", type=int,
                   help="create the topic with this many partitions if it does not exist")
    p.add_argument("--compression", default="lz4",
                   choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--tasks", type=int, help="repartition the input into this many tasks")
    auth = _add_principal_arguments(
        p, "write as a Kafka principal: the brokers check WRITE on the topic before the job "
           "starts, and every produce (the resume scan reads the topic as that principal: "
           "READ); the executors' producers log in with a delegation token the driver "
           "obtains and expires when the job ends, never with the password")
    auth.add_argument("--executor-credentials", choices=["token", "password"], default="token",
                      help="password: send the password to the executors (brokers without "
                           "delegation tokens)")
    auth.add_argument("--token-max-lifetime-ms", type=int, default=DEFAULT_MAX_LIFETIME_MS,
                      help="the executors' delegation token lives at most this long "
                           "(default: %(default)s)")
    _add_run_arguments(p)


def _add_principal_arguments(p: argparse.ArgumentParser, what: str) -> Any:
    auth = p.add_argument_group("authorization", f"{what} (kafka.sasl.* options)")
    auth.add_argument("--user", help="SASL user name")
    auth.add_argument("--password-file", help="file holding the user's password")
    auth.add_argument("--sasl-mechanism", default="SCRAM-SHA-512",
                      choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    auth.add_argument("--security-protocol", default="SASL_PLAINTEXT",
                      choices=["SASL_PLAINTEXT", "SASL_SSL"])
    auth.add_argument("--admin-url",
                      help="a broker's admin API (http://host:port): the executors then read "
                           "with a read ticket it issues, not the password or the bookie "
                           "secret (ledgerwire.adminUrl)")
    return auth


def _principal_options(args: argparse.Namespace) -> dict[str, str]:
    """Spark's Kafka options naming the --user principal ({} without --user)."""
    if not args.user:
        return {}
    return {"kafka.bootstrap.servers": args.bootstrap_servers,
            "kafka.security.protocol": args.security_protocol,
            "kafka.sasl.mechanism": args.sasl_mechanism, "kafka.sasl.username": args.user,
            "kafka.sasl.password": _read_secret(args.password_file)}  # fmt: skip


def _infer_format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    return {".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv"}.get(
        suffix, "parquet")


def default_backfill_id(args: argparse.Namespace) -> str:
    source = args.source if "://" in args.source else str(Path(args.source).resolve())
    basis = json.dumps([source, args.topic, args.key_column,
                        args.timestamp_column, args.value_column, args.partition_column,
                        args.headers_column, args.tasks])  # fmt: skip
    return "bf-" + hashlib.sha256(basis.encode()).hexdigest()[:16]


def _ensure_topic(bootstrap: str, topic: str, partitions: int | None,
                  login: dict[str, str]) -> None:  # fmt: skip
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 0, **login,
                                "logger": logging.getLogger("ledgerwire.backfill.admin")}
    admin = AdminClient(settings)  # the logger is a real setting its stubs do not know
    try:
        metadata = admin.list_topics(timeout=5)
    except KafkaException as exc:
        raise SystemExit(f"ledgerwire backfill: cannot reach the brokers at {bootstrap} "
                         f"within 5 s ({exc.args[0].str() if exc.args else exc}); check "
                         "--bootstrap-servers") from None
    if topic in metadata.topics and metadata.topics[topic].error is None:
        return
    if partitions is None:
        raise SystemExit(f"ledgerwire backfill: topic {topic!r} does not exist; create it or "
                         "pass --partitions N")
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    for future in futures.values():
        future.result(timeout=60)


def backfill_main(argv: list[str] | None = None) -> int:
    return run_backfill(backfill_parser().parse_args(argv))


def run_backfill(args: argparse.Namespace) -> int:
    """Run a parsed backfill command (for gateway/commands: run)."""
    fmt = args.format or _infer_format(args.source)
    backfill_id = args.backfill_id or default_backfill_id(args)
    log = RunLog.create("backfill", args.verbose, args.log_file)  # kazoo's retries log there
    try:
        conf = _spark_conf(args)
        check_master(args.master)
        check_metadata(args.metadata)
        kafka = _principal_options(args)
    except PreflightError as exc:
        print(f"ledgerwire backfill: {exc}", file=sys.stderr)
        return exc.exit_code
    principal = read_principal(kafka)
    token: JobToken | None = None
    try:
        _ensure_topic(args.bootstrap_servers, args.topic, args.partitions,
                      dict(principal.client_config) if principal else {})  # fmt: skip
        if principal is not None:  # the brokers' ACLs decide, before any JVM starts
            check_write_access(principal, args.topic)
            if args.executor_credentials == "token":
                token = create_job_token(principal, args.token_max_lifetime_ms)
                print(f"backfill: the executors log in with delegation token {token.token_id} "
                      f"of {token.owner}, expired when the job ends", file=sys.stderr)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    except (AuthorizationError, RuntimeError) as exc:
        print(f"ledgerwire backfill: {exc}", file=sys.stderr)
        return 1
    try:
        return _run_backfill_job(args, fmt, backfill_id, log, conf, kafka,
                                 _writer_credentials(kafka, token, args.executor_credentials))
    finally:
        if token is not None and principal is not None:  # the job is over: so is its token
            expire_job_token(principal, token)


def _writer_credentials(kafka: dict[str, str], token: JobToken | None,
                        mode: str) -> dict[str, str]:  # fmt: skip
    """The kafka.* options the writer (and so the executors) get: the token, not the
    password, when there is one."""
    out = {k: v for k, v in kafka.items() if k != "kafka.bootstrap.servers"}
    if not kafka:
        return out
    out[EXECUTOR_CREDENTIALS_OPTION] = mode
    if token is not None:
        out.update({"kafka.sasl.username": token.token_id, "kafka.sasl.password": token.password,
                    "kafka.sasl.mechanism": "SCRAM-SHA-512", DELEGATION_TOKEN_OPTION: "true"})
    return out


def _run_backfill_job(args: argparse.Namespace, fmt: str, backfill_id: str, log: RunLog,
                      conf: dict[str, str], kafka: dict[str, str],
                      writer_kafka: dict[str, str]) -> int:  # fmt: skip
    spark = None
    own_session = False
    started = time.time()
    try:
        spark, own_session = start_session(args.master, "ledgerwire-backfill", log, ui=args.ui,
                                           ship_code=args.ship_code, conf=conf)
        spark_start_s, started = time.time() - started, time.time()
        ui = ui_address(spark)
        if ui:
            print(f"backfill: Spark UI {ui}", file=sys.stderr)
        summary_file = Path(tempfile.mkdtemp(prefix="ledgerwire-backfill-")) / "summary.json"
        roles = {"value": args.value_column or "value", "key": args.key_column,
                 "timestamp": args.timestamp_column, "partition": args.partition_column,
                 "headers": args.headers_column}  # fmt: skip
        plan = plan_parquet(args.source, {r: c for r, c in roles.items() if c}, args.tasks) \
            if fmt == "parquet" else None  # fmt: skip
        df = None
        if plan is None:  # Spark reads the input (see parquet_backfill.py for when)
            df = _backfill_frame(spark, args, fmt)
            if df is None:
                return 2
        print(f"backfill {args.source} ({fmt}) -> {args.topic}, backfill id {backfill_id}",
              file=sys.stderr)
        scan = {"ledgerwire.metadata": args.metadata, **kafka}
        if kafka and args.admin_url:
            scan["ledgerwire.adminUrl"] = args.admin_url
        progress = scan_progress_job(spark, scan, args.topic, backfill_id)  # in the executors
        options = {"topic": args.topic, "kafka.bootstrap.servers": args.bootstrap_servers,
                   "kafka.compression.type": args.compression,
                   "ledgerwire.metadata": args.metadata, "ledgerwire.backfillId": backfill_id,
                   PROGRESS_OPTION: encode_progress(progress), **writer_kafka,
                   "ledgerwire.summaryPath": str(summary_file)}  # fmt: skip
        with Progress(spark, None, sys.stderr, interval_s=args.progress_interval):
            if df is None:
                assert plan is not None
                backfill_parquet(spark, plan, options)  # pyarrow reads it in the tasks
            else:
                df.write.format("ledgerwire").mode("append").options(**options).save()
        done = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        print(_summary("backfill", int(done.get("rows", 0)), int(done.get("bytes", 0)),
                       "keys and values sent", time.time() - started,
                       f", {done.get('skipped', 0)} rows already there from an earlier run",
                       spark_start_s))
        return 0
    except Exception as exc:  # noqa: BLE001 - a failed job is reported, not a traceback
        return _report_failure("backfill", exc, log)
    finally:
        if own_session and spark is not None:
            spark.stop()


def _backfill_frame(spark: Any, args: argparse.Namespace, fmt: str) -> Any:
    """The input as Spark reads it, with the writer's columns (None: a named column is
    missing, said on stderr)."""
    from pyspark.sql import functions as F

    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    df = reader.load(args.source)
    if args.tasks:
        df = df.coalesce(args.tasks) if args.tasks < df.rdd.getNumPartitions() \
            else df.repartition(args.tasks)  # fmt: skip
    columns = df.columns
    for option, name in (("--key-column", args.key_column),
                         ("--timestamp-column", args.timestamp_column),
                         ("--value-column", args.value_column),
                         ("--partition-column", args.partition_column),
                         ("--headers-column", args.headers_column)):  # fmt: skip
        if name is not None and name not in columns:
            print(f"ledgerwire backfill: {option} {name!r} is not a column of "
                  f"{args.source} (columns: {', '.join(columns)})", file=sys.stderr)
            return None
    special = {args.key_column, args.timestamp_column, args.partition_column,
               args.headers_column} - {None}  # fmt: skip
    if args.value_column:
        value = F.col(args.value_column)
    elif "value" in columns:
        value = F.col("value")
    else:
        value = F.to_json(F.struct(*[F.col(c) for c in columns if c not in special]))
    selected = [value.cast("binary").alias("value")]
    if args.key_column:
        selected.append(F.col(args.key_column).cast("binary").alias("key"))
    if args.timestamp_column:
        ts = F.col(args.timestamp_column)
        kind = dict(df.dtypes)[args.timestamp_column]
        selected.append((ts if kind in ("timestamp", "bigint") else
                         ts.cast("timestamp")).alias("timestamp"))  # fmt: skip
    if args.partition_column:
        selected.append(F.col(args.partition_column).cast("int").alias("partition"))
    if args.headers_column:
        selected.append(F.col(args.headers_column).alias("headers"))
    return df.select(*selected)


# ---- replay --------------------------------------------------------------------------------

def replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ledgerwire replay",
                                description="read a topic's history from the bookies to Parquet")
    add_replay_arguments(p)
    return p


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    """The replay flags (for gateway/commands: add_arguments)."""
    p.add_argument("--topic", required=True, help="topic name (comma-separated for several)")
    p.add_argument("--to", dest="target", required=True, help="output Parquet directory")
    p.add_argument("--metadata", default=DEFAULT_METADATA,
                   help="ledgerwire standalone data dir or zk://host:port/chroot")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--ending-offsets", default="latest")
    p.add_argument("--include-headers", action="store_true")
    p.add_argument("--min-partitions", type=int)
    p.add_argument("--read-from", default="auto", choices=["auto", "bookies", "files"])
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--bookie-secret-file",
                   help="the cluster's bookie secret (ledgerwire.bookieSecretFile)")
    auth = _add_principal_arguments(p, "read as a Kafka principal: the brokers check READ on "
                                       "the topics before anything is read")
    auth.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP,
                      help="the brokers that check the principal (with --user)")
    tier = p.add_argument_group(
        "tiered storage", "where the brokers' [offload] store is, to read offloaded ledgers "
        "straight from it (S3 credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
    for flag, option in (("--offload-directory", "directory"), ("--offload-bucket", "bucket"),
                         ("--offload-prefix", "prefix"), ("--offload-endpoint", "endpoint"),
                         ("--offload-region", "region")):  # fmt: skip
        tier.add_argument(flag, help=f"[offload] {option} (ledgerwire.offload.{option})")
    _add_run_arguments(p)


def replay_main(argv: list[str] | None = None) -> int:
    return run_replay(replay_parser().parse_args(argv))


def _spark_conf(args: argparse.Namespace) -> dict[str, str]:
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PreflightError(f"--conf {item!r}: expected KEY=VALUE", 2)
        conf[key.strip()] = value
    return conf


def _replay_options(args: argparse.Namespace) -> dict[str, str]:
    options = {
        "ledgerwire.metadata": args.metadata,
        "ledgerwire.readFrom": args.read_from,
        "subscribe": args.topic,
        "startingOffsets": args.starting_offsets,
        "endingOffsets": args.ending_offsets,
        "includeHeaders": str(args.include_headers).lower(),
    }
    if args.min_partitions:
        options["minPartitions"] = str(args.min_partitions)
    if args.bookie_secret_file:
        options["ledgerwire.bookieSecretFile"] = args.bookie_secret_file
    if args.user:
        options.update(_principal_options(args))
        if args.admin_url:
            options["ledgerwire.adminUrl"] = args.admin_url
    for name in ("directory", "bucket", "prefix", "endpoint", "region"):
        value = getattr(args, f"offload_{name}", None)
        if value:
            options[f"ledgerwire.offload.{name}"] = value
    if args.offload_bucket:  # executors on other hosts may not have the driver's environment
        for env, option in (("AWS_ACCESS_KEY_ID", "accessKeyId"),
                            ("AWS_SECRET_ACCESS_KEY", "secretAccessKey")):  # fmt: skip
            if os.environ.get(env):
                options[f"ledgerwire.offload.{option}"] = os.environ[env]
    return options


def _read_secret(path: str | None) -> str:
    if not path:
        raise PreflightError("--user needs --password-file (the password is never taken on "
                             "the command line)", 2)
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise PreflightError(f"--password-file {path!r}: {exc.strerror or exc}", 2) from None


def run_replay(args: argparse.Namespace) -> int:
    """Run a parsed replay command (for gateway/commands: run)."""
    try:
        options = _replay_options(args)
    except PreflightError as exc:
        print(f"ledgerwire replay: {exc}", file=sys.stderr)
        return exc.exit_code
    log = RunLog.create("replay", args.verbose, args.log_file)  # kazoo's retries log there
    try:
        conf = _spark_conf(args)
        check_master(args.master)
        plan = check_read(options)
    except PreflightError as exc:
        print(f"ledgerwire replay: {exc}", file=sys.stderr)
        return exc.exit_code
    spark = None
    own_session = False
    started = time.time()
    try:
        spark, own_session = start_session(args.master, "ledgerwire-replay", log, ui=args.ui,
                                           ship_code=args.ship_code, conf=conf)
        spark_start_s, started = time.time() - started, time.time()
        ui = ui_address(spark)
        print(f"replay {args.topic}: {plan.records} records in {plan.partitions} partitions"
              f" -> {args.target}" + (f"; Spark UI {ui}" if ui else ""), file=sys.stderr)
        with Progress(spark, plan.records, sys.stderr, interval_s=args.progress_interval):
            rows: int | None = None
            if writes_locally(args.target):  # each task writes its part with pyarrow
                rows = replay_to_parquet(spark, options, args.target, overwrite=args.overwrite)
            else:  # another Hadoop filesystem: Spark writes it
                df = spark.read.format("ledgerwire").options(**options).load()
                df.write.mode("overwrite" if args.overwrite else "errorifexists").parquet(
                    args.target)
        seconds = time.time() - started
        if rows is None:  # Spark's write reports no count: read it back
            rows = spark.read.parquet(args.target).count()
            nbytes, measured = output_bytes(spark, args.target), "Parquet files written"
        else:
            nbytes, measured = local_bytes(args.target), "Parquet files on disk"
        print(_summary("replay", rows, nbytes, measured, seconds,
                       f" -> {args.target}", spark_start_s))
        return 0
    except Exception as exc:  # noqa: BLE001 - a failed job is reported, not a traceback
        return _report_failure("replay", exc, log)
    finally:
        if own_session and spark is not None:
            spark.stop()
