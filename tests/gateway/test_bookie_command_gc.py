"""`ledgerwire bookie`, a bookie run as a process of its own, settles its heap as a broker does
once it listens (gateway/process/gc_policy.py): ledger_backend cannot import the gateway's
policy, so the command hands it to the bookie.  The command's own coroutine is run here, with a
bookie in memory on a free port, and the collector's settings are looked at in this process."""

from __future__ import annotations

import gc
import socket

import trio

from gateway.cli.commands.bookie import run_bookie_process
from gateway.cli.main import build_parser
from gateway.process import gc_policy
from tests.gateway.test_gc_policy import restored_collector  # noqa: F401 - a fixture

SETTLED = (gc_policy.YOUNG_OBJECTS, gc_policy.MIDDLE_COLLECTIONS, gc_policy.OLD_COLLECTIONS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_bookie_command_settles_the_heap_once_it_listens(
        restored_collector: None) -> None:  # noqa: F811
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever ran before in this process
    argv = ["bookie", "--metadata", "memory:", "--storage", "memory", "--no-autorecovery",
            "--port", str(free_port())]
    args = build_parser(argv).parse_args(argv)
    args.bookie_id = None
    args.bookie_secret = None
    args.max_frame_bytes = 1 << 20
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_bookie_process, args)
        with trio.move_on_after(60):
            while gc.get_threshold() != SETTLED:  # noqa: ASYNC110 - no event to wait on
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert gc.get_threshold() == SETTLED
    assert gc.get_freeze_count() > 0
