"""The `ledgerwire standalone` process itself: start-up time, bad input, graceful shutdown."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration]


def test_starts_and_stops_cleanly_on_sigterm_and_restarts_without_recovery(tmp_path: Path) -> None:
    """Start-up speed is measured in benchmarks/bench_bookie_startup.py, not here (a loaded CI
    machine makes any time bound flaky); a start that hangs fails Standalone.start's own
    deadline, and a start after a clean stop must not need to recover a single ledger."""
    server = Standalone(tmp_path / "data")
    try:
        server.start()
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
        producer.produce("clean-stop", value=b"an open ledger to close")
        assert producer.flush(30) == 0
        assert server.stop() == 0
        first_run = server.log_path.read_text(errors="replace")
        assert "standalone stopped" in first_run
        # A clean stop closes every ledger: the next start needs no recovery.
        server.start()
        assert server.stop() == 0
        second_run = server.log_path.read_text(errors="replace")[len(first_run):]
        assert "standalone stopped" in second_run
        assert "recovered ledger" not in second_run, second_run[-4000:]
        assert "recovered and closed" not in second_run, second_run[-4000:]
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
