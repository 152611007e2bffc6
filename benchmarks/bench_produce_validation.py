"""What checking compressed produce batches would cost, as Kafka's broker checks them.

    .venv/bin/python benchmarks/bench_produce_validation.py [--messages 200000] [--no-broker]

Kafka's LogValidator decompresses every compressed batch a producer sends and walks its records
(each record's length against its fields, offset deltas 0..n-1, nothing left over), answering
CORRUPT_MESSAGE for one that does not decode. ledgerwire checks the batch header and its CRC-32C
only (protocols/kafka/handlers/produce.py), so a batch whose compressed payload is garbage under
a valid CRC is stored. This measures, per codec and value size:

1. in this process, on ~128 KiB client-sized batches of text-like values (~2-4x compressible):
   the decompression and the record walk (pure Python, as record_batch.decode_records reads
   records; `walk` below), in us per MB of uncompressed records and us per message;
2. the broker's own CPU per message for the same produce (a standalone, fsync on,
   confluent-kafka with that compression.type, acks=all, linger 5 ms, 128 KiB batches),
   so each check's cost can be read against what a produce already costs.

The decision taken from its figures is written in produce.py's docstring.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from common import cpu_seconds, throwaway_standalone  # noqa: E402

from protocols.kafka import compression as codecs  # noqa: E402
from protocols.kafka import record_batch as rb  # noqa: E402

CODECS = {"gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4, "zstd": codecs.ZSTD}
BATCH_BYTES = 128 << 10


def text_values(size: int, count: int, seed: int = 1) -> list[bytes]:
    """Values of `size` bytes made of words (compress ~2-4x, as logs and JSON do)."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnop ,:{}\"") for _ in range(rnd.randint(3, 10)))
             for _ in range(500)]
    out = []
    for _ in range(count):
        value = bytearray()
        while len(value) < size:
            value += rnd.choice(words)
        out.append(bytes(value[:size]))
    return out


def walk(payload: bytes, count: int) -> None:
    """Kafka's per-record checks of a decompressed batch: each record's fields end where its
    length says, offset deltas run 0..count-1, no bytes are left over."""
    n = len(payload)
    pos = 0
    read = rb.read_varint
    for i in range(count):
        length, pos = read(payload, pos)
        end = pos + length
        if length < 0 or end > n:
            raise ValueError("record runs past the batch")
        q = pos + 1  # attributes
        _, q = read(payload, q)  # timestamp delta
        delta, q = read(payload, q)
        if delta != i:
            raise ValueError("offset delta out of order")
        for _ in (0, 1):  # key, value
            size, q = read(payload, q)
            q += max(size, 0)
        headers, q = read(payload, q)
        for _ in range(headers * 2):
            size, q = read(payload, q)
            q += max(size, 0)
        if q != end:
            raise ValueError("record length does not match its fields")
        pos = end
    if pos != n:
        raise ValueError("bytes left after the last record")


def _per_call(fn: object, seconds: float = 0.3) -> float:
    """CPU seconds per call of `fn`, repeated for about `seconds`."""
    assert callable(fn)
    fn()
    calls = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        fn()
        calls += 1
    return (time.process_time() - start) / calls


def micro(value_size: int) -> dict[str, tuple[float, float]]:
    """codec -> (us/MB, us/message) of decompress + walk; "walk" alone; "<codec> decompress"."""
    count = max(1, BATCH_BYTES // (value_size + 12))
    values = text_values(value_size, count)
    batch = rb.build_batch([(b"key-%d" % i, v) for i, v in enumerate(values)])
    payload = bytes(memoryview(batch)[rb.HEADER_SIZE:])
    mb = len(payload) / 1e6
    out: dict[str, tuple[float, float]] = {}
    walk_s = _per_call(lambda: walk(payload, count))
    out["walk"] = (walk_s / mb * 1e6, walk_s / count * 1e6)
    for name, codec in CODECS.items():
        packed = codecs.compress(codec, payload)
        dec_s = _per_call(lambda codec=codec, packed=packed: codecs.decompress(codec, packed))
        out[f"{name} decompress"] = (dec_s / mb * 1e6, dec_s / count * 1e6)
        both = dec_s + walk_s
        out[name] = (both / mb * 1e6, both / count * 1e6)
        out[f"{name} ratio"] = (len(payload) / len(packed), 0.0)
    return out


def broker_cpu(value_size: int, messages: int) -> dict[str, float]:
    """compression.type -> the broker's CPU us/message for a produce of `messages`."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    values = text_values(value_size, 1000, seed=2)
    out: dict[str, float] = {}
    with throwaway_standalone(["--log-level", "WARNING"]) as server:
        assert server.proc is not None
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for name in ("none", *CODECS):
            topic = f"v-{name}-{value_size}"
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                                 "linger.ms": 5, "batch.size": BATCH_BYTES,
                                 "compression.type": name})
            producer.produce(topic, b"warm-up")
            producer.flush(60)
            before = cpu_seconds(server.proc.pid)
            for i in range(messages):
                while True:
                    try:
                        producer.produce(topic, values[i % len(values)])
                        break
                    except BufferError:
                        producer.poll(0.005)
            if producer.flush(120):
                raise SystemExit("produce did not finish")
            after = cpu_seconds(server.proc.pid)
            assert before is not None and after is not None
            out[name] = (after - before) * 1e6 / messages
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--no-broker", action="store_true",
                        help="only the in-process decompression and walk figures")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for size in (100, 1000):
        figures = micro(size)
        cpu = {} if args.no_broker else broker_cpu(size, args.messages)
        print(f"\n{size} B values, ~{BATCH_BYTES >> 10} KiB batches")
        print(f"  record walk alone           {figures['walk'][0]:8,.0f} us/MB "
              f"{figures['walk'][1]:6.2f} us/msg")
        if cpu:
            print(f"  broker produce, none        {'':8} {'':5}  {cpu['none']:6.2f} us/msg")
        for name in CODECS:
            dec, both = figures[f"{name} decompress"], figures[name]
            line = (f"  {name:6} (x{figures[f'{name} ratio'][0]:.1f}) decompress "
                    f"{dec[0]:8,.0f} us/MB {dec[1]:6.2f} us/msg; + walk {both[0]:8,.0f} us/MB "
                    f"{both[1]:6.2f} us/msg")
            if cpu:
                line += (f"; broker produce {cpu[name]:6.2f} us/msg: check = "
                         f"{both[1] / cpu[name]:.0%} (decompress alone {dec[1] / cpu[name]:.0%})")
            print(line)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
