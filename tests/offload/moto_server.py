"""A real S3-compatible HTTP endpoint for tests: moto's standalone server as a subprocess."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.ports import free_port


@contextmanager
def moto_s3(bucket: str = "ledgers") -> Iterator[str]:
    """Run moto_server on a free port, create `bucket`, yield the endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
                urllib.request.urlopen(req, timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.kill()
        proc.wait()
