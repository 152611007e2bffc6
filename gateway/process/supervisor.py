"""`ledgerwire standalone --workers N`: one host, every core, no ZooKeeper.

One Python process runs on one core, so a node that should use N cores runs N broker
processes.  The supervisor (this module) holds the embedded metadata store and serves it to
its children over a unix socket (ledger_backend/metadata/shared_server.py, whose notes say why
this shape); it starts N broker workers, each a cluster broker (gateway/process/
cluster_broker.py) with its own node id and Kafka port that also serves its share of the
node's bookies:

    worker i: node id kafka.broker_id + i, Kafka on the listener port + i (advertised port + i
              when one is set), its admin API on a private unix socket beside the
              store's (admin-i.sock); RocketMQ bundle b on the broker listener port +
              i * bundles + b (likewise the advertised and gRPC ports), and the node's name
              server port, which every worker binds with SO_REUSEPORT; the bookies j with
              j % N == i of max(storage.bookies, N) (bookie port + j, data in bookies/<j>)

Why the bookies live in the workers: with all of them in one process of their own (the
storage.worker_bookies = false shape, kept), every entry crossed to that process and back; a
synchronous RocketMQ send woke the node's event loops ~8 times against 2.5 in the one-process
standalone, and 2 workers sent at 0.24-0.45x the rate of 1.  A worker's ledger client reaches
its own bookies in-process (ledger_backend/bookie/local_bookies.py) and places new ensembles
on them first (PlacementPolicy's prefer), so with the default ensembles of one a worker's adds
never leave its process, as in the one-process standalone.  Durability is unchanged: an
acknowledged entry is fsynced in the journals of Qa bookies either way.  What changes is
availability after a kill: the open ledgers of a dead worker are on its own bookie, so the
worker that takes its bundles over can fence and recover them only once the supervisor has
restarted it (seconds; requests meanwhile are answered with retriable errors), and reads of its
older ledgers wait likewise.  With ensembles larger than one, a dead worker's bookie is one
fewer for new ledgers until it is back.

Workers share the bundles as cluster brokers do (gateway/cluster/ownership.py): a Kafka client
sees N brokers and is sent to each partition's owner.  Each worker is told the others' node
ids and leaves the bundles they win to them while they start, so a new node is ready with
every bundle on its worker (before, the first worker took all and handed the others' back one
per second, 15 s after they joined: moves clients met just after "ready").  When a worker
dies its connection to the store closes, its session's ephemeral nodes go at once, and the
other workers take its bundles over, fencing and recovering the logs (nothing acknowledged is
lost: the cluster's failover, on a store that notices a death in milliseconds).  The
supervisor starts it again; it gets its share back after cluster.handback_delay_s.

Without a configured bookie secret the supervisor makes one per run and hands it to the
bookies and workers over their stdin pipes: only this node's processes can talk to its
bookies.  Children die with the supervisor (PR_SET_PDEATHSIG, worker_main.py) and run in a
process group of their own, so a terminal's Ctrl-C reaches the supervisor only, which stops
them in order: SIGTERM to the workers (they hand off and close their logs, then stop their
bookies), then to the bookies process if there is one, then the store closes.  A restart after
any kill finds everything in the data directory: the store drops the dead processes'
ephemeral nodes when it opens.

The supervisor serves the configured admin listener for the whole node
(gateway/process/node_admin.py): /metrics merges every worker's exposition with a `worker`
label, every other call is forwarded to a worker (worker 0 first; any can answer for the node,
the metadata is shared).

RocketMQ clients see each bundle as one RocketMQ broker ("<cluster>-b<b>") at its owner
worker's port, as with cluster brokers (gateway/rocketmq/cluster.py); any worker's name server
answers routes for the node.  Committed offsets and transaction state are kept per
coordinator partition in every shape (the layout's group_partitions and txn_partitions, fixed
for the life of the data directory, as Kafka's `__consumer_offsets` partition count is): a data
directory moves between 1 and N workers with them.  One a one-process standalone wrote before
that has its single ledgers moved first (single_ledgers.py), before any child starts.

This module must never leave a child running after it returns, and never open a partition
itself (only workers do, under bundle ownership).
"""

