"""Consumer groups: rebalance time of a 6-member group on 24 partitions, and committed-offset
throughput (commits/s), against `ledgerwire standalone` with fsync on.

    .venv/bin/python benchmarks/bench_groups.py [--rounds 5] [--commit-seconds 5]

Rebalance: six confluent-kafka consumers (classic protocol, range assignor, heartbeat 500 ms,
session 6 s) in one process; the time from the first subscribe until the 24 partitions are
spread 4 per member, then — repeated `--rounds` times — from one member's close() until the
other five own all 24 (leave), and from a new member's subscribe until the six again hold 4
each (join). The broker's group.initial.rebalance.delay is set to 0 so the first figure is
not the delay. Clients learn of a rebalance on their next heartbeat, so the figures include up
to one heartbeat interval. Also the coordinator alone (in-process, no network): one
join+sync round of six members.

Commits: OffsetCommit round trips through the broker, each made durable in the offsets
ledger before it is acknowledged: one client committing synchronously, then eight clients
at once (threads), one partition offset per commit.  Then OffsetFetch round trips of those
groups' offsets (answered from the coordinator's memory), one client and eight.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import trio
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from protocols.kafka.group_coordinator import (  # noqa: E402
    CoordinatorConfig,
    GroupCoordinator,
)

sys.path.insert(0, str(REPO / "benchmarks"))
from common import throwaway_standalone  # noqa: E402

PARTITIONS = 24
MEMBERS = 6


@contextmanager
def ledgerwire() -> Iterator[str]:
    with throwaway_standalone(
        ["--log-level", "WARNING", "--group-initial-rebalance-delay-ms", "0"]
    ) as server:
        yield server.bootstrap


class PollingMember:
    """A consumer polled by its own thread; `owned` follows its rebalance callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.owned: set[int] = set()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "partition.assignment.strategy": "range",
            }
        )
        self._stop = threading.Event()
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, tps: self.owned.update(tp.partition for tp in tps),
            on_revoke=lambda c, tps: self.owned.difference_update(tp.partition for tp in tps),
        )
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


def wait_until(condition: object, timeout_s: float = 60.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if condition():  # type: ignore[operator]
            return time.perf_counter() - started
        time.sleep(0.005)
    raise TimeoutError("group did not settle")


def balanced(members: list[PollingMember], per_member: int) -> bool:
    owned = [p for m in members for p in m.owned]
    return (
        len(owned) == PARTITIONS
        and len(set(owned)) == PARTITIONS
        and all(len(m.owned) == per_member for m in members)
    )


def bench_rebalance(bootstrap: str, rounds: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("rebalance", PARTITIONS, 1)])["rebalance"].result(30)
    started = time.perf_counter()
    members = [PollingMember(bootstrap, "rebalance", "bench") for _ in range(MEMBERS)]
    wait_until(lambda: balanced(members, PARTITIONS // MEMBERS))
    print(
        f"group formation, {MEMBERS} members / {PARTITIONS} partitions: "
        f"{time.perf_counter() - started:.2f} s"
    )
    leaves, joins = [], []
    for _ in range(rounds):
        leaving = members.pop()
        t0 = time.perf_counter()
        leaving.close()
        wait_until(
            lambda: (
                sum(len(m.owned) for m in members) == PARTITIONS and all(m.owned for m in members)
            )
        )
        leaves.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        members.append(PollingMember(bootstrap, "rebalance", "bench"))
        wait_until(lambda: balanced(members, PARTITIONS // MEMBERS))
        joins.append(time.perf_counter() - t0)
    print(
        f"rebalance after a member leaves: median {statistics.median(leaves):.2f} s "
        f"(min {min(leaves):.2f}, max {max(leaves):.2f}, {rounds} rounds)"
    )
    print(
        f"rebalance after a member joins:  median {statistics.median(joins):.2f} s "
        f"(min {min(joins):.2f}, max {max(joins):.2f}, {rounds} rounds)"
    )
    for member in members:
        member.close()


class _NullStore:
    async def load(self) -> dict:
        return {}

    async def load_groups(self) -> dict:
        return {}

    async def store_group(self, group_id: str, record: object) -> None:
        pass

    async def commit(self, group_id: str, offsets: object) -> None:
        pass

    async def delete(self, group_id: str, keys: object) -> None:
        pass


async def _coordinator_round() -> float:
    async with trio.open_nursery() as nursery:
        coordinator = GroupCoordinator(_NullStore(), CoordinatorConfig(initial_rebalance_delay_s=0))
        await nursery.start(coordinator.run)
        answers: dict[int, dict] = {}

        async def member(i: int) -> None:
            answer = await coordinator.join(
                group_id="g",
                member_id="",
                group_instance_id=f"i{i}",
                protocol_type="consumer",
                protocols=[("range", b"m")],
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                client_id="c",
                client_host="/h",
                require_known_member_id=False,
            )
            answers[i] = answer
            given = [(a["member_id"], b"x") for a in answer["members"]] if answer["members"] else []
            await coordinator.sync(
                group_id="g",
                member_id=answer["member_id"],
                generation_id=answer["generation_id"],
                assignments=given,
            )

        t0 = trio.current_time()
        async with trio.open_nursery() as members:
            for i in range(MEMBERS):
                members.start_soon(member, i)
        elapsed = trio.current_time() - t0
        nursery.cancel_scope.cancel()
    return elapsed


def bench_coordinator_alone() -> None:
    times = [trio.run(_coordinator_round) for _ in range(20)]
    print(
        f"coordinator alone, join+sync of {MEMBERS} members: "
        f"median {statistics.median(times) * 1e3:.2f} ms"
    )


def _commit_loop(bootstrap: str, group: str, seconds: float, counts: list[int]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    offset, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        offset += 1
        consumer.commit(offsets=[TopicPartition("commits", 0, offset)], asynchronous=False)
    counts.append(offset)
    consumer.close()


def _fetch_loop(bootstrap: str, group: str, seconds: float, counts: list[int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    done, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        consumer.committed([TopicPartition("commits", 0)], timeout=10)
        done += 1
    counts.append(done)
    consumer.close()


def _run_clients(loop: Callable[[str, str, float, list[int]], None], bootstrap: str,
                 groups: list[str], seconds: float) -> float:
    """One thread per group running `loop` for `seconds`; the calls per second of them all."""
    counts: list[int] = []
    threads = [threading.Thread(target=loop, args=(bootstrap, group, seconds, counts))
               for group in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def bench_commits(bootstrap: str, seconds: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("commits", 1, 1)])["commits"].result(30)
    for clients in (1, 8):
        rate = _run_clients(_commit_loop, bootstrap,
                            [f"committer-{clients}-{i}" for i in range(clients)], seconds)
        print(f"offset commits, {clients} client(s) committing synchronously: "
              f"{rate:,.0f} commits/s")
    for clients in (1, 8):  # OffsetFetch of the groups committed above
        rate = _run_clients(_fetch_loop, bootstrap,
                            [f"committer-8-{i}" for i in range(clients)], seconds)
        print(f"offset fetches, {clients} client(s) fetching synchronously: "
              f"{rate:,.0f} fetches/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commit-seconds", type=float, default=5.0)
    args = parser.parse_args()
    bench_coordinator_alone()
    with ledgerwire() as bootstrap:
        bench_rebalance(bootstrap, args.rounds)
        bench_commits(bootstrap, args.commit_seconds)


if __name__ == "__main__":
    main()
