"""Driver-side checks before Spark plans anything: options, metadata, topics, credentials, master.

`ledgerwire replay` / `backfill` call these before a JVM starts, so that the usual mistakes (an
unknown topic, a wrong metadata address, a missing bookie secret file, a Spark master that is not
there) end in one line within seconds instead of after Spark's planning, stacks and retries.

  check_read(options)  -> ReadPlan: parses the reader options, opens the metadata (bounded
      by connect_timeout_s: a kazoo connect that never succeeds is abandoned in its daemon
      thread), resolves the topics and each partition's offset range; the total record count
      feeds the CLI's progress line.
  check_master(master, timeout_s): for spark://h:p[,h:p] masters, a TCP connect to each.

Every failure is a `PreflightError` whose message is the one line to show. This module must
never write to ledgerwire and never start a JVM.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ledger_backend.metadata.zk_url import redact
from spark_bridge.metadata_access import BOOKIE_SECRET_FILE_OPTION, BOOKIE_TLS_OPTIONS
from spark_bridge.options import OptionError, parse_reader_options

T = TypeVar("T")


class PreflightError(Exception):
    """A check failed; str() is the one line for the user. exit_code: 2 for a bad option or
    argument, 1 for something unreachable."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ReadPlan:
    partitions: int      # topic partitions the read covers
    records: int         # offsets in the chosen ranges (an upper bound on rows: markers count)


def _bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """fn() in a daemon thread; PreflightError if it takes longer than timeout_s."""
    box: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)

    def run() -> None:
        try:
            box.put((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box.put((False, exc))

    threading.Thread(target=run, name="ledgerwire-preflight", daemon=True).start()
    try:
        ok, value = box.get(timeout=timeout_s)
    except queue.Empty:
        raise PreflightError(f"{what}: no answer within {timeout_s:.0f} s") from None
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _check_files(options: Mapping[str, str]) -> None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in (BOOKIE_SECRET_FILE_OPTION, *BOOKIE_TLS_OPTIONS):
        path = lowered.get(name.lower())
        if path and not os.access(path, os.R_OK):
            raise PreflightError(f"option '{name}'={path!r}: cannot read that file", 2)


def check_read(options: Mapping[str, str], connect_timeout_s: float = 3.0,
               plan_timeout_s: float = 60.0) -> ReadPlan:
    """Parse, reach the metadata (bounded by connect_timeout_s), resolve topics and offset
    ranges (bounded by plan_timeout_s); see the module doc."""
    from spark_bridge.authorization import AuthorizationError, check_read_access
    from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
    from spark_bridge.planner import offset_range, resolve_topic_partitions
    from spark_bridge.topic_layout import partition_layout

    try:
        opts = parse_reader_options(dict(options), streaming=False)
    except OptionError as exc:
        raise PreflightError(str(exc), 2) from None
    _check_files(options)
    where = redact(opts.spec.metadata_url)

    def connect() -> LedgerAccess:
        mode = resolve_read_mode(opts.spec, opts.read_from)
        return LedgerAccess(opts.spec, mode, tail=opts.tail_read, timeout_s=connect_timeout_s)

    def plan(access: LedgerAccess) -> ReadPlan:
        with access:
            pairs = resolve_topic_partitions(access, opts)
            if opts.principal is not None:
                check_read_access(opts.principal, sorted({t for t, _p in pairs}))
            records = 0
            for topic, partition in pairs:
                layout = partition_layout(access, topic, partition, opts.namespace)
                start, end = offset_range(access, opts, layout)
                records += end - start
            return ReadPlan(len(pairs), records)

    try:
        access = _bounded(connect, connect_timeout_s, f"cannot reach ledgerwire metadata at "
                          f"{where} (check --metadata)")  # fmt: skip
        return _bounded(lambda: plan(access), plan_timeout_s,
                        f"reading the topics' ledgers through {where}")  # fmt: skip
    except PreflightError:
        raise
    except AuthorizationError as exc:
        raise PreflightError(str(exc)) from None
    except (OptionError, ValueError) as exc:
        raise PreflightError(str(exc), 2) from None
    except RuntimeError as exc:  # LedgerAccess: "cannot reach ledgerwire metadata at ..."
        raise PreflightError(_first_line(str(exc)) + " (check --metadata)") from None
    except Exception as exc:  # noqa: BLE001 - any other failure is one line, not a stack
        raise PreflightError(f"reading ledgerwire metadata at {where} failed: "
                             f"{type(exc).__name__}: {_first_line(str(exc))}") from None


def check_metadata(value: str, connect_timeout_s: float = 3.0) -> None:
    """The metadata option resolves and its store answers within connect_timeout_s (for
    backfill, whose writer reads the target topic's backfill markers through it)."""
    from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
    from spark_bridge.metadata_access import resolve_connection

    try:
        spec = resolve_connection(value)
    except ValueError as exc:
        raise PreflightError(str(exc), 2) from None
    where = redact(spec.metadata_url)

    def connect() -> None:
        LedgerAccess(spec, resolve_read_mode(spec), timeout_s=connect_timeout_s).close()

    try:
        _bounded(connect, connect_timeout_s, f"cannot reach ledgerwire metadata at {where} "
                 "(check --metadata)")  # fmt: skip
    except PreflightError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line, not a stack
        raise PreflightError(_first_line(str(exc)) + " (check --metadata)") from None


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else "(no message)"


def check_master(master: str, timeout_s: float = 3.0) -> None:
    """A spark:// master must accept a TCP connection (one of its hosts, for HA lists)."""
    if not master.startswith("spark://"):
        return
    problems = []
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port or 7077)),
                                          timeout=timeout_s):
                return
        except ValueError:
            raise PreflightError(f"--master {master!r}: expected spark://host:port", 2) from None
        except OSError as exc:
            problems.append(f"{hostport}: {exc.strerror or exc}")
    raise PreflightError(f"cannot reach the Spark master at {master} ({'; '.join(problems)}); "
                         "check --master and that the master is running")


__all__ = ["PreflightError", "ReadPlan", "check_master", "check_metadata", "check_read"]
