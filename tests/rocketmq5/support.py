"""Running the real RocketMQ 5 Python client (client5.py, in .venv-rocketmq5) against a
standalone's gRPC endpoint, and reading its JSON lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
SCRIPT = Path(__file__).with_name("client5.py")


def run5(command: str, endpoint: str, topic: str, *args: str,
         timeout_s: float = 90.0) -> list[dict[str, Any]]:
    """Run one client5.py scenario; its JSON lines (fails the test on a non-zero exit)."""
    done = subprocess.run([str(PYTHON), str(SCRIPT), command, "--endpoint", endpoint,
                           "--topic", topic, *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd="/tmp")
    assert done.returncode == 0, f"client5 {command} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def received(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "body" in line]


def run5_refused(command: str, endpoint: str, topic: str, *args: str,
                 timeout_s: float = 90.0) -> str:
    """Run a scenario that must fail; the client's output (for the reason)."""
    done = subprocess.run([str(PYTHON), str(SCRIPT), command, "--endpoint", endpoint,
                           "--topic", topic, *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd="/tmp")
    assert done.returncode != 0, f"client5 {command} was not refused:\n{done.stdout}"
    return done.stdout + done.stderr
