"""RocketMQ send and push-consume throughput, and send latency, with the official C++ client.

    .venv/bin/python benchmarks/bench_rocketmq.py [--messages 20000] [--memory | --namesrv H:P]

By default it starts a ledgerwire RocketMQ broker + name server in a subprocess on the durable
ledger backend (embedded metadata store, one bookie with fsync: tests/rocketmq/durable_server.py);
--memory uses the in-memory backend instead (MemoryBookKeeper: the protocol and broker path
alone); --namesrv drives a running server (e.g. `ledgerwire standalone` once the RocketMQ
listeners are wired in).  Driver: rocketmq-client-python 0.5.0rc2 (C++ client), 1 KB
bodies with a tag and a key: send_sync from 1 thread and from 8 threads (msg/s, p50/p99 latency
of the single-threaded run), then one push consumer reading everything back (msg/s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

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
        p.send_sync(warm)

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
                    # a client-side failure: counted and retried
                    with lock:
                        retries[0] += 1
                    if attempt == 4:
                        raise
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--namesrv")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    server = None
    namesrv = args.namesrv
    tmp = tempfile.TemporaryDirectory()
    if namesrv is None:
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
        topic = f"bench_{int(time.time())}"
        rate1, lat = send_run(namesrv, topic, args.messages, 1)
        lat.sort()
        print(f"send, 1 thread:   {rate1:10.0f} msg/s   p50 {statistics.median(lat) * 1e3:.2f} ms"
              f"   p99 {lat[int(len(lat) * 0.99)] * 1e3:.2f} ms")
        rate8, _ = send_run(namesrv, topic, args.messages, 8)
        print(f"send, 8 threads:  {rate8:10.0f} msg/s")
        total = args.messages + (args.messages // 8) * 8 + 1 + 8
        rate_c = consume_run(namesrv, topic, total)
        print(f"push consume:     {rate_c:10.0f} msg/s   ({total} messages)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        tmp.cleanup()


if __name__ == "__main__":
    main()
