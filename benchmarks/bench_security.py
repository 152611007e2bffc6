"""Cost of security on the Kafka port: produce and consume throughput and the broker's CPU per
message, PLAINTEXT without ACLs against SASL_SSL (TLS + SCRAM-SHA-512) with ACLs enforced, and
SASL_PLAINTEXT (SCRAM-SHA-512) with ACLs (the login and authorization checks without TLS).

    .venv/bin/python benchmarks/bench_security.py [--messages 100000] [--partitions 1]
                                                   [--repeat 3] [--logins 10]
                                                   [--protocols PLAINTEXT,SASL_SSL]
                                                   [--peer /path/to/other/checkout]

Each configuration is a real `ledgerwire standalone` (fsync on, one bookie), started in turn on
this machine and driven by the same confluent-kafka code as benchmarks/bench_kafka.py: 1 KB
values, acks=all, linger.ms=5, batch.size=131072; a consumer then reads the topic back from
offset 0.  The secured brokers' user holds a prefixed ALLOW ALL on the benchmark topics and
its group (the authorizer walks the ACL store on every request).  The broker's CPU is user +
system time of its process, all threads, from /proc.  Login: creating a client until its
first Metadata answer (TCP, TLS handshake, SaslHandshake and the SCRAM round trips).  The
overhead lines compare each secured configuration with PLAINTEXT from this one run; with
--repeat N each configuration runs N rounds on fresh brokers, in rotated order (the first
broker started ran slower on a loaded machine), and the figures are medians.  --peer PATH
adds each configuration once more as "<protocol>@peer", its broker run from another checkout
(say `git worktree add --detach /tmp/before HEAD~1`), to compare a change with its parent in
one run on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_kafka import consume_throughput, produce_throughput  # noqa: E402
from common import cpu_seconds  # noqa: E402

from tests.support.security_stack import make_self_signed_cert  # noqa: E402
from tests.support.standalone import Standalone  # noqa: E402

USER, PASSWORD = "bench", "bench-password"
ADMIN, ADMIN_PASSWORD = "admin", "admin-password"
PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")


def broker_config(directory: Path, protocol: str, cert: tuple[Path, Path]) -> Path:
    path = directory / f"{protocol}.toml"
    if protocol == "PLAINTEXT":
        path.write_text('[kafka]\nsecurity_protocol = "PLAINTEXT"\n'
                        '[security]\nauthorization = "off"\n')
        return path
    tls = (f'ssl_certfile = "{cert[0]}"\nssl_keyfile = "{cert[1]}"\n'
           if protocol == "SASL_SSL" else "")
    path.write_text(f"""
[kafka]
security_protocol = "{protocol}"
sasl_mechanisms = ["SCRAM-SHA-512"]
{tls}
[security]
authorization = "on"
super_users = ["User:{ADMIN}"]
users = [{{ name = "{USER}", password = "{PASSWORD}" }},
         {{ name = "{ADMIN}", password = "{ADMIN_PASSWORD}" }}]
