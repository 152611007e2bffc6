"""Cost of security on the Kafka listener: login time and produce throughput, PLAINTEXT vs
SASL_SSL (TLS + SCRAM-SHA-512) vs SASL_PLAINTEXT (SCRAM-SHA-512), with ACLs enforced.

    .venv/bin/python benchmarks/bench_security.py [--messages 50000] [--logins 20]

Runs the in-process stack of tests/support/security_stack.py (memory metadata store and
MemoryBookKeeper, so storage costs are out of the picture and the figures isolate the
listener), with confluent-kafka clients in worker threads of the same process.
Login: the time from creating a client to its first Metadata answer (TCP, TLS handshake,
SaslHandshake, the two SCRAM round trips).  Produce: `--messages` 100-byte messages,
linger 5 ms, acks=all, one partition; messages/s from the first produce() to the last delivery.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from protocols.kafka import acl_model as m  # noqa: E402
from tests.support.security_stack import make_self_signed_cert, secure_stack  # noqa: E402

USER, PASSWORD = "bench", "bench-password"


def client_config(protocol: str, bootstrap: str, cert: Path) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
    if protocol.startswith("SASL_"):
        config.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                       "sasl.password": PASSWORD})
    if protocol.endswith("SSL"):
        config["ssl.ca.location"] = str(cert)
    return config


def logins(config: dict[str, Any], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        AdminClient(config).list_topics(timeout=10)
        times.append(time.perf_counter() - start)
    return times


def produce_rate(config: dict[str, Any], topic: str, count: int) -> float:
    producer = Producer({**config, "linger.ms": 5, "acks": "all"})
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)
    value = b"x" * 100
    producer.produce(topic, value)  # warm up: metadata and connection
    producer.flush(10)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return count / elapsed


async def run(args: argparse.Namespace, cert: tuple[Path, Path]) -> None:
    print(f"{'listener':<16}{'login median ms':>16}{'login p90 ms':>14}{'produce msg/s':>16}")
    for protocol in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"):
        sasl = ("SCRAM-SHA-512",) if protocol.startswith("SASL_") else None
        tls = cert if protocol.endswith("SSL") else None
        async with secure_stack(sasl_mechanisms=sasl, tls=tls, users={USER: PASSWORD},
                                authorization=sasl is not None) as stack:
            await stack.acls.create([m.AclBinding(m.RES_TOPIC, "bench", m.PAT_PREFIXED,
                                                  f"User:{USER}", "*", m.OP_ALL, m.PERM_ALLOW),
                                     m.AclBinding(m.RES_CLUSTER, m.CLUSTER_NAME, m.PAT_LITERAL,
                                                  f"User:{USER}", "*", m.OP_ALL, m.PERM_ALLOW)])
            config = client_config(protocol, stack.bootstrap, cert[0])
            times = await trio.to_thread.run_sync(logins, config, args.logins)
            rate = await trio.to_thread.run_sync(produce_rate, config, f"bench-{protocol}",
                                                 args.messages)
            p90 = sorted(times)[int(len(times) * 0.9) - 1]
            print(f"{protocol:<16}{statistics.median(times) * 1000:>16.1f}{p90 * 1000:>14.1f}"
                  f"{rate:>16,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--logins", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert = make_self_signed_cert(Path(tmp))
        trio.run(run, args, cert)


if __name__ == "__main__":
    main()
