"""Free TCP ports for the processes tests start, chosen below the kernel's ephemeral range.

A port from bind(port 0) comes from the ephemeral range, which the kernel also hands to every
outgoing connection: between a test choosing it and its process binding it (or binding it again
after a restart) a client connection can take it, and the process fails with "address already in
use". Ports below that range are never handed out that way. Each pytest-xdist worker draws from
its own slice, so two workers never choose the same port; within a worker a port is not handed
out twice until its slice wraps, and each candidate is checked by binding it.

Must never return a port it could not bind at the moment of choosing.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOWEST = 15000
_FALLBACK_EPHEMERAL_LOW = 32768


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_LOW
    return low if low > _LOWEST + 2000 else _FALLBACK_EPHEMERAL_LOW


def _worker_slice() -> range:
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (_ephemeral_low() - _LOWEST) // count
    first = _LOWEST + (index % count) * width
    return range(first, first + width)


_SLICE = _worker_slice()
_cursor = random.randrange(len(_SLICE))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _next_candidates(count: int) -> int:
    """The first of `count` consecutive ports after the cursor (inside the slice)."""
    global _cursor
    if _cursor + count > len(_SLICE):
        _cursor = 0
    first = _SLICE[_cursor]
    _cursor += count
    return first


def free_port_range(count: int) -> int:
    """A first port such that [first, first + count) are all free right now."""
    for _ in range(len(_SLICE) // max(count, 1)):
        first = _next_candidates(count)
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {_SLICE}")


def free_port() -> int:
    return free_port_range(1)


def distinct_free_ports(count: int, taken: set[int]) -> list[int]:
    """`count` free ports, all different and none in `taken`."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in taken and port not in ports:
            ports.append(port)
    return ports
