"""The reader's options: Spark's Kafka source options, plus how to reach ledgerwire.

A job that used Spark's Kafka source changes only the format name and the connection option:
  subscribe | subscribePattern | assign            which topic partitions (exactly one)
  startingOffsets / endingOffsets                   "earliest" / "latest" / {"t":{"0":23,"1":-2}}
  startingTimestamp / endingTimestamp               one timestamp (ms) for every partition
  startingOffsetsByTimestamp / endingOffsetsByTimestamp   {"t":{"0":1700000000000}}
  startingOffsetsByTimestampStrategy                "error" (default) or "latest"
  minPartitions, includeHeaders, failOnDataLoss, maxOffsetsPerTrigger (streaming)
  ledgerwire.maxSplitBytes                          a large ledger is read by several tasks,
                                                    each at most this many bytes (planner.py)
  kafka.isolation.level                             read_committed (default) | read_uncommitted
  ledgerwire.metadata                               standalone data dir or zk://host:port/chroot
  ledgerwire.readFrom                               auto (default) | bookies | files
  ledgerwire.bookieSecretFile                       file holding the cluster's bookie secret
  ledgerwire.bookieTls{Cert,Key,Ca}File             TLS to bookies (as storage.bookie_tls_*)
  ledgerwire.namespace                              managed-ledger namespace (public/default)
  ledgerwire.tailRead                               quorum (default) | lac: how far to read the
                                                    open ledger (see ledger_access.py)
  kafka.security.protocol=SASL_*, kafka.sasl.*, kafka.bootstrap.servers
                                                    read as that principal: READ is checked
                                                    by the brokers first (authorization.py)
  ledgerwire.adminUrl, ledgerwire.readTicketTtl     with a principal: the executors read with
                                                    a read ticket from that broker's admin API,
                                                    not the password (read_tickets.py)
  ledgerwire.readTicket                             a ticket obtained beforehand
  ledgerwire.offload.*                              the tiered-storage store
                                                    (offloaded_ledgers.py)
Precedence, as in Spark: a global timestamp beats the per-partition timestamps, which beat
offsets. Option names are matched case-insensitively (Spark's options are). Every error is an
`OptionError` whose message starts with the option's name.

This module is pure parsing: it must never do I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spark_bridge.authorization import ReadPrincipal, read_principal
from spark_bridge.metadata_access import (
    METADATA_OPTION,
    ConnectionSpec,
    resolve_connection,
)

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    """A missing, malformed or contradictory option; the message names the option."""


@dataclass(frozen=True)
class OffsetBound:
    """One side of the range. kind: "earliest" | "latest" | "offsets" | "timestamp" |
    "timestamps"; `per_partition` maps topic -> partition -> offset (or timestamp)."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    option: str
    timestamp: int | None = None
    per_partition: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReaderOptions:
    spec: ConnectionSpec
    read_from: str
    namespace: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetBound
    ending: OffsetBound
    timestamp_strategy: Literal["error", "latest"]
    min_partitions: int | None
    include_headers: bool
    fail_on_data_loss: bool
    read_committed: bool
    max_offsets_per_trigger: int | None
    tail_read: Literal["quorum", "lac"] = "quorum"
    principal: ReadPrincipal | None = None  # whose READ the brokers check (authorization.py)
    admin_url: str | None = None  # a broker's admin API: read tickets (read_tickets.py)
    ticket_ttl_s: int = 3600
    max_split_bytes: int | None = None  # None: planner.MAX_SPLIT_BYTES


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option '{name}'={raw!r}: expected true or false")


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}'={raw!r}: expected a positive integer") from None
    if value <= 0:
        raise OptionError(f"option '{name}'={raw!r}: expected a positive integer")
    return value


def _json_partition_map(name: str, raw: str, *, values: str) -> dict[str, dict[int, int]]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{name}': not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(doc, dict):
        raise OptionError(f"option '{name}': expected a JSON object "
                          f'{{"topic":{{"0":{values}}}}}, got {raw!r}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{name}': topic {topic!r} must map partitions to "
                              f"{values}, got {parts!r}")
        out[topic] = {}
        for part, value in parts.items():
            try:
                partition = int(part)
            except ValueError:
                raise OptionError(f"option '{name}': partition {part!r} of topic {topic!r} "
                                  "is not an integer") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option '{name}': {topic}-{partition} must be an integer, "
                                  f"got {value!r}")
            out[topic][partition] = value
    return out


