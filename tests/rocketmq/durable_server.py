"""A RocketMQ broker + name server on the durable ledger backend (embedded metadata store, one
real bookie with fsync), as a process the restart test can SIGKILL.

    python tests/rocketmq/durable_server.py DATA_DIR BOOKIE_PORT [DELAY_LEVELS]

Prints "READY <name server addr> <broker addr>" once serving.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

import trio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gateway.coordinator.offset_store import LedgerOffsetStore  # noqa: E402
from gateway.rocketmq.listener import (  # noqa: E402
    serve_rocketmq_broker,
    serve_rocketmq_name_server,
)
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQBroker  # noqa: E402
from gateway.topics.topic_service import TopicService, TopicServiceConfig  # noqa: E402
from ledger_backend.bookie.cookie import check_cookie  # noqa: E402
from ledger_backend.bookie.server import serve_bookie  # noqa: E402
from ledger_backend.bookie.storage import open_bookie_storage  # noqa: E402
from ledger_backend.bookie.storage_api import BookieStorageConfig  # noqa: E402
from ledger_backend.client.bookkeeper import BookKeeper  # noqa: E402
from ledger_backend.managed_ledger import ManagedLedgerFactory  # noqa: E402
from ledger_backend.metadata import open_store  # noqa: E402
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicServiceLike  # noqa: E402
from protocols.rocketmq.name_server import NameServer, NameServerConfig  # noqa: E402


async def main(data_dir: Path, bookie_port: int, delay_levels: str | None) -> None:
    store = await open_store(f"embedded:{data_dir / 'metadata'}")
    async with BookKeeper(store) as bk, trio.open_nursery() as nursery:
        bookie_dir = data_dir / "bookie"
        await check_cookie(bookie_dir, store, "rmq-test-bookie")
        async with open_bookie_storage(BookieStorageConfig(data_dir=bookie_dir)) as storage:
            await nursery.start(serve_bookie, storage, store, "127.0.0.1", bookie_port)
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory, TopicServiceConfig())
            await topics.load()
            config = RocketMQBrokerConfig(advertised_host="127.0.0.1", advertised_port=0,
                                          transaction_check_timeout_s=600.0)
            if delay_levels:
                config.delay_levels = delay_levels
            broker = RocketMQBroker(
                topics, LedgerOffsetStore(factory, ledger_name=ROCKETMQ_OFFSETS_LEDGER), config)
            await broker.load()
            b = await nursery.start(serve_rocketmq_broker, broker, "127.0.0.1", 0)
            ns = NameServer(cast(TopicServiceLike, topics),  # as gateway/rocketmq/setup.py
                            lambda: [broker.endpoint()], NameServerConfig())
            n = await nursery.start(serve_rocketmq_name_server, ns, "127.0.0.1", 0)
            nursery.start_soon(broker.run)
            print(f"READY 127.0.0.1:{n.port} 127.0.0.1:{b.port}", flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]),
             sys.argv[3] if len(sys.argv) > 3 else None)
