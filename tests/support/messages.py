"""Deterministic test messages: the same (key, value, headers, timestamp) for a given seed.

Values vary in size and content (some compressible, some not) so every codec does real work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TIMESTAMP_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Message:
    index: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def make_messages(count: int, seed: int = 0) -> list[Message]:
    rng = random.Random(seed)
    words = [b"ledger", b"bookie", b"fence", b"quorum", b"journal", b"entry", b"offset"]
    out = []
    for i in range(count):
        if i % 3 == 0:
            value = rng.randbytes(rng.randint(0, 300))
        else:
            value = b" ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
        headers = (("idx", str(i).encode()), ("kind", rng.choice(words)))
        out.append(Message(i, f"key-{seed}-{i}".encode(), value, headers, BASE_TIMESTAMP_MS + i))
    return out
