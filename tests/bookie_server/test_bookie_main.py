"""`python -m ledger_backend.bookie` as a real process: serve, stop on SIGTERM, refuse a foreign
data directory."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    BookieAddress,
    ReadEntryRequest,
    ReadEntryResponse,
    Status,
)
from tests.bookie_server.bookie_wire_client import RawBookieClient

pytestmark = pytest.mark.integration


def _bookie_command(data_dir: Path, meta_dir: Path, bookie_id: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "ledger_backend.bookie", "--data-dir", str(data_dir),
        "--metadata", f"embedded:{meta_dir}", "--port", "0", "--bookie-id", bookie_id,
        "--log-level", "warning", *extra,
    ]  # fmt: skip


async def _serve_and_add(command: list[str]) -> None:
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(20):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "bookie exited before it listened"
                line += chunk
        address = BookieAddress.parse(line.decode().split()[-1])
        stream = await trio.open_tcp_stream(address.host, address.port)
        client = RawBookieClient(stream)
        added = await client.request(AddEntryRequest(1, 5, 0, -1, False, b"hello"))
        assert added == AddEntryResponse(1, Status.OK, 5, 0)
        read = await client.request(ReadEntryRequest(2, 5, 0))
        assert read == ReadEntryResponse(2, Status.OK, 5, 0, -1, b"hello")
        await client.aclose()
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_memory_bookie_process_serves_and_stops(tmp_path: Path) -> None:
    await _serve_and_add(
        _bookie_command(tmp_path / "d", tmp_path / "m", "bk-mem", "--storage", "memory")
    )


async def test_disk_bookie_process_keeps_its_identity(tmp_path: Path) -> None:
    data, meta = tmp_path / "data", tmp_path / "meta"
    await _serve_and_add(_bookie_command(data, meta, "bk-1", "--unsafe-no-fsync"))
    assert (data / "COOKIE").exists()
    # same identity: starts again; another identity on the same directory: refused clearly
    await _serve_and_add(_bookie_command(data, meta, "bk-1", "--unsafe-no-fsync"))
    refused = await trio.run_process(
        _bookie_command(data, meta, "bk-2"), capture_stderr=True, check=False
    )
    assert refused.returncode == 2
    assert b"belongs to bookie 'bk-1'" in refused.stderr


@pytest.mark.parametrize("entry", [["-m", "ledger_backend.bookie"],
                                   ["-m", "gateway", "bookie", "--no-autorecovery"]])
async def test_a_taken_port_is_refused_in_one_line(tmp_path: Path, entry: list[str]) -> None:
    """Both bookie entry points (ledger_backend.bookie.__main__.run_process): the bind error
    comes out of the server's nursery inside an exception group, and was a traceback, exit 1."""
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = await trio.run_process(
            [sys.executable, *entry, "--storage", "memory", "--metadata",
             f"embedded:{tmp_path / 'm'}", "--host", "127.0.0.1", "--port", str(port)],
            capture_stderr=True, check=False)
    assert refused.returncode == 2, refused.stderr.decode()[-2000:]
    assert b"bookie refused to start" in refused.stderr
    assert b"Traceback" not in refused.stderr