from __future__ import annotations

import logging
import os
import pickle
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import trio

from gateway.admin.http_server import serve
from gateway.admin.listener import admin_tls
from gateway.cluster.broker_registry import (
    BUNDLES_PATH,
    LIVE_BROKERS_PATH,
    ClusterLayout,
    init_cluster,
)
from gateway.config.settings import Config, parse_host_port
from gateway.coordinator.partitioned_offsets import pinned_layout
from gateway.process.local_bookies import local_bookie_indexes, worker_bookie_indexes
from gateway.process.node_admin import NodeAdmin
from gateway.process.single_ledgers import move_before_workers
from ledger_backend.bookie.registration import AVAILABLE_BOOKIES_PATH
from ledger_backend.metadata import MetadataError, MetadataStore, open_store
from ledger_backend.metadata.shared_server import serve_shared_store
from ledger_backend.secret_files import make_private_dir

log = logging.getLogger("ledgerwire.supervisor")

RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 15.0
STABLE_AFTER_S = 30.0  # a child that ran this long restarts without backoff
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 60.0


def metadata_socket_path(data_dir: Path) -> str:
    """The store's socket: in the data directory, or a private temporary directory when that
    path is too long for a unix socket (108 bytes)."""
    path = str((data_dir / "metadata.sock").resolve())
    if len(path.encode()) < 100:
        return path
    return str(Path(tempfile.mkdtemp(prefix="ledgerwire-")) / "metadata.sock")


def _shifted(listener: str, by: int) -> str:
    host, port = parse_host_port(listener)
    return f"{host}:{port + by}" if port else listener


def worker_config(config: Config, index: int, admin_socket: str, bundles: int) -> Config:
    """Worker i's configuration: its own node id and Kafka port, its admin API on admin_socket
    (plain HTTP: the supervisor's listener has the TLS), its own range of `bundles` RocketMQ
    bundle ports (broker and gRPC) after the workers before it, no peer port probes."""
    host, port = parse_host_port(config.kafka.listener)
    kafka = replace(config.kafka, broker_id=config.kafka.broker_id + index,
                    listener=f"{host}:{port + index if port else 0}",
                    advertised_port=(config.kafka.advertised_port + index
                                     if config.kafka.advertised_port else 0))
    admin = replace(config.admin, listener=f"unix:{admin_socket}", tls="off")
    r = config.rocketmq
    shift = index * bundles
    rocketmq = replace(r, broker_listener=_shifted(r.broker_listener, shift),
                       advertised_port=r.advertised_port + shift if r.advertised_port else 0,
                       grpc_listener=(_shifted(r.grpc_listener, shift) if r.grpc_listener
                                      else r.grpc_listener))
    # No port probes between workers (gateway/cluster/peer_liveness.py): the shared store ends
    # a dead worker's session when its socket closes, milliseconds after the kill, so a
    # refused port never tells a worker anything sooner; each probe cost both workers a
    # connect, an accept and a closed Kafka connection, four times a second per peer.
    cluster = replace(config.cluster, expel_refusing_brokers=False)
    return replace(config, kafka=kafka, admin=admin, rocketmq=rocketmq, cluster=cluster,
                   workers="1")


def cluster_layout(config: Config, workers: int) -> ClusterLayout:
    """The bundles a new node is cut into (kept on restart, whatever the worker count); its
    coordinator partition counts are ClusterLayout's defaults, or those a one-process run of
    the directory pinned (run_supervisor applies partitioned_offsets.pinned_layout)."""
    return ClusterLayout(config.kafka.cluster_id, max(16, 4 * workers))


