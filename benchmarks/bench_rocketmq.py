"""RocketMQ send and push-consume throughput, and send latency, with the official C++ client.

    .venv/bin/python benchmarks/bench_rocketmq.py [--messages 20000]
                                                  [--memory | --standalone | --namesrv H:P]
    .venv/bin/python benchmarks/bench_rocketmq.py --request-path [--messages 3000]
    .venv/bin/python benchmarks/bench_rocketmq.py --durable-path [--messages 500]

By default it starts a ledgerwire RocketMQ broker + name server in a subprocess on the durable
ledger backend (embedded metadata store, one bookie with fsync: tests/rocketmq/durable_server.py);
--memory uses the in-memory backend instead (MemoryBookKeeper: the protocol and broker path
alone); --standalone runs `ledgerwire standalone` (durable too; its ledger client reaches the
in-process bookie without the wire); --namesrv drives a running server.  Driver:
rocketmq-client-python 0.5.0rc2 (C++ client), 1 KB bodies with a tag and a key: send_sync from
1 thread and from 8 threads (msg/s, p50/p99 latency), then one push consumer reading everything
back (msg/s).  When the benchmark starts the server itself it also prints the server's CPU time
per message of each phase (user + system, all threads, from /proc) and this client's: less
noisy than msg/s on a shared machine; with Linux `perf` available, also the server's user-space
instructions per message of each send phase (steadier still: other load hardly moves it; it
includes the producers' warm-up sends and route lookups, the same in every run).

--standalone --baseline DIR [--rounds N] runs the same phases against `ledgerwire standalone`
from another checkout DIR (say `git archive <commit>` of main before a change) and this one,
alternating, N rounds each, then prints the medians and this/baseline ratios: one window, one
load, both sides.  Every phase line carries the 1-minute load average.

--request-path measures the broker's own Python per message without sockets, bookies or
clients: send frames (a C++ client's SEND_MESSAGE_V2 header, 1 KB body) decoded, dispatched
and answered on the in-memory backend, then pulled back 32 at a time as a push consumer asks;
thread CPU µs per message of each (what the remoting, header, properties, batch-building and
pull-encoding work costs, apart from Trio's I/O and the ledger's replication), and the Python
and C function calls per message (sys.setprofile; deterministic, unlike time on a shared box).

--durable-path counts, for a synchronous send as `ledgerwire standalone` serves it (bookie
storage with its journal and fsync, the ledger client reaching it in-process, a raw remoting
client over loopback TCP), the broker's Trio task steps and its Python and C function calls
per send: only the steps of the tasks a send runs through (the listener's, the local bookie's
worker, the journal's, the write thread's completion) and the scheduler's calls between steps,
not this client's nor timer tasks' (the ledger client's timeout sweep, the explicit-LAC timer,
the bookie checkpoint: their number per send depends on how fast the machine is; listed apart).
Exact on a loaded machine, where CPU time is not.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BODY = os.urandom(1024)


def serve() -> None:
    import trio

    from ledger_backend.client.memory import MemoryBookKeeper
    from ledger_backend.metadata import open_store
    from tests.rocketmq.conftest import start_stack

    async def main() -> None:
        store = await open_store("memory:")
        async with MemoryBookKeeper(store) as bk, trio.open_nursery() as nursery:
            stack = await start_stack(store, bk, nursery)
            print(stack.name_server_addr, flush=True)
            await trio.sleep_forever()

    trio.run(main)


def request_path(count: int) -> None:
    import trio

    from ledger_backend.client.memory import MemoryBookKeeper
    from ledger_backend.metadata import open_store
    from protocols.rocketmq.codec import decode_command, encode_command, make_request
    from protocols.rocketmq.dispatch import dispatch
    from protocols.rocketmq.request_codes import RequestCode
    from tests.rocketmq.conftest import start_stack

    class Conn:
        peer = ("127.0.0.1", 40000)
        connection_id = 1

        def send_request(self, command: object) -> bool:
            return False

    def send_frame(i: int) -> bytes:
        props = (f"KEYS\x01k{i}\x02TAGS\x01Bench\x02UNIQ_KEY\x01AC110001{i:024X}\x02"
                 "WAIT\x01true\x02")
        request = make_request(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "bench", "c": "TBW102", "d": 4, "e": 0, "f": 0,
            "g": 1764100000123, "h": 0, "i": props, "j": 0, "k": False, "m": False}, BODY)
        return encode_command(request)[4:]

    async def main() -> None:
        store = await open_store("memory:")
        async with MemoryBookKeeper(store) as bk, trio.open_nursery() as nursery:
            stack = await start_stack(store, bk, nursery)
            conn: Any = Conn()
            frames = [send_frame(i) for i in range(count + 10)]
            for frame in frames[:10]:  # the topic is created, the queue opened
                await dispatch(stack.broker, conn, decode_command(frame))
            calls = {"call": 0, "c_call": 0}

            def counting(frame: Any, event: str, arg: Any) -> None:
                if event in calls:
                    calls[event] += 1

            start = time.thread_time()
            for frame in frames[10:-100]:
                encode_command(await dispatch(stack.broker, conn, decode_command(frame)))
            send_us = (time.thread_time() - start) / (count - 100) * 1e6
            sys.setprofile(counting)
            for frame in frames[-100:]:
                encode_command(await dispatch(stack.broker, conn, decode_command(frame)))
            sys.setprofile(None)
            send_calls = f"{calls['call'] / 100:.0f} + {calls['c_call'] / 100:.0f}"
            calls.update(call=0, c_call=0)
            offset = got = 0
            start = time.thread_time()
            while offset < count + 10:
                if offset >= 320 and sys.getprofile() is None and calls["call"] == 0:
                    pull_us = (time.thread_time() - start) / got * 1e6
                    counted_from = offset
                    sys.setprofile(counting)
                pull = make_request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "CG", "topic": "bench", "queueId": 0, "queueOffset": offset,
                    "maxMsgNums": 32, "sysFlag": 0, "commitOffset": -1,
                    "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                    "expressionType": "TAG"})
                answer = await dispatch(stack.broker, conn,
                                        decode_command(encode_command(pull)[4:]))
                encode_command(answer)
                got += int(answer.ext_fields["nextBeginOffset"]) - offset
                offset = int(answer.ext_fields["nextBeginOffset"])
            sys.setprofile(None)
            pulled = offset - counted_from
            print(f"request path (memory backend, no sockets): send {send_us:.1f} us/msg, "
                  f"pull {pull_us:.1f} us/msg (thread CPU); function calls (Python + C) per "
                  f"send {send_calls}, per pulled message {calls['call'] / pulled:.1f} + "
                  f"{calls['c_call'] / pulled:.1f}")
            nursery.cancel_scope.cancel()

    trio.run(main)


def durable_path(count: int) -> None:
    import collections

    import trio

    from ledger_backend.metadata import open_store
    from protocols.rocketmq.errors import ResponseCode
    from protocols.rocketmq.request_codes import RequestCode
    from tests.rocketmq.conftest import durable_stack
    from tests.rocketmq.remoting_client import RawClient
    from tests.rocketmq.test_rocketmq_broker_raw import send_ext

    # the tasks a send runs through; every other task's steps are listed apart (timers whose
    # steps per send depend on the machine's speed, and anything new)
    send_tasks = ("rocketmq.listener.", "LocalBookieConnection._answer_requests",
                  "TrioToken.run_sync_soon", "Journal.run")
    steps: collections.Counter[str] = collections.Counter()
    calls = {"call": 0, "c_call": 0}

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps[task.name] += 1

    def counting(frame: Any, event: str, arg: Any) -> None:
        if event in calls:
            try:
                name = trio.lowlevel.current_task().name
            except RuntimeError:  # the scheduler itself, between steps: counted
                name = "TrioToken.run_sync_soon"
            if any(part in name for part in send_tasks):
                calls[event] += 1

    async def main() -> None:
        store = await open_store("memory:")
        with tempfile.TemporaryDirectory() as tmp:
            async with durable_stack(store, Path(tmp) / "bookie", fsync=True,
                                     timeout_s=30) as stack:
                client = await RawClient.connect(stack.broker_addr)
                header = send_ext("bench", {"TAGS": "Bench", "KEYS": "k"})
                for i in range(count + 10):  # the first 10: topic, partition, first ledger
                    if i == 10:
                        trio.lowlevel.add_instrument(Steps())
                        sys.setprofile(counting)
                    r = await client.call(RequestCode.SEND_MESSAGE_V2, header, BODY)
                    assert r.code == ResponseCode.SUCCESS, r.remark
                sys.setprofile(None)
                counted = {k: v for k, v in steps.items() if any(p in k for p in send_tasks)}
                print(f"durable path (in-process bookie, fsync, loopback TCP): per send "
                      f"{sum(counted.values()) / count:.2f} broker task steps, "
                      f"{calls['call'] / count:.0f} Python + {calls['c_call'] / count:.0f} C "
                      f"function calls")
                for name, n in sorted(steps.items(), key=lambda kv: -kv[1]):
                    where = "" if name in counted else "  (not counted)"
                    print(f"  {n / count:5.2f} steps  {name}{where}")
                await client.aclose()

    trio.run(main)


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` (all its threads) so far; None if unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_note(pid: int | None, before: float | None, messages: int) -> str:
    """Server (and this client's) CPU µs per message since `before` (process_cpu_s values)."""
    after = process_cpu_s(pid)
    if before is None or after is None or not messages:
        return ""
    return f"   server CPU {(after - before) / messages * 1e6:.0f} us/msg"


class InstructionCounter:
    """User-space instructions the server process executes during one phase, counted by
    `perf stat` (Linux; None where perf is missing or not permitted).  Unlike CPU time this
    barely moves with other load on a shared machine, so small changes show."""

    def __init__(self, pid: int | None) -> None:
        self._proc: subprocess.Popen[str] | None = None
        if pid is None or shutil.which("perf") is None:
            return
        self._proc = subprocess.Popen(
            ["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)  # attached before the phase starts

    def note(self, messages: int) -> str:
        if self._proc is None or not messages:
            return ""
        self._proc.send_signal(signal.SIGINT)
        _out, err = self._proc.communicate(timeout=10)
        for line in err.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
                return f", {int(fields[0]) / messages / 1e3:.0f}k instr/msg"
        return ""


def journal_groups(admin_port: int | None) -> float | None:
    """Journal groups written so far (the bookies' fsync histogram count, from the admin
    port's /metrics); None where unknown."""
    if admin_port is None:
        return None
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    counts = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("ledgerwire_journal_fsync_seconds_count")]
    return sum(counts) if counts else None


def group_note(admin_port: int | None, before: float | None, messages: int) -> str:
    """Messages per journal group since `before` (a journal_groups value)."""
    after = journal_groups(admin_port)
    if before is None or after is None or after <= before:
        return ""
    return f"   {messages / (after - before):.2f} msg/group"


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def client_note(before: float, messages: int) -> str:
    return f", client {(client_cpu_s() - before) / messages * 1e6:.0f}"


def send_run(namesrv: str, topic: str, count: int, threads: int) -> tuple[float, list[float]]:
    from rocketmq.client import Message, Producer
    from rocketmq.exceptions import ProducerSendSyncFailed
    from rocketmq.ffi import dll

    latencies: list[float] = []
    retries = [0]
    lock = threading.Lock()
    producers = []
    for i in range(threads):
        p = Producer(f"BENCH_PG_{threads}_{i}", timeout=10_000)
        # its own client instance (factory, connections): the C++ client's shared transport
        # table otherwise makes concurrent senders fail with "get timed_mutex timeout"
        dll.SetProducerInstanceName(p._handle, f"bench-{threads}-{i}".encode())
        p.set_namesrv_addr(namesrv)
        p.start()
        producers.append(p)
    for p in producers:  # each producer has the route and a connection before the clock starts
        warm = Message(topic)
        warm.set_body(BODY)
        for attempt in range(5):  # the first send of a new topic can fail while it is created
            try:
                p.send_sync(warm)
                break
            except ProducerSendSyncFailed:
                if attempt == 4:
                    raise
                time.sleep(0.2)

    def work(p: Producer, n: int) -> None:
        mine = []
        for j in range(n):
            m = Message(topic)
            m.set_tags("Bench")
            m.set_keys(f"k{j}")
            m.set_body(BODY)
            t0 = time.perf_counter()
            for attempt in range(5):
                try:
                    p.send_sync(m)
                    break
                except ProducerSendSyncFailed:
                    # a client-side failure: counted and retried after a pause.  The 2.x C++
                    # client fails a send at once while its heartbeat round (every 30 s, to
                    # every broker it knows: 16 bundle brokers of a multi-worker node) holds
                    # its transport table ("GetTransport ... get timed_mutex timeout" in
                    # ~/logs/rocketmq-cpp), and after its own retries reports that as "No
                    # route info of this topic"; an immediate retry meets the same round
                    with lock:
                        retries[0] += 1
                    if attempt == 4:
                        raise
                    time.sleep(0.1 * (attempt + 1))
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    per = count // threads
    workers = [threading.Thread(target=work, args=(p, per)) for p in producers]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    for p in producers:
        p.shutdown()
    if retries[0]:
        print(f"  ({retries[0]} client-side send retries)")
    return per * threads / elapsed, latencies


def consume_run(namesrv: str, topic: str, count: int) -> float:
    from rocketmq.client import ConsumeStatus, PushConsumer

    received = 0
    first: list[float] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(msg: object) -> ConsumeStatus:
        nonlocal received
        with lock:
            if not first:
                first.append(time.perf_counter())
            received += 1
            if received >= count:
                done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer("BENCH_CG")
    c.set_namesrv_addr(namesrv)
    c.set_thread_count(4)
    c.set_message_batch_max_size(32)
    c.subscribe(topic, callback, "*")
    start = time.perf_counter()
    c.start()
    done.wait(600)
    end = time.perf_counter()
    c.shutdown()
    return received / (end - (first[0] if first else start))


def run_phases(namesrv: str, pid: int | None, messages: int,
               admin_port: int | None = None) -> dict[str, float]:
    """Send from 1 and 8 threads, then push-consume everything; prints a line per phase and
    returns its figures (msg/s, p50 ms, server CPU us/msg and messages per journal group
    where known)."""
    figures: dict[str, float] = {}
    topic = f"bench_{int(time.time() * 1000)}"
    for threads in (1, 8):
        counter = InstructionCounter(pid)
        cpu, ccpu = process_cpu_s(pid), client_cpu_s()
        groups = journal_groups(admin_port)
        rate, lat = send_run(namesrv, topic, messages, threads)
        lat.sort()
        sent = len(lat) + threads  # and each producer's warm-up send
        p50 = statistics.median(lat) * 1e3
        figures[f"send{threads} msg/s"], figures[f"send{threads} p50 ms"] = rate, p50
        note = cpu_note(pid, cpu, sent)
        if note:
            figures[f"send{threads} us/msg"] = float(note.split()[2])
        grouped = group_note(admin_port, groups, sent)
        if grouped:
            figures[f"send{threads} msg/group"] = float(grouped.split()[0])
        print(f"send, {threads} thread{'s' if threads > 1 else ' '}: {rate:10.0f} msg/s   "
              f"p50 {p50:.2f} ms   p99 {lat[int(len(lat) * 0.99)] * 1e3:.2f} ms" + note
              + counter.note(sent) + client_note(ccpu, sent)
              + grouped + f"   load {os.getloadavg()[0]:.2f}")
    total = messages + (messages // 8) * 8 + 1 + 8
    cpu, ccpu = process_cpu_s(pid), client_cpu_s()
    rate_c = consume_run(namesrv, topic, total)
    figures["consume msg/s"] = rate_c
    note = cpu_note(pid, cpu, total)
    if note:
        figures["consume us/msg"] = float(note.split()[2])
    print(f"push consume:     {rate_c:10.0f} msg/s   ({total} messages)" + note
          + client_note(ccpu, total) + f"   load {os.getloadavg()[0]:.2f}")
    return figures


def compare(baseline: Path, messages: int, rounds: int) -> None:
    """--standalone --baseline: both checkouts' standalones, alternating (see the docstring)."""
    from tests.support.standalone import Standalone
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
    for r in range(rounds):
        for label, source in (("baseline", baseline), ("this", REPO)):
            with tempfile.TemporaryDirectory() as tmp:
                standalone = Standalone(Path(tmp) / "data", source=source)
                standalone.start()
                print(f"-- round {r + 1}, {label} ({source})", flush=True)
                try:
                    runs[label].append(run_phases(
                        f"127.0.0.1:{standalone.name_server_port}", standalone.proc.pid,
                        messages, standalone.admin_port))
                finally:
                    standalone.proc.terminate()
                    standalone.proc.wait(10)
    print(f"medians of {rounds} round(s); ratio this/baseline")
    for key in runs["this"][0]:
        base = statistics.median(f[key] for f in runs["baseline"] if key in f)
        this = statistics.median(f[key] for f in runs["this"] if key in f)
        print(f"  {key:16s} baseline {base:10.2f}   this {this:10.2f}   ratio {this / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--namesrv")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--standalone", action="store_true")
    parser.add_argument("--baseline", type=Path,
                        help="with --standalone: also run another checkout's, alternating")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--request-path", action="store_true",
                        help="the broker's per-message Python alone (see the docstring)")
    parser.add_argument("--durable-path", action="store_true",
                        help="exact task steps and calls per durable send (see the docstring)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if args.request_path:
        request_path(max(1000, min(args.messages, 20000)))
        return
    if args.durable_path:
        durable_path(max(100, min(args.messages, 2000)))
        return
    if args.baseline is not None:
        compare(args.baseline.resolve(), args.messages, max(1, args.rounds))
        return
    server: Any = None
    admin_port: int | None = None
    namesrv = args.namesrv
    tmp = tempfile.TemporaryDirectory()
    if namesrv is None and args.standalone:
        from tests.support.standalone import Standalone
        standalone = Standalone(Path(tmp.name) / "data")
        standalone.start()
        server, admin_port = standalone.proc, standalone.admin_port
        namesrv = f"127.0.0.1:{standalone.name_server_port}"
        print("backend: ledgerwire standalone (1 bookie, fsync)")
    elif namesrv is None:
        if args.memory:
            command = [sys.executable, __file__, "--serve"]
        else:
            from tests.support.standalone import free_port
            command = [sys.executable, str(REPO / "tests" / "rocketmq" / "durable_server.py"),
                       str(Path(tmp.name) / "data"), str(free_port())]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        if not line:
            raise SystemExit("the benchmark server did not start")
        namesrv = line.split()[1] if line.startswith("READY") else line
        print(f"backend: {'memory' if args.memory else 'durable (1 bookie, fsync)'}")
    try:
        run_phases(namesrv, server.pid if server is not None else None, args.messages,
                   admin_port)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        tmp.cleanup()


if __name__ == "__main__":
    main()
