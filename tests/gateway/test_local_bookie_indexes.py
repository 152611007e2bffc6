"""Which bookies a standalone node starts: every bookie whose data directory the node already
has, whatever the shape it runs in now (a data directory moves between `standalone`,
`standalone --workers N` and the bookies-process shape with its ledgers readable)."""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import Config
from gateway.process.local_bookies import (
    local_bookie_indexes,
    node_bookie_count,
    worker_bookie_indexes,
)


def test_a_fresh_node_has_its_configured_bookies_and_one_per_worker(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path)
    assert local_bookie_indexes(config) == [0]
    assert node_bookie_count(config, 2) == 2
    assert [worker_bookie_indexes(config, 2, w) for w in range(2)] == [[0], [1]]


def test_bookies_a_wider_node_made_are_started_by_a_narrower_one(tmp_path: Path) -> None:
    """`--workers 3` made bookies 0-2 (ensembles of one, each worker's ledgers on its own
    bookie): run again with fewer workers, or in one process, bookie 2 (and 1) still serve."""
    config = Config(data_dir=tmp_path)
    for index in range(3):
        (tmp_path / "bookies" / str(index)).mkdir(parents=True)
    (tmp_path / "bookies" / "stray-file").write_text("")
    assert local_bookie_indexes(config) == [0, 1, 2]
    assert node_bookie_count(config, 2) == 3
    assert [worker_bookie_indexes(config, 2, w) for w in range(2)] == [[0, 2], [1]]
