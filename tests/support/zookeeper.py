"""A real ZooKeeper server for tests, run as a subprocess from pyspark's bundled jars.

`ZooKeeperServer(tmp_dir)` writes a zoo.cfg into tmp_dir, picks a free loopback port and runs
`java -cp '<pyspark>/jars/*' org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`. It is
ready when the `srvr` four-letter word answers with a `Mode:` line (`ruok` answers before the
server accepts sessions). `stop()` then `start()` restarts it on the same port and data
directory, which is how tests provoke connection loss and session expiry.

Secured variants: `sasl_users={"lw": "pw"}` writes a JAAS file whose Server section holds those
DIGEST-MD5 users and turns on ZooKeeper's SASL authentication provider; `tls=ServerTls(...)`
serves a TLS port (`secure_port`, Netty, PEM key store and trust store, client certificates
required unless client_auth says otherwise) beside the plain one, which stays for readiness
checks and for the tests' anonymous clients.

Synchronous on purpose (usable from plain pytest fixtures). It must never touch a ZooKeeper it
did not start, nor leave its JVM running: `stop()` / the context manager exit always reap it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .ports import free_port

__all__ = ["ServerTls", "ZooKeeperServer", "expire_session", "four_letter_word",
           "pyspark_jars_dir"]


@dataclass(frozen=True)
class ServerTls:
    """The server's TLS files: its certificate chain and key (PEM), the CA it trusts."""

    certfile: Path
    keyfile: Path
    cafile: Path
    client_auth: str = "need"  # ZooKeeper's ssl.clientAuth: none, want or need


def pyspark_jars_dir() -> Path:
    """The directory of jars bundled with pyspark (holds zookeeper-3.9.x.jar)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer ("" on failure)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word.encode("ascii"))
            chunks: list[bytes] = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper server process with its own data dir and port.

    tick_ms sets tickTime; the server clamps session timeouts to [2, 20] ticks, so the default
    500 ms allows sessions from 1 s to 10 s (short sessions make expiry tests quick).
    """

    def __init__(
        self,
        tmp_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        tick_ms: int = 500,
        start_timeout_s: float = 60.0,
        max_heap: str = "256m",
        sasl_users: dict[str, str] | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.base_dir = Path(tmp_dir)
        self.data_dir = self.base_dir / "zk-data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.tick_ms = tick_ms
        self.start_timeout_s = start_timeout_s
        self.max_heap = max_heap
        self.sasl_users = dict(sasl_users or {})
        self.tls = tls
        self.secure_port = free_port() if tls is not None else None
        self.jaas_path = self.base_dir / "zk-jaas.conf"
        self.keystore_path = self.base_dir / "zk-keystore.pem"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def secure_connect_string(self) -> str:
        assert self.secure_port is not None, "a server started without tls"
        return f"{self.host}:{self.secure_port}"

    def store_url(self, chroot: str = "", **options: float) -> str:
        """A metadata store URL for this server: "zk://127.0.0.1:PORT/chroot?opt=value"."""
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"zk://{self.connect_string}{chroot}" + (f"?{query}" if query else "")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            # a test server: keep the txn log small and skip fsync (the OS still keeps the
            # data across a process restart, which is all the restart tests need)
            "preAllocSize=4096",
            "forceSync=no",
            "autopurge.purgeInterval=0",
        ]
        if self.sasl_users:
            users = "".join(f'    user_{name}="{password}"\n'
                            for name, password in self.sasl_users.items())
            self.jaas_path.write_text("Server {\n"
                                      "    org.apache.zookeeper.server.auth.DigestLoginModule "
                                      f"required\n{users.rstrip()};\n}};\n")
            lines.append("authProvider.sasl="
                         "org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
        if self.tls is not None:
            # the key store is one PEM file holding the key and the certificate chain
            self.keystore_path.write_text(self.tls.keyfile.read_text()
                                          + self.tls.certfile.read_text())
            lines += [
                f"secureClientPort={self.secure_port}",
                f"secureClientPortAddress={self.host}",
                f"ssl.keyStore.location={self.keystore_path}",
                "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.tls.cafile}",
                "ssl.trustStore.type=PEM",
                f"ssl.clientAuth={self.tls.client_auth}",
            ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _command(self) -> list[str]:
        command = [
            "java",
            f"-Xmx{self.max_heap}",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dlog4j2.level=WARN",
        ]
        if self.sasl_users:
            command.append(f"-Djava.security.auth.login.config={self.jaas_path}")
        if self.tls is not None:
            command.append("-Dzookeeper.serverCnxnFactory="
                           "org.apache.zookeeper.server.NettyServerCnxnFactory")
        return command + ["-cp", str(pyspark_jars_dir() / "*"),
                          "org.apache.zookeeper.server.ZooKeeperServerMain",
                          str(self.config_path)]

    def start(self) -> ZooKeeperServer:
        """Start the server (same port and data dir as before) and wait until it serves."""
        if self.running:
            return self
        self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self._proc.returncode} during start; "
                    f"log tail:\n{self._log_tail()}"
                )
            if "Mode:" in four_letter_word(self.host, self.port, "srvr", timeout_s=1.0):
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(
            f"ZooKeeper on {self.connect_string} not serving after {self.start_timeout_s}s; "
            f"log tail:\n{self._log_tail()}"
        )

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, or SIGKILL with kill=True) and wait until it is gone."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        # the port must be really free before a restart binds it again
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and four_letter_word(self.host, self.port, "ruok", 0.5):
            time.sleep(0.05)

    def restart(self, *, down_for_s: float = 0.0, kill: bool = False) -> None:
        """Stop, stay down for down_for_s seconds, start again on the same port and data dir."""
        self.stop(kill=kill)
        if down_for_s > 0:
            time.sleep(down_for_s)
        self.start()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer({self.connect_string}, running={self.running})"


def expire_session(connect_string: str, client_id: tuple[int, bytes]) -> None:
    """Make the server expire a live session: join it from a second client, then close that.

    Closing a session from any connection ends it for good, so the first client sees its
    connection drop and, on reconnecting, SESSION_EXPIRED (its ephemeral nodes are gone).
    """
    from kazoo.client import KazooClient  # imported here: only tests that expire need it

    session_id, password = client_id
    thief = KazooClient(hosts=connect_string, client_id=(session_id, password), timeout=10)
    thief.start(timeout=15)
    try:
        thief.stop()
    finally:
        thief.close()
