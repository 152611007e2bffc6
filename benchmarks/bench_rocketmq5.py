"""RocketMQ 5 (gRPC) beside RocketMQ 4 (remoting) on one `ledgerwire standalone`.

    .venv/bin/python benchmarks/bench_rocketmq5.py [--messages 3000]

Starts a standalone (1 bookie, fsync: every acknowledgement after the journal fsync), then:
synchronous 1 KB sends from one thread with the RocketMQ 5 Python client (rocketmq-python-client
5.1.2, its own virtualenv .venv-rocketmq5) and SimpleConsumer receive + ack of all of them;
then the same with the official 4.x C++ client (sync sends from one thread, push consume).
Prints msg/s, send latency and the broker's CPU µs per message of each phase (/proc; steadier
than msg/s on a shared machine), and the 5.x/4.x ratios from this one run.  The 5.x Python
client itself is slow (grpcio's asyncio loop in a thread per call): its figures bound what the
broker can show, so the broker CPU per message is the figure to compare.  A second pair of
phases loads the broker harder: raw gRPC calls (benchmarks/grpc5_load.py, 32 sends in flight;
receives of 32 acknowledged with one AckMessage each, 4 receivers) beside the 4.x client's
sends from 8 threads.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_rocketmq import consume_run, process_cpu_s, send_run  # noqa: E402

from tests.support.standalone import Standalone  # noqa: E402

CLIENT = REPO / "tests" / "rocketmq5" / "client5.py"
PYTHON5 = REPO / ".venv-rocketmq5" / "bin" / "python"


def client5(*args: str) -> dict[str, float]:
    done = subprocess.run([str(PYTHON5), str(CLIENT), *args], capture_output=True, text=True,
                          timeout=900, cwd="/tmp")
    if done.returncode != 0:
        raise SystemExit(f"client5 failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load5(command: str, endpoint: str, topic: str, count: int, *args: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "grpc5_load.py"), command,
                           "--endpoint", endpoint, "--topic", topic, "--count", str(count),
                           *args], capture_output=True, text=True, timeout=900, cwd="/tmp")
    if done.returncode != 0:
        raise SystemExit(f"grpc5_load failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    args = parser.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory() as tmp:
        server = Standalone(Path(tmp) / "data")
        server.start()
        pid = server.proc.pid if server.proc is not None else None
        ep = f"127.0.0.1:{server.rocketmq_grpc_port}"
        try:
            topic5 = f"bench5_{int(time.time())}"
            cpu = process_cpu_s(pid)
            sent = client5("bench-send", "--endpoint", ep, "--topic", topic5, "--count", str(n))
            send5_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / n * 1e6
            cpu = process_cpu_s(pid)
            got = client5("bench-receive", "--endpoint", ep, "--topic", topic5,
                          "--consumer-group", "bench5", "--expect", str(n + 1), "--batch", "32",
                          "--max-seconds", "600")
            recv5_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / (n + 1) * 1e6
            print(f"5.x sync send, 1 thread: {sent['rate']:8.0f} msg/s  p50 {sent['p50_ms']:.2f} ms"
                  f"  p99 {sent['p99_ms']:.2f} ms  broker CPU {send5_cpu:.0f} us/msg")
            print(f"5.x receive + ack:       {got['rate']:8.0f} msg/s  ({got['received']:.0f})"
                  f"  broker CPU {recv5_cpu:.0f} us/msg")

            topic5r = f"bench5r_{int(time.time())}"
            load5("send", ep, topic5r, n)  # warm-up: topic, connection
            cpu = process_cpu_s(pid)
            raw = load5("send", ep, topic5r, n)
            raw_send_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / n * 1e6
            cpu = process_cpu_s(pid)
            raw_got = load5("receive", ep, topic5r, 2 * n, "--inflight", "4")
            raw_recv_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / (2 * n) * 1e6
            print(f"5.x raw send, 32 in flight: {raw['rate']:8.0f} msg/s  p50 "
                  f"{raw['p50_ms']:.2f} ms  broker CPU {raw_send_cpu:.0f} us/msg")
            print(f"5.x raw receive + batch ack: {raw_got['rate']:8.0f} msg/s  broker CPU "
                  f"{raw_recv_cpu:.0f} us/msg")

            namesrv = f"127.0.0.1:{server.name_server_port}"
            topic4 = f"bench4_{int(time.time())}"
            cpu = process_cpu_s(pid)
            rate4, lat = send_run(namesrv, topic4, n, 1)
            send4_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / (n + 1) * 1e6
            lat.sort()
            cpu = process_cpu_s(pid)
            rate4m, lat_m = send_run(namesrv, topic4, n, 8)
            send4m_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / n * 1e6
            lat_m.sort()
            cpu = process_cpu_s(pid)
            rate4c = consume_run(namesrv, topic4, 2 * n + 1)
            recv4_cpu = ((process_cpu_s(pid) or 0) - (cpu or 0)) / (2 * n + 1) * 1e6
            print(f"4.x sync send, 1 thread: {rate4:8.0f} msg/s  p50 {lat[len(lat) // 2] * 1e3:.2f}"
                  f" ms  broker CPU {send4_cpu:.0f} us/msg")
            print(f"4.x sync send, 8 threads: {rate4m:7.0f} msg/s  p50 "
                  f"{lat_m[len(lat_m) // 2] * 1e3:.2f} ms  broker CPU {send4m_cpu:.0f} us/msg")
            print(f"4.x push consume:        {rate4c:8.0f} msg/s  broker CPU {recv4_cpu:.0f}"
                  " us/msg")
            print(f"ratios 5.x/4.x: send {sent['rate'] / rate4:.2f} (broker CPU "
                  f"{send5_cpu / send4_cpu:.2f}), consume {got['rate'] / rate4c:.2f} (broker CPU "
                  f"{recv5_cpu / recv4_cpu:.2f}); loaded: send broker CPU "
                  f"{raw_send_cpu / send4m_cpu:.2f}, consume broker CPU "
                  f"{raw_recv_cpu / recv4_cpu:.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
