"""Raw HTTP/1.1 exchanges over a Trio socket (to send malformed requests on purpose)."""

from __future__ import annotations

import json
import re
from typing import Any

import trio


async def exchange(port: int, raw: bytes, *, read_timeout_s: float = 5.0) -> bytes:
    """Send `raw`, read until the server closes (requests here say Connection: close)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        out = bytearray()
        with trio.fail_after(read_timeout_s):
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return bytes(out)
                out += data


async def request(port: int, method: str, path: str, body: Any = None,
                  headers: dict[str, str] | None = None) -> tuple[int, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    raw = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}"
           f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
    answer = await exchange(port, raw)
    head, _, content = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if b"application/json" in head:
        return status, json.loads(content)
    return status, content.decode()


def found(pattern: str, text: str, flags: int = 0) -> str:
    """The first group of `pattern`'s first match in `text` (an answer must hold it)."""
    match = re.search(pattern, text, flags)
    assert match is not None, f"{pattern!r} not in {text[:500]!r}"
    return match.group(1)
