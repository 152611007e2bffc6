"""Task steps per RocketMQ send on the durable backend as `ledgerwire standalone` runs it: the
bookie's storage engine with its journal, reached in-process (conftest.durable_stack).

Steps are exact where timings on a shared machine are not, and on this broker they are most of
its CPU.  The figure covers broker, ledger client, bookie and journal, plus this test's client.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.lowlevel

from ledger_backend.metadata.store import MetadataStore
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext

SENDS = 40


class StepCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_a_durable_send_costs_few_task_steps(store: MetadataStore, tmp_path: Path) -> None:
    # without fsync: the steps are the same
    async with durable_stack(store, tmp_path / "bookie", fsync=False) as stack:
        client = await RawClient.connect(stack.broker_addr)
        for _ in range(3):  # topic, partition and first ledger: not what is measured
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("durable", {"TAGS": "t"}),
                                  b"x" * 100)  # fmt: skip
            assert r.code == ResponseCode.SUCCESS, r.remark
        counter = StepCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(30):
                for _ in range(SENDS):
                    r = await client.call(RC.SEND_MESSAGE_V2,
                                          send_ext("durable", {"TAGS": "t"}), b"x" * 100)
                    assert r.code == ResponseCode.SUCCESS, r.remark
        finally:
            trio.lowlevel.remove_instrument(counter)
        per_send = counter.steps / SENDS
        # It was 12: a task spawned per in-process add (2 steps), and the journal task woken,
        # checkpointed and resumed per group (3).  Now a parked worker answers the add (2), and
        # the add itself fires the queue-empty trigger (1 checkpoint); the result of the write
        # thread still comes back through one run_sync_soon step.  9 since the response is
        # written without send_all's trailing checkpoint (the bound leaves room for the ledger
        # client's timeout sweeps, more of them per send on a slow machine).  7 since a plain
        # send is answered from its append's completion: no request task and its two steps.
        # 4 (this client's 2, the listener's, the write's delivery) since the journal group
        # an add opens is started at the scheduler's pass end, not by the journal task's 2.
        assert per_send < 6, f"{per_send:.1f} task steps per send"  # 4, plus timer sweeps
        await client.aclose()
