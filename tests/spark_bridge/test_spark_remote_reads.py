"""Reading a standalone from executors on other hosts: through its bookies' advertised address,
never its local files.

One standalone whose embedded bookie binds 127.0.0.1 and registers "localhost"
(`[storage] bookie_advertised_host`). The driver plans on the standalone's host; the
executors' copies of the reader (pickled as Spark ships them) read every split while the
standalone's data directory is not there for them: in a mount namespace where an empty tmpfs
hides it (`unshare`, where this machine allows it), and in-process with the copy's paths
pointing nowhere, as a job planned in files mode looks on another host.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from spark_bridge_support import produce_history
from support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

_EXECUTOR = """
import os, sys
from pyspark import cloudpickle
data_dir, payload = sys.argv[1], sys.argv[2]
assert os.listdir(data_dir) == [], os.listdir(data_dir)  # the standalone's files are hidden
with open(payload, "rb") as f:
    reader, splits = cloudpickle.loads(f.read())
for mode in ("bookies", "files"):  # as planned while it runs; as planned with it stopped
    reader.mode = mode
    print(mode, sum(b.num_rows for s in splits for b in reader.read(s)), flush=True)
"""


def _can_hide_directories() -> bool:
    """Whether `unshare -rm` may mount over a directory here (user namespaces allowed)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt"],
                           capture_output=True, timeout=30)  # fmt: skip
    return probe.returncode == 0


def test_executors_read_a_standalone_through_its_advertised_bookies(tmp_path: Path) -> None:
    from pyspark import cloudpickle

    from ledger_backend.client.ledger_metadata import LedgerMetadata
    from spark_bridge.ledger_access import LedgerAccess, resolve_read_mode
    from spark_bridge.metadata_access import open_embedded_sync, resolve_connection
    from spark_bridge.planner import LedgerSplit
    from spark_bridge.reader import LedgerwireBatchReader
    from spark_bridge.topic_layout import partition_layout

    config = tmp_path / "ledgerwire.toml"
    config.write_text('[storage]\nbookie_advertised_host = "localhost"\n')
    broker = Standalone(tmp_path / "data", extra_args=["--config", str(config)])
    broker.start()
    try:
        produced = produce_history(broker, "adv", 300, partitions=2)
        spec = resolve_connection(str(broker.data_dir))
        store = open_embedded_sync(spec)
        try:
            available = store.children_sync("/ledgerwire/bookies/available")
        finally:
            store.close_sync()
        assert [a.rpartition(":")[0] for a in available] == ["localhost"], available
        assert resolve_read_mode(spec) == "bookies"
        with LedgerAccess(spec, "bookies") as access:  # reads entries from "localhost:port"
            layout = partition_layout(access, "adv", 0, "public/default")
        assert layout.ledgers and layout.end_offset > 0

        reader = LedgerwireBatchReader({"ledgerwire.metadata": str(broker.data_dir),
                                        "subscribe": "adv", "minPartitions": "4"})  # fmt: skip
        splits = [s for s in reader.partitions() if isinstance(s, LedgerSplit)]
        assert len(splits) >= 4
        for split in splits:  # each split carries its ledgers, at the advertised address
            assert split.ledgers
            for _id, raw, _last, _closed in split.ledgers:
                ensembles = LedgerMetadata.from_json_bytes(raw).ensembles
                assert {b.rpartition(":")[0] for _f, bookies in ensembles for b in bookies} \
                    == {"localhost"}  # fmt: skip
        shipped = cloudpickle.dumps((reader, splits))

        # planned in files mode (the standalone was stopped then), read on a host without its
        # files: the copy's paths point nowhere, so the task reads the bookies it can reach
        elsewhere = cloudpickle.loads(shipped)[0]
        elsewhere.mode = "files"
        elsewhere.opts = replace(elsewhere.opts, spec=replace(
            elsewhere.opts.spec, metadata_url=f"embedded-ro:{tmp_path}/elsewhere/metadata",
            bookie_dirs=(f"{tmp_path}/elsewhere/bookies/0",)))  # fmt: skip
        rows = {(r["partition"], r["offset"]) for s in splits for b in elsewhere.read(s)
                for r in b.select(["partition", "offset"]).to_pylist()}  # fmt: skip
        assert rows == set(produced.rows)

        if _can_hide_directories():  # a real other view of the disk: the data dir is empty
            payload = tmp_path / "shipped.pickle"
            payload.write_bytes(shipped)
            done = subprocess.run(
                ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"',
                 str(broker.data_dir), sys.executable, "-c", _EXECUTOR, str(broker.data_dir),
                 str(payload)], capture_output=True, text=True, timeout=240,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.split() == ["bookies", "300", "files", "300"], done.stdout

        broker.stop()  # nothing answers now: the task says why, in one message
        with pytest.raises(Exception, match=r"the standalone's files \(.*elsewhere.*\) are "
                                            r"not on this host .*bookie_advertised_host"):
            for split in splits[:1]:
                list(elsewhere.read(split))
    finally:
        broker.stop()