def _bound(opts: dict[str, str], side: str, streaming: bool) -> OffsetBound:
    ts_name = f"{side}Timestamp"
    by_ts_name = f"{side}OffsetsByTimestamp"
    off_name = f"{side}Offsets"
    if ts_name.lower() in opts:
        ts_text = opts[ts_name.lower()]
        try:
            ts = int(ts_text)
        except ValueError:
            raise OptionError(f"option '{ts_name}'={ts_text!r}: expected milliseconds since the "
                              "epoch") from None
        if ts < 0:
            raise OptionError(f"option '{ts_name}'={ts_text!r}: must not be negative")
        return OffsetBound("timestamp", ts_name, timestamp=ts)
    if by_ts_name.lower() in opts:
        per = _json_partition_map(by_ts_name, opts[by_ts_name.lower()], values="timestamp")
        for topic, parts in per.items():
            for partition, ts in parts.items():
                if ts < 0:
                    raise OptionError(f"option '{by_ts_name}': {topic}-{partition} has a "
                                      f"negative timestamp {ts}")
        return OffsetBound("timestamps", by_ts_name, per_partition=per)
    raw = opts.get(off_name.lower())
    default = "earliest" if side == "starting" else "latest"
    if streaming and side == "starting":
        default = "latest"
    if raw is None or raw.strip().lower() in ("earliest", "latest"):
        kind = (raw or default).strip().lower()
        if not streaming and side == "starting" and kind == "latest":
            raise OptionError(f"option '{off_name}': 'latest' is not allowed for batch queries")
        if side == "ending" and kind == "earliest":
            raise OptionError(f"option '{off_name}': 'earliest' is not allowed as an end")
        return OffsetBound(kind, off_name)  # type: ignore[arg-type]
    if not raw.strip().startswith("{"):
        raise OptionError(f"option '{off_name}'={raw!r}: expected earliest, latest or JSON "
                          '{"topic":{"0":offset}}')
    per = _json_partition_map(off_name, raw, values="offset")
    for topic, parts in per.items():
        for partition, offset in parts.items():
            if offset < EARLIEST:
                raise OptionError(f"option '{off_name}': {topic}-{partition} offset {offset} "
                                  "is invalid (use -2 for earliest, -1 for latest)")
            if side == "ending" and offset == EARLIEST:
                raise OptionError(f"option '{off_name}': {topic}-{partition}: -2 (earliest) "
                                  "is not allowed as an end")
            if side == "starting" and offset == LATEST and not streaming:
                raise OptionError(f"option '{off_name}': {topic}-{partition}: -1 (latest) is "
                                  "not allowed for batch queries")
    return OffsetBound("offsets", off_name, per_partition=per)


def parse_reader_options(options: Mapping[str, str], *, streaming: bool = False
                         ) -> ReaderOptions:  # fmt: skip
    opts = _lower(options)
    try:
        spec = resolve_connection(opts.get(METADATA_OPTION.lower()), opts)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in opts]
    if len(chosen) != 1:
        raise OptionError(
            "options 'subscribe', 'subscribePattern', 'assign': exactly one must be given"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    subscribe = pattern = assign = None
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe': no topic names given")
    elif chosen[0] == "subscribePattern":
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern'={pattern!r}: bad regex: {exc}") from None
    else:
        raw = opts["assign"]
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not all(
                isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                            and p >= 0 for p in v)
                for v in doc.values()
            ):
                raise ValueError
        except ValueError:
            raise OptionError(f"option 'assign'={raw!r}: expected JSON like "
                              '{"topicA":[0,1],"topicB":[2,4]}') from None
        assign = {str(t): tuple(sorted(set(ps))) for t, ps in doc.items()}
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy'={strategy!r}: expected "
                          "error or latest")
    isolation = opts.get("kafka.isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"option 'kafka.isolation.level'={isolation!r}: expected "
                          "read_committed or read_uncommitted")
    read_from = opts.get("ledgerwire.readfrom", "auto").strip().lower()
    if read_from not in ("auto", "bookies", "files"):
        raise OptionError(f"option 'ledgerwire.readFrom'={read_from!r}: expected auto, "
                          "bookies or files")
    tail_read = opts.get("ledgerwire.tailread", "quorum").strip().lower()
    if tail_read not in ("quorum", "lac"):
        raise OptionError(f"option 'ledgerwire.tailRead'={tail_read!r}: expected quorum or lac")
    try:
        principal = read_principal(options)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    return ReaderOptions(
        spec=spec,
        read_from=read_from,
        namespace=opts.get("ledgerwire.namespace", "public/default"),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_bound(opts, "starting", streaming),
        ending=_bound(opts, "ending", streaming),
        timestamp_strategy=strategy,  # type: ignore[arg-type]
        min_partitions=_positive_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        read_committed=isolation == "read_committed",
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        tail_read=tail_read,  # type: ignore[arg-type]
        principal=principal,
        admin_url=opts.get("ledgerwire.adminurl", "").strip() or None,
        ticket_ttl_s=_positive_int(opts, "ledgerwire.readTicketTtl") or 3600,
        max_split_bytes=_positive_int(opts, "ledgerwire.maxSplitBytes"),
    )
