"""Ledger metadata format (JSON, versioned, CAS-friendly) and ensemble placement rules."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from ledger_backend.client.errors import (
    InvalidQuorumError,
    LedgerMetadataError,
    NotEnoughBookiesError,
)
from ledger_backend.client.ledger_metadata import (
    LedgerMetadata,
    LedgerState,
    ledger_id_from_node_name,
    ledger_path,
)
from ledger_backend.client.placement import PlacementPolicy


def _metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2,
        ensembles=((0, ("a:1", "b:1", "c:1")), (10, ("a:1", "d:1", "c:1"))),
        state=LedgerState.CLOSED, last_entry_id=19, length=1234, ctime_ms=42,
        custom_metadata={"owner": b"\x00\xffbroker"},
    )  # fmt: skip


def test_metadata_json_roundtrip_and_format_version() -> None:
    metadata = _metadata()
    data = metadata.to_json_bytes()
    doc = json.loads(data)
    assert doc["format_version"] == 1 and doc["state"] == "CLOSED"
    assert LedgerMetadata.from_json_bytes(data) == metadata
    doc["format_version"] = 99
    with pytest.raises(LedgerMetadataError):
        LedgerMetadata.from_json_bytes(json.dumps(doc).encode())
    with pytest.raises(LedgerMetadataError):
        LedgerMetadata.from_json_bytes(b"{not json")
    del doc["ensembles"]
    doc["format_version"] = 1
    with pytest.raises(LedgerMetadataError):
        LedgerMetadata.from_json_bytes(json.dumps(doc).encode())


def test_fragments_and_write_sets() -> None:
    metadata = _metadata()
    assert metadata.ensemble_for_entry(9) == ("a:1", "b:1", "c:1")
    assert metadata.ensemble_for_entry(10) == ("a:1", "d:1", "c:1")
    assert metadata.write_set(10) == [1, 2]  # (e + i) mod E
    assert metadata.write_set_bookies(11) == ["c:1", "a:1"]
    replaced = metadata.with_new_ensemble(10, ("e:1", "d:1", "c:1"))
    assert replaced.ensembles[-1] == (10, ("e:1", "d:1", "c:1")) and len(replaced.ensembles) == 2


def test_metadata_rejects_bad_quorums_and_duplicate_bookies() -> None:
    with pytest.raises(InvalidQuorumError):
        LedgerMetadata(ensemble_size=2, write_quorum=3, ack_quorum=1, ensembles=((0, ("a", "b")),))
    with pytest.raises(LedgerMetadataError):
        LedgerMetadata(ensemble_size=2, write_quorum=2, ack_quorum=1, ensembles=((0, ("a", "a")),))


def test_ledger_paths_sort_numerically() -> None:
    names = [ledger_path(i).rsplit("/", 1)[1] for i in (10, 9, 100)]
    assert sorted(names) == [ledger_path(i).rsplit("/", 1)[1] for i in (9, 10, 100)]
    assert [ledger_id_from_node_name(n) for n in names] == [10, 9, 100]
    assert ledger_id_from_node_name("lock") is None


def test_placement_spreads_load_and_never_doubles_a_bookie() -> None:
    policy = PlacementPolicy(random.Random(7))
    bookies = [f"b{i}:1" for i in range(6)]
    counts: Counter[str] = Counter()
    for _ in range(60):
        ensemble = policy.choose_ensemble(bookies, 3)
        assert len(set(ensemble)) == 3
        counts.update(ensemble)
    assert set(counts.values()) == {30}  # least-loaded first: perfectly even here
    with pytest.raises(NotEnoughBookiesError):
        policy.choose_ensemble(bookies[:2], 3)
    replacement = policy.choose_replacement(bookies, ["b0:1", "b1:1", "b2:1"], exclude=["b3:1"])
    assert replacement in {"b4:1", "b5:1"}
    with pytest.raises(NotEnoughBookiesError):
        policy.choose_replacement(bookies[:3], bookies[:3])


def test_placement_takes_preferred_bookies_first_and_the_rest_as_needed() -> None:
    """A worker of `standalone --workers N` prefers its own in-process bookies: ensembles of
    one are always on them, larger ones take them first and spread the rest by load."""
    local = {"b1:1", "b4:1"}
    policy = PlacementPolicy(random.Random(3), prefer=local.__contains__)
    bookies = [f"b{i}:1" for i in range(6)]
    singles = Counter(policy.choose_ensemble(bookies, 1)[0] for _ in range(40))
    assert set(singles) == local and set(singles.values()) == {20}  # even among the local
    others: Counter[str] = Counter()
    for _ in range(40):
        ensemble = policy.choose_ensemble(bookies, 3)
        assert len(set(ensemble)) == 3 and local <= set(ensemble)
        others.update(set(ensemble) - local)
    assert set(others) == set(bookies) - local and set(others.values()) == {10}
    assert policy.choose_ensemble(["b0:1", "b2:1"], 2) in (["b0:1", "b2:1"], ["b2:1", "b0:1"])