class Child:
    """One child process (the bookies or a worker) that is kept running until stopped.

    Children are forked from the Trio thread itself, never from a worker thread (as
    trio.lowlevel.open_process does): PR_SET_PDEATHSIG fires when the *thread* that forked a
    child ends, and Trio retires idle worker threads."""

    def __init__(self, name: str, job: dict[str, Any]) -> None:
        self.name = name
        self.job = job
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.restarts = 0

    async def keep_running(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        delay = RESTART_DELAY_S
        first = True
        while not self.stopping:
            started = trio.current_time()
            payload = pickle.dumps({**self.job, "name": self.name, "parent": os.getpid()})
            self.process = process = fork_child()
            assert process.stdin is not None
            stdin = trio.lowlevel.FdStream(os.dup(process.stdin.fileno()))
            process.stdin.close()
            try:
                await stdin.send_all(payload)
            except trio.BrokenResourceError:
                pass  # it died at once: its exit code says why
            finally:
                await stdin.aclose()
            if first:
                task_status.started()
                first = False
            code = await wait_exit(process)  # (cancelled: the caller kills it)
            if self.stopping:
                return
            ran = trio.current_time() - started
            delay = RESTART_DELAY_S if ran > STABLE_AFTER_S else min(delay * 2,
                                                                      MAX_RESTART_DELAY_S)
            self.restarts += 1
            log.warning("%s exited (%s) after %.1f s; restarting in %.1f s", self.name,
                        _describe(code), ran, delay)
            await trio.sleep(delay)

    async def stop(self, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after grace_s; returns once the process is reaped."""
        self.stopping = True
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace_s) as scope:
            await wait_exit(process)
        if scope.cancelled_caught:
            log.warning("%s did not stop within %.0f s; killing it", self.name, grace_s)
            process.kill()
            await wait_exit(process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def fork_child() -> subprocess.Popen[bytes]:
    """Start worker_main from the calling (Trio) thread: a fork takes milliseconds, and the
    child's PR_SET_PDEATHSIG must be tied to a thread that lives as long as the supervisor."""
    return subprocess.Popen([sys.executable, "-m", "gateway.process.worker_main"],
                            stdin=subprocess.PIPE, start_new_session=True)


async def wait_exit(process: subprocess.Popen[bytes]) -> int:
    """Wait for process to exit without blocking Trio (a pidfd where Linux has them)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # reaped already, or no pidfd: poll
        while process.poll() is None:  # noqa: ASYNC110 (no event to wait on without a pidfd)
            await trio.sleep(0.1)
        return int(process.returncode)
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    return process.wait()


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def raise_if_one_exited(children: list[Child]) -> None:
    for child in children:
        code = None if child.process is None else child.process.poll()
        if code is not None:
            raise RuntimeError(f"{child.name} exited ({_describe(code)}) while starting")


async def wait_for_children(store: MetadataStore, path: str, count: int,
                            children: list[Child]) -> None:
    """Until `count` nodes are under path (bookies or workers registered); fails if a child
    exits first."""
    with trio.fail_after(READY_TIMEOUT_S):
        while True:
            try:
                if len(await store.children(path)) >= count:
                    return
            except MetadataError:
                pass
            raise_if_one_exited(children)
            await trio.sleep(0.1)


async def wait_for_workers_ready(node_admin: NodeAdmin, children: list[Child]) -> None:
    """Until every worker's own /ready answers 200; fails if a child exits first."""
    with trio.fail_after(READY_TIMEOUT_S):
        while True:
            status, _, _ = await node_admin.ready(b"/ready", [])
            if status == 200:
                return
            raise_if_one_exited(children)
            await trio.sleep(0.1)


async def supervise(config: Config, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run the node until SIGINT/SIGTERM (or cancellation), then stop it in order."""
    workers = config.worker_count()
    make_private_dir(config.data_dir)
    if not (config.storage.bookie_secret or config.storage.bookie_secret_file):
        config = replace(config, storage=replace(config.storage,
                                                 bookie_secret=secrets.token_hex(32)))
    metadata_dir = config.data_dir / "metadata"
    store = await open_store(f"embedded:{metadata_dir}")  # takes the directory's lock
    children: list[Child] = []
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                socket_path = await nursery.start(
                    serve_shared_store, partial(open_store, f"embedded:{metadata_dir}"),
                    metadata_socket_path(config.data_dir))
                url = (f"shared:{socket_path}"
                       f"?session_timeout_s={config.cluster.zk_session_timeout_s:g}")
                layout, _ = await init_cluster(
                    store, await pinned_layout(store, cluster_layout(config, workers)))
                await move_before_workers(config, store, layout, workers)  # before any child
                admin_sockets = [str(Path(socket_path).with_name(f"admin-{i}.sock"))
                                 for i in range(workers)]
                await nursery.start(serve_node_admin, config, admin_sockets)
                in_workers = config.storage.worker_bookies
                bookies: Child | None = None
                if not in_workers:  # all bookies in one process of their own
                    bookies = Child("bookies", {"role": "bookies", "config": config,
                                                "metadata_url": url})
                    children.append(bookies)
                    await nursery.start(bookies.keep_running)
                    await wait_for_children(store, AVAILABLE_BOOKIES_PATH,
                                            len(local_bookie_indexes(config)), children)
                for index in range(workers):
                    child = Child(f"worker {index}", {
                        "role": "broker", "config": worker_config(
                            config, index, admin_sockets[index], layout.bundles),
                        "metadata_url": url, "layout": layout,
                        "bookies": (worker_bookie_indexes(config, workers, index)
                                    if in_workers else []),
                        "node_brokers": [config.kafka.broker_id + i for i in range(workers)]})
                    children.append(child)
                    await nursery.start(child.keep_running)
                await wait_for_children(store, LIVE_BROKERS_PATH, workers, children)
                # ready = every bundle (so every partition) has an owner answering for it,
                # and every worker says it is ready (its RocketMQ name server binds last)
                await wait_for_children(store, BUNDLES_PATH, layout.bundles, children)
                await wait_for_workers_ready(NodeAdmin(admin_sockets), children)
                host, port = config.kafka_advertised
                log.info("ledgerwire standalone ready", extra={
                    "workers": workers, "kafka": [f"{host}:{port + i}" for i in range(workers)],
                    "data_dir": str(config.data_dir), "metadata_socket": socket_path})
                print(f"ledgerwire standalone ready: {workers} workers", flush=True)
                task_status.started(socket_path)
                async for signum in signals:
                    log.info("shutting down", extra={"signal": signal.Signals(signum).name})
                    break
                with trio.CancelScope(shield=True):
                    async with trio.open_nursery() as stopping:  # workers hand off together
                        for child in children:
                            if child is not bookies:
                                stopping.start_soon(child.stop, STOP_GRACE_S)
                    if bookies is not None:
                        await bookies.stop(STOP_GRACE_S)
                nursery.cancel_scope.cancel()
    finally:
        for child in children:  # only after an error: never leave one running
            child.stopping = True
            child.kill()
        with trio.CancelScope(shield=True):
            await store.close()
    log.info("ledgerwire standalone stopped")


async def serve_node_admin(config: Config, admin_sockets: list[str], *,
                           task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """The node's admin listener over the workers' sockets; a port in use is logged and the
    node runs on without it (as a one-process broker does)."""
    listener = config.admin_listener()
    if not listener:
        task_status.started()
        return
    host, port = parse_host_port(listener)
    try:
        await serve(NodeAdmin(admin_sockets), host, port, ssl_context=admin_tls(config),
                    task_status=task_status)
    except OSError as exc:
        log.error("admin HTTP API not started: cannot listen on %s: %s", listener, exc)
        task_status.started()


def run_supervisor(config: Config) -> int:
    """The CLI entry: run until stopped; 1 if the node could not start."""
    try:
        trio.run(supervise, config)
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError, RuntimeError, MetadataError, trio.TooSlowError) as exc:
        logging.getLogger("ledgerwire").error("cannot start: %s", exc)
        return 1
    return 0


__all__ = ["run_supervisor", "supervise", "worker_config"]
