"""The `ledgerwire standalone` process itself: start-up time, bad input, graceful shutdown."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration]


def test_starts_quickly_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """Start-up speed is measured in benchmarks/bench_bookie_startup.py; here only a bound a
    loaded CI machine keeps, so that a start that hangs on recovery is caught."""
    server = Standalone(tmp_path / "data")
    try:
        started = time.monotonic()
        server.start()
        elapsed = time.monotonic() - started
        assert elapsed < 20.0, f"standalone took {elapsed:.2f}s to become ready"
        assert server.stop() == 0
        log = server.log()
        assert "standalone stopped" in log
        # A clean stop closes every ledger: the next start needs no recovery either.
        started = time.monotonic()
        server.start()
        assert time.monotonic() - started < 20.0
        assert server.stop() == 0
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def test_garbage_closes_only_that_connection(standalone: Standalone) -> None:
    host, port = "127.0.0.1", standalone.kafka_port
    good = Producer({"bootstrap.servers": standalone.bootstrap, "acks": "all"})
    good.produce("bad-input", value=b"before")
    assert good.flush(30) == 0

    # Oversize frame: refused before the server reads it into memory.
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(struct.pack(">i", 2_000_000_000) + b"x" * 100)
        s.settimeout(5)
        assert s.recv(100) == b""  # closed, no answer
    # Malformed request: a valid length holding nonsense.
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(struct.pack(">i", 12) + b"\xff" * 12)
        s.settimeout(5)
        assert s.recv(100) == b""
    # Truncated frame, then the peer goes away.
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x12")

    good.produce("bad-input", value=b"after")
    assert good.flush(30) == 0
    assert standalone.proc is not None and standalone.proc.poll() is None
