"""Registering remote clusters: what is kept, what a listing shows, and bad input refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.replication.clusters import ClusterError, ClusterRegistry, RemoteCluster
from ledger_backend.metadata import open_store

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
KEYS = st.sampled_from(["kafka", "admin_url", "security_protocol", "sasl_mechanism",
                        "sasl_user", "sasl_password", "ssl_cafile", "other"])


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=70), doc=st.dictionaries(KEYS, JSON, max_size=7))
def test_any_registration_is_accepted_or_refused_clearly(name: str, doc: dict[str, Any]) -> None:
    try:
        cluster = RemoteCluster.from_json(name, doc)
    except ClusterError as exc:
        assert str(exc) and 400 <= exc.status < 500
        return
    assert cluster.bootstrap[0] and "sasl_password" not in cluster.public_json()


async def test_add_list_remove_and_the_password_never_shows(tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path / 'meta'}")
    try:
        clusters = ClusterRegistry(store, "east")
        await clusters.add("west", {"kafka": "west-host:9092", "security_protocol": "SASL_SSL",
                                    "sasl_user": "repl", "sasl_password": "s3cret"})
        [west] = await clusters.list()
        assert west.sasl_mechanism == "SCRAM-SHA-512" and west.sasl_password == "s3cret"
        assert "s3cret" not in repr(west) and "s3cret" not in str(west.public_json())
        with pytest.raises(ClusterError) as own:
            await clusters.add("east", {"kafka": "h:1"})
        assert own.value.status == 409
        with pytest.raises(ClusterError) as again:
            await clusters.add("west", {"kafka": "h:1"})
        assert again.value.status == 409
        with pytest.raises(ClusterError):
            await clusters.add("south", {"kafka": "9092"})  # no host
        with pytest.raises(ClusterError):
            await clusters.add("south", {"kafka": "h:1,9092"})  # one of several has no host
        north = await clusters.add("north", {"kafka": "n1:9092, n2:9093"})
        assert north.bootstraps == [("n1", 9092), ("n2", 9093)]
        await clusters.remove("north")
        await clusters.remove("west")
        assert await clusters.list() == []
        with pytest.raises(ClusterError) as gone:
            await clusters.remove("west")
        assert gone.value.status == 404
    finally:
        await store.close()
