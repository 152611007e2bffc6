"""A real ledgerwire cluster on loopback for tests and benchmarks: one ZooKeeper server,
`ledgerwire bookie` and `ledgerwire broker` subprocesses, each with its own log file.

`secure=True` runs it as a locked-down cluster: every bookie and broker has the cluster's bookie
secret (bookies refuse unauthenticated connections) and a ledger password (brokers' ledgers take
adds, fences and recovery adds only with its key; the bookies' auto-recovery has it too), and
the metadata URL names a ZooKeeper digest identity in an auth_file (every znode closed to
other clients).  `zk_sasl_tls=True` (with secure) has that identity log in with SASL DIGEST-MD5
over ZooKeeper's TLS port instead, with client certificates from a throwaway CA (the server
keeps its plain port for readiness checks and the tests' anonymous clients).

Synchronous (plain subprocess), so pytest fixtures, confluent-kafka code and the benchmark
scripts can all drive it.  Processes can be SIGKILLed, SIGSTOPped and SIGCONTed by the tests.
It must never leave a process running: `close()` reaps everything it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

from support.pki import issue, make_ca  # noqa: E402
from support.ports import free_port, free_port_range  # noqa: E402
from support.zookeeper import ServerTls, ZooKeeperServer  # noqa: E402

from gateway.cluster.bundle_placement import target_broker  # noqa: E402


class Process:
    def __init__(self, name: str, args: list[str], log_path: Path, ready_text: bytes) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        self.ready_text = ready_text
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0, wait: bool = True) -> None:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "gateway", *self.args],
                                         cwd=REPO, stdout=log, stderr=log,
                                         env=dict(os.environ), start_new_session=True)
        if not wait:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            if self.ready_text in self.log_path.read_bytes()[offset:]:
                return
            time.sleep(0.05)
        self.proc.kill()  # never leave a half-started process behind a failed test
        self.proc.wait()
        raise RuntimeError(f"{self.name} not ready in {timeout_s} s:\n{self.log()}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-15000:]

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Cluster:
    """ZooKeeper + bookies + brokers (see the module docstring)."""

    def __init__(self, base: Path, *, bookies: int = 3, brokers: int = 2,
                 quorum: tuple[int, int, int] = (3, 2, 2), session_timeout_s: float = 4.0,
                 partitions: int = 6, bundles: int = 16, lost_bookie_delay_s: float = 2.0,
                 open_ledger_grace_s: float = 4.0, autorecovery: bool = True,
                 fsync: bool = False, broker_args: list[str] | None = None,
                 rocketmq: bool = False, secure: bool = False, zk_sasl_tls: bool = False,
                 handback_delay_s: float | None = 0.0, zk_tick_ms: int = 500) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.secure = secure
        self.bookie_secret_file = base / "bookie.secret"
        self.zk_auth_file = base / "zk.auth"
        self.ledger_password_file = base / "ledger.password"
        if secure:
            for path, text in ((self.bookie_secret_file, f"bookie-{os.urandom(12).hex()}"),
                               (self.zk_auth_file, f"ledgerwire:{os.urandom(12).hex()}"),
                               (self.ledger_password_file, os.urandom(12).hex())):
                path.write_text(text + "\n")
                path.chmod(0o600)
        (base / "zk").mkdir(exist_ok=True)
        self.zk_tls_query = ""
        if zk_sasl_tls:
            assert secure, "zk_sasl_tls secures a secure cluster's ZooKeeper"
            user, _, password = self.zk_auth_file.read_text().strip().partition(":")
            (base / "pki").mkdir(exist_ok=True)
            ca = make_ca(base / "pki")
            server = issue(base / "pki", ca, "zk", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
            client = issue(base / "pki", ca, "ledgerwire", "/CN=ledgerwire")
            self.zk = ZooKeeperServer(base / "zk", sasl_users={user: password}, tick_ms=zk_tick_ms,
                                      tls=ServerTls(server[0], server[1], ca[0]))
            self.zk_tls_query = (f"&sasl=DIGEST-MD5&tls=true&tls_cafile={ca[0]}"
                                 f"&tls_certfile={client[0]}&tls_keyfile={client[1]}")
        else:
            # ZooKeeper ends a session at the first tick past its timeout: a shorter tick is
            # a quicker failover (sessions of 2 to 20 ticks are allowed)
            self.zk = ZooKeeperServer(base / "zk", tick_ms=zk_tick_ms)
        self.quorum = quorum
        self.session_timeout_s = session_timeout_s
        self.partitions = partitions
        self.bundles = bundles
        self.lost_bookie_delay_s = lost_bookie_delay_s
        self.open_ledger_grace_s = open_ledger_grace_s
        self.autorecovery = autorecovery
        self.fsync = fsync
        self.bookies: list[Process] = []
        self.brokers: dict[int, Process] = {}
        self.broker_ports: dict[int, int] = {}
        self.admin_ports: dict[int, int] = {}  # each broker's admin HTTP API (/health, ...)
        self.broker_args = list(broker_args or [])  # extra `ledgerwire broker` arguments
        # 0: a joining broker gets its share at once (what most tests expect); None: the
        # broker's default delayed hand-back (gateway/cluster/ownership.py)
        if handback_delay_s is not None:
            self.broker_args += ["--handback-delay", str(handback_delay_s)]
        self._n_bookies = bookies
        self._n_brokers = brokers
        # RocketMQ (off unless asked: a broker binds `bundles` ports for it)
        self.rocketmq = rocketmq
        self.rocketmq_base_ports: dict[int, int] = {}  # bundle b on base + b
        self.name_server_ports: dict[int, int] = {}
        self.grpc_base_ports: dict[int, int] = {}  # RocketMQ 5: bundle b on base + b

    @property
    def metadata_url(self) -> str:
        url = self.zk.store_url("/ledgerwire-test", session_timeout_s=self.session_timeout_s)
        if self.zk_tls_query:
            url = url.replace(self.zk.connect_string, self.zk.secure_connect_string)
        return url + (f"&auth_file={self.zk_auth_file}{self.zk_tls_query}" if self.secure
                      else "")

    @property
    def secret_args(self) -> list[str]:
        """The bookie-secret and ledger-password flags of bookie, broker, autorecovery and
        recover commands."""
        return ["--bookie-secret-file", str(self.bookie_secret_file), "--ledger-password-file",
                str(self.ledger_password_file)] if self.secure else []  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for i, p in sorted(self.broker_ports.items())
                        if self.brokers[i].alive)

    def start(self) -> Cluster:
        self.zk.start()
        init = self.cli("cluster", "init", "--bundles", str(self.bundles))
        if init.returncode != 0:
            raise RuntimeError(f"cluster init failed: {init.stdout}{init.stderr}")
        for _ in range(self._n_bookies):
            self.add_bookie()
        for node_id in range(1, self._n_brokers + 1):
            self.add_broker(node_id)
        if self._n_brokers:
            self.wait_all_bundles_owned()
        return self

    def add_bookie(self) -> Process:
        index = len(self.bookies)
        port = free_port()
        args = ["bookie", "--metadata", self.metadata_url, "--data-dir",
                str(self.base / f"bookie-{index}"), "--port", str(port),
                "--lost-bookie-delay", str(self.lost_bookie_delay_s),
                "--open-ledger-grace", str(self.open_ledger_grace_s),
                "--audit-interval", "1", *self.secret_args]
        if not self.fsync:
            args.append("--unsafe-no-fsync")
        if not self.autorecovery:
            args.append("--no-autorecovery")
        bookie = Process(f"bookie-{index}", args, self.base / f"bookie-{index}.log",
                         b"listening on")
        bookie.bookie_id = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
        bookie.start()
        self.bookies.append(bookie)
        return bookie

    def add_broker(self, node_id: int, wait: bool = True) -> Process:
        port = self.broker_ports.get(node_id) or free_port()
        admin_port = self.admin_ports.get(node_id) or free_port()
        e, qw, qa = self.quorum
        args = ["broker", "--metadata", self.metadata_url, "--broker-id", str(node_id),
                "--kafka-listener", f"127.0.0.1:{port}", "--data-dir",
                str(self.base / f"broker-{node_id}"), "--ensemble-size", str(e),
                "--write-quorum", str(qw), "--ack-quorum", str(qa),
                "--default-partitions", str(self.partitions), "--bundles", str(self.bundles),
                "--group-initial-rebalance-delay-ms", "0", "--log-format", "text",
                "--admin-listener", f"127.0.0.1:{admin_port}", *self._rocketmq_args(node_id),
                *self.secret_args, *self.broker_args]
        broker = Process(f"broker-{node_id}", args, self.base / f"broker-{node_id}.log",
                         b"ready on")
        self.brokers[node_id] = broker
        self.broker_ports[node_id] = port
        self.admin_ports[node_id] = admin_port
        broker.start(wait=wait)
        return broker

    def _rocketmq_args(self, node_id: int) -> list[str]:
        if not self.rocketmq:
            return ["--no-rocketmq"]
        base = self.rocketmq_base_ports.get(node_id) or free_port_range(self.bundles)
        ns = self.name_server_ports.get(node_id) or free_port()
        self.rocketmq_base_ports[node_id], self.name_server_ports[node_id] = base, ns
        grpc = self.grpc_base_ports.get(node_id) or 0
        while not grpc or abs(grpc - base) < self.bundles:  # ranges picked now, bound later
            grpc = free_port_range(self.bundles)
        self.grpc_base_ports[node_id] = grpc
        return ["--rocketmq", "--rocketmq-broker-listener", f"127.0.0.1:{base}",
                "--rocketmq-name-server-listener", f"127.0.0.1:{ns}",
                "--rocketmq-grpc-listener", f"127.0.0.1:{grpc}"]

    def grpc_endpoint(self, node_id: int, bundle: int = 0) -> str:
        """The RocketMQ 5 (gRPC) port of `bundle` on broker `node_id` (routes on any)."""
        return f"127.0.0.1:{self.grpc_base_ports[node_id] + bundle}"

    def name_server(self, node_id: int) -> str:
        return f"127.0.0.1:{self.name_server_ports[node_id]}"

    def admin_url(self, node_id: int) -> str:
        return f"http://127.0.0.1:{self.admin_ports[node_id]}"

    def cli(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway", *args,
                               "--metadata", self.metadata_url],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout_s)

    def status(self) -> dict:
        result = self.cli("cluster", "status")
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        return json.loads(result.stdout)

    def bundle_owners(self) -> dict[int, int]:
        return {int(b): o for b, o in self.status()["bundle_owners"].items()}

    def wait_all_bundles_owned(self, timeout_s: float = 60.0,
                               by: set[int] | None = None) -> dict[int, int]:
        deadline = time.monotonic() + timeout_s
        owners: dict[int, int] = {}
        while time.monotonic() < deadline:
            owners = self.bundle_owners()
            if len(owners) == self.bundles and (by is None or set(owners.values()) <= by):
                return owners
            time.sleep(0.3)
        raise TimeoutError(f"bundles not all owned (by {by}): {owners}")

    def wait_bundles_on_targets(self, brokers: list[int], timeout_s: float = 90.0
                                ) -> dict[int, int]:  # fmt: skip
        """Until every bundle sits on its rendezvous target among `brokers`: a broker that
        joins is handed its share by the others' next ownership rounds (after the hand-back
        delay), not at once, so "every bundle owned" alone may still be the old spread."""
        targets = {b: target_broker(b, brokers) for b in range(self.bundles)}
        deadline = time.monotonic() + timeout_s
        while (owners := self.bundle_owners()) != targets:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bundles not on their targets {targets}: {owners}")
            time.sleep(0.3)
        return owners

    def partition_owner(self, topic: str, partition: int) -> int | None:
        import zlib

        bundle = (zlib.crc32(topic.encode()) + partition) % self.bundles
        return self.bundle_owners().get(bundle)

    def logs(self) -> str:
        parts = []
        for p in [*self.brokers.values(), *self.bookies]:
            parts.append(f"===== {p.name}\n{p.log()[-5000:]}")
        return "\n".join(parts)

    def close(self) -> None:
        for p in self.brokers.values():
            p.kill()
        for p in self.bookies:
            p.kill()
        self.zk.stop(kill=True)

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
