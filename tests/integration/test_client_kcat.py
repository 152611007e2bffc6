"""kcat (librdkafka's command-line tool, Debian's package) against `ledgerwire standalone`:
metadata listing, producing keyed messages with headers under every codec, consuming them back
with the formatter, and the offset-for-timestamp query (-Q)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (scripts/ensure-env test)")]

COUNT = 2_000


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_and_consume(module_standalone: Standalone, codec: str) -> None:
    bootstrap = module_standalone.bootstrap
    topic = f"kcat-{codec}"
    lines = [f"key-{i}:value-{i}-" + "x" * (i % 97) for i in range(COUNT)]
    kcat("-P", "-b", bootstrap, "-t", topic, "-K:", "-z", codec, "-H", "origin=kcat",
         "-X", "topic.request.required.acks=all", stdin="\n".join(lines) + "\n")

    out = kcat("-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
               "-f", "%k|%s|%h|%o\n")
    rows = [line.split("|") for line in out.splitlines()]
    assert [f"{k}:{v}" for k, v, _, _ in rows] == lines
    assert {h for _, _, h, _ in rows} == {"origin=kcat"}
    assert [int(o) for _, _, _, o in rows] == list(range(COUNT))


def test_kcat_metadata_and_offset_query(module_standalone: Standalone) -> None:
    bootstrap = module_standalone.bootstrap
    topic = "kcat-times"
    before = int(time.time() * 1000)
    kcat("-P", "-b", bootstrap, "-t", topic, "-p", "0", stdin="a\nb\nc\n")
    listing = json.loads(kcat("-L", "-J", "-b", bootstrap, "-t", topic))
    (broker,) = listing["brokers"]
    assert broker["name"] == bootstrap
    (described,) = listing["topics"]
    assert described["topic"] == topic and [p["partition"] for p in described["partitions"]] == [0]
    assert described["partitions"][0]["leader"] == broker["id"]
    # -Q: the first offset at or after a timestamp (ListOffsets by time).
    out = kcat("-Q", "-b", bootstrap, "-t", f"{topic}:0:{before - 1}")
    assert f"{topic} [0] offset 0" in out
    out = kcat("-Q", "-b", bootstrap, "-t", f"{topic}:0:{int(time.time() * 1000) + 60_000}")
    assert f"{topic} [0] offset -1" in out