""")
    path.chmod(0o600)
    return path


def client_config(protocol: str, bootstrap: str, cert: Path, user: str = USER,
                  password: str = PASSWORD) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
    if protocol.startswith("SASL_"):
        config.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                       "sasl.password": password})
    if protocol.endswith("SSL"):
        config["ssl.ca.location"] = str(cert)
    return config


@contextmanager
def broker(directory: Path, protocol: str, cert: tuple[Path, Path],
           source: Path | None = None) -> Iterator[Standalone]:
    directory.mkdir(parents=True, exist_ok=True)
    config = broker_config(directory, protocol, cert)
    server = Standalone(directory / f"data-{protocol}-{'peer' if source else 'this'}",
                        extra_args=["--config", str(config), "--log-level", "WARNING"],
                        source=source)
    server.start(timeout_s=60)
    try:
        yield server
    finally:
        server.stop()


def prepare(protocol: str, bootstrap: str, cert: Path, topic: str, partitions: int) -> None:
    admin = AdminClient(client_config(protocol, bootstrap, cert, ADMIN, ADMIN_PASSWORD))
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)
    if protocol != "PLAINTEXT":
        grants = [AclBinding(kind, "bench", ResourcePatternType.PREFIXED, f"User:{USER}", "*",
                             AclOperation.ALL, AclPermissionType.ALLOW)
                  for kind in (ResourceType.TOPIC, ResourceType.GROUP)]
        for future in admin.create_acls(grants).values():
            future.result(30)
    time.sleep(0.5)


def logins(config: dict[str, Any], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        AdminClient(config).list_topics(timeout=10)
        times.append(time.perf_counter() - start)
    return times


def measure(server: Standalone, protocol: str, cert: Path, args: argparse.Namespace,
            round_: int, label: str = "") -> dict[str, float]:
    """One round's figures on this broker: login median, then produce and consume."""
    assert server.proc is not None
    pid = server.proc.pid
    config = client_config(protocol, server.bootstrap, cert)
    results = {"login median ms": statistics.median(logins(config, args.logins)) * 1000}
    topic = f"bench-{round_}"
    prepare(protocol, server.bootstrap, cert, topic, args.partitions)
    for name, work in (("produce", produce_throughput), ("consume", consume_throughput)):
        before = cpu_seconds(pid)
        results[f"{name} msg/s"] = work(server.bootstrap, topic, args.partitions,
                                        args.messages, config)
        after = cpu_seconds(pid)
        if before is not None and after is not None:
            results[f"{name} cpu us/msg"] = (after - before) * 1e6 / args.messages
    print(f"  round {round_ + 1} {label or protocol}: "
          + ", ".join(f"{k} {v:,.1f}" for k, v in results.items()), flush=True)
    return results


def overhead(plain: dict[str, float], secured: dict[str, float], metric: str) -> float:
    """How much worse `secured` is, in percent (fewer msg/s, or more CPU per message)."""
    if metric.endswith("msg/s"):
        return (plain[metric] / secured[metric] - 1) * 100
    return (secured[metric] / plain[metric] - 1) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds (each configuration on a fresh broker, the order "
                             "rotated); the figures are their medians")
    parser.add_argument("--logins", type=int, default=10)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--peer", type=Path, default=None,
                        help="another checkout: each configuration also runs from it")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cert = make_self_signed_cert(directory)
        protocols = args.protocols.split(",")
        if args.peer is not None:
            protocols += [f"{protocol}@peer" for protocol in protocols]
        rounds: dict[str, list[dict[str, float]]] = {p: [] for p in protocols}
        for round_ in range(args.repeat):
            # a fresh broker per round, the order rotated: no configuration always goes first
            for name in protocols[round_ % len(protocols):] + \
                    protocols[:round_ % len(protocols)]:
                protocol, _, peer = name.partition("@")
                with broker(directory / f"round-{round_}", protocol, cert,
                            args.peer if peer else None) as server:
                    rounds[name].append(measure(server, protocol, cert[0], args, round_, name))
        for protocol, runs in rounds.items():
            results[protocol] = {metric: statistics.median(run[metric] for run in runs)
                                 for metric in runs[0]}
    metrics = list(next(iter(results.values())))
    print("\nmedians:" if args.repeat > 1 else "")
    print(f"{'metric':22}" + "".join(f"{p:>16}" for p in results))
    for metric in metrics:
        print(f"{metric:22}" + "".join(f"{results[p][metric]:>16,.1f}" for p in results))
    plain = results.get("PLAINTEXT")
    if plain is None:
        return
    print("\noverhead against PLAINTEXT without ACLs (fewer msg/s, more broker CPU per message):")
    for protocol, secured in results.items():
        if protocol == "PLAINTEXT":
            continue
        figures = ", ".join(f"{metric} {overhead(plain, secured, metric):+.1f}%"
                            for metric in metrics if "login" not in metric)
        acls = "" if protocol.startswith("PLAINTEXT") else " + ACLs"
        print(f"  {protocol}{acls}: {figures}")


if __name__ == "__main__":
    main()
