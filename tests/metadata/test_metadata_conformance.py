"""The metadata store contract, checked against every implementation (see conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from ledger_backend.metadata import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionState,
    SetOp,
    Stat,
    Watcher,
    WatchEvent,
)

OpenSession = Callable[[], Awaitable[MetadataStore]]

EVENT_TIMEOUT_S = 5.0


async def next_event(watcher: Watcher) -> WatchEvent:
    with trio.fail_after(EVENT_TIMEOUT_S):
        return await watcher.__anext__()


async def test_create_then_get_returns_data_and_fresh_stat(store: MetadataStore) -> None:
    assert await store.create("/a", b"hello") == "/a"
    data, stat = await store.get("/a")
    assert data == b"hello"
    assert stat.version == 0
    assert not stat.ephemeral
    assert stat.num_children == 0
    assert stat.ctime_ms == stat.mtime_ms > 1_600_000_000_000
    assert await store.exists("/a") == stat


async def test_missing_node(store: MetadataStore) -> None:
    assert await store.exists("/missing") is None
    with pytest.raises(NoNodeError):
        await store.get("/missing")
    with pytest.raises(NoNodeError):
        await store.children("/missing")
    with pytest.raises(NoNodeError):
        await store.set("/missing", b"x", -1)
    with pytest.raises(NoNodeError):
        await store.delete("/missing")


async def test_create_existing_raises_node_exists(store: MetadataStore) -> None:
    await store.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        await store.create("/a", b"2")
    assert (await store.get("/a"))[0] == b"1"


async def test_parent_must_exist_unless_make_parents(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        await store.create("/x/y/z", b"v")
    assert await store.exists("/x") is None
    assert await store.create("/x/y/z", b"v", make_parents=True) == "/x/y/z"
    assert (await store.get("/x/y"))[0] == b""
    assert await store.children("/x") == ["y"]


async def test_set_is_compare_and_set(store: MetadataStore) -> None:
    await store.create("/cas", b"v0")
    stat = await store.set("/cas", b"v1", 0)
    assert isinstance(stat, Stat)
    assert stat.version == 1
    with pytest.raises(BadVersionError):
        await store.set("/cas", b"stale", 0)
    assert await store.get("/cas") == (b"v1", stat)
    stat = await store.set("/cas", b"any", -1)
    assert stat.version == 2
    assert stat.mtime_ms >= stat.ctime_ms


async def test_delete_checks_version(store: MetadataStore) -> None:
    await store.create("/d", b"")
    await store.set("/d", b"1", 0)
    with pytest.raises(BadVersionError):
        await store.delete("/d", 0)
    assert await store.exists("/d") is not None
    await store.delete("/d", 1)
    assert await store.exists("/d") is None


async def test_delete_with_children_needs_recursive(store: MetadataStore) -> None:
    await store.create("/t/a/b/c", make_parents=True)
    await store.create("/t/a/d")
    await store.create("/t2")  # a sibling whose name shares the prefix must survive
    with pytest.raises(NotEmptyError):
        await store.delete("/t")
    with pytest.raises(BadVersionError):
        await store.delete("/t", 7, recursive=True)
    assert await store.children("/t/a") == ["b", "d"]
    await store.delete("/t", 0, recursive=True)
    assert await store.exists("/t") is None
    assert await store.exists("/t/a/b/c") is None
    assert await store.exists("/t2") is not None
    assert (await store.exists("/"))  # root stays


async def test_root_and_bad_paths(store: MetadataStore) -> None:
    assert "/" not in await store.children("/")
    with pytest.raises(MetadataError):
        await store.delete("/")
    with pytest.raises(NodeExistsError):
        await store.create("/")
    for bad in ("relative", "/trailing/", "/a//b", "/a/./b", "/a/../b", ""):
        with pytest.raises(ValueError):
            await store.create(bad)


async def test_children_sorted_and_counted(store: MetadataStore) -> None:
    await store.create("/p")
    for name in ("zeta", "alpha", "mid", "alpha2"):
        await store.create(f"/p/{name}", name.encode())
    assert await store.children("/p") == ["alpha", "alpha2", "mid", "zeta"]
    assert (await store.get("/p"))[1].num_children == 4
    await store.delete("/p/mid")
    assert await store.children("/p") == ["alpha", "alpha2", "zeta"]
    assert (await store.get("/p"))[1].num_children == 3


async def test_sequential_nodes_are_ordered_and_never_reused(store: MetadataStore) -> None:
    await store.create("/q")
    made = [await store.create("/q/item-", str(i).encode(), sequential=True) for i in range(5)]
    assert made == sorted(made)
    assert len(set(made)) == 5
    for path in made:
        suffix = path.removeprefix("/q/item-")
        assert len(suffix) == 10 and suffix.isdigit()
    await store.delete(made[-1])
    again = await store.create("/q/item-", sequential=True)
    assert again > made[-1]
    assert await store.children("/q") == sorted(p.rsplit("/", 1)[1] for p in made[:-1] + [again])


async def test_ephemeral_lives_with_its_session(open_session: OpenSession) -> None:
    owner = await open_session()
    other = await open_session()
    await owner.create("/live", b"")
    path = await owner.create("/live/member-", b"me", ephemeral=True, sequential=True)
    stat = await other.exists(path)
    assert stat is not None and stat.ephemeral
    assert (await other.get(path))[0] == b"me"
    with pytest.raises(MetadataError):
        await owner.create(path + "/child")  # ephemeral nodes cannot have children
    async with other.watch("/live", children=True) as watcher:
        await owner.close()
        assert await next_event(watcher) == WatchEvent("/live", "children")
    assert await other.exists(path) is None
    assert await other.children("/live") == []


async def test_data_watch_reports_create_change_delete(open_session: OpenSession) -> None:
    watching = await open_session()
    writer = await open_session()
    async with watching.watch("/w") as watcher:
        await writer.create("/w", b"1")
        assert await next_event(watcher) == WatchEvent("/w", "created")
        await writer.set("/w", b"2", 0)
        assert await next_event(watcher) == WatchEvent("/w", "changed")
        await writer.create("/w/child")  # not a data change of /w
        await writer.delete("/w/child")
        await writer.delete("/w")
        assert await next_event(watcher) == WatchEvent("/w", "deleted")
        await writer.create("/w", b"again")
        assert await next_event(watcher) == WatchEvent("/w", "created")


async def test_children_watch_reports_child_list_changes(open_session: OpenSession) -> None:
    watching = await open_session()
    writer = await open_session()
    await writer.create("/c")
    async with watching.watch("/c", children=True) as watcher:
        await writer.create("/c/one")
        assert await next_event(watcher) == WatchEvent("/c", "children")
        await writer.set("/c", b"data", -1)  # a data change is not a children event
        await writer.set("/c/one", b"data", -1)  # nor is a child's data change
        await writer.delete("/c/one")
        assert await next_event(watcher) == WatchEvent("/c", "children")
        await writer.delete("/c")
        assert await next_event(watcher) == WatchEvent("/c", "deleted")
        await writer.create("/c")
        assert await next_event(watcher) == WatchEvent("/c", "created")
        await writer.create("/c/two")
        assert await next_event(watcher) == WatchEvent("/c", "children")


async def test_watch_is_persistent_and_sees_every_last_change(store: MetadataStore) -> None:
    await store.create("/n", b"0")
    async with store.watch("/n") as watcher:
        for i in range(1, 6):
            await store.set("/n", str(i).encode(), -1)
        # events may coalesce, but the last change is always reported and re-reading works
        seen = 0
        with trio.move_on_after(1.0):
            while seen < 5:
                assert (await next_event(watcher)).kind == "changed"
                seen += 1
        assert seen >= 1
        assert (await store.get("/n"))[0] == b"5"


async def test_watch_stops_when_its_context_exits(store: MetadataStore) -> None:
    await store.create("/s")
    async with store.watch("/s") as watcher:
        pass
    await store.set("/s", b"after", -1)
    assert [event async for event in watcher] == []
    async with store.watch("/s") as watcher:  # a later watch on the same path works
        await store.set("/s", b"again", -1)
        assert await next_event(watcher) == WatchEvent("/s", "changed")


async def test_watches_end_when_store_closes(open_session: OpenSession) -> None:
    store = await open_session()
    await store.create("/e")
    async with store.watch("/e") as watcher:
        await store.close()
        with trio.fail_after(EVENT_TIMEOUT_S):
            assert [event async for event in watcher] == []
    with pytest.raises(MetadataError):
        await store.get("/e")


async def test_multi_applies_all(store: MetadataStore) -> None:
    await store.create("/m", b"")
    await store.create("/m/old", b"x")
    results = await store.multi([
        CheckOp("/m", 0),
        CreateOp("/m/new", b"n"),
        CreateOp("/m/seq-", b"s", sequential=True),
        SetOp("/m", b"updated", 0),
        DeleteOp("/m/old", 0),
    ])
    assert results[0] is None
    assert results[1] == "/m/new"
    assert isinstance(results[2], str) and results[2].startswith("/m/seq-")
    assert isinstance(results[3], Stat) and results[3].version == 1
    assert results[4] is None
    assert await store.get("/m/new") == (b"n", (await store.get("/m/new"))[1])
    assert (await store.get("/m"))[0] == b"updated"
    assert await store.exists("/m/old") is None
    assert await store.multi([]) == []


@pytest.mark.parametrize(
    ("failing_op", "error"),
    [
        (CheckOp("/m", 5), BadVersionError),
        (CheckOp("/m/absent", 0), NoNodeError),
        (CreateOp("/m/keep"), NodeExistsError),
        (SetOp("/m/keep", b"x", 3), BadVersionError),
        (DeleteOp("/m"), NotEmptyError),
    ],
)
async def test_multi_is_all_or_nothing(
    store: MetadataStore, failing_op: CheckOp | CreateOp | SetOp | DeleteOp,
    error: type[MetadataError],
) -> None:
    await store.create("/m", b"m")
    await store.create("/m/keep", b"k")
    with pytest.raises(error):
        await store.multi([
            CreateOp("/m/created", b"c"),
            SetOp("/m", b"changed", -1),
            failing_op,
            DeleteOp("/m/keep"),
        ])
    assert await store.exists("/m/created") is None
    assert await store.get("/m") == (b"m", (await store.get("/m"))[1])
    assert (await store.get("/m"))[1].version == 0
    assert (await store.get("/m/keep"))[0] == b"k"


async def test_multi_ephemeral_create_belongs_to_session(open_session: OpenSession) -> None:
    owner = await open_session()
    other = await open_session()
    await owner.create("/me")
    [path] = await owner.multi([CreateOp("/me/e", b"", ephemeral=True)])
    assert isinstance(path, str)
    stat = await other.exists(path)
    assert stat is not None and stat.ephemeral
    await owner.close()
    assert await other.exists(path) is None


async def test_next_id_unique_and_increasing_under_concurrency(open_session: OpenSession) -> None:
    first = await open_session()
    second = await open_session()
    ids: list[int] = []

    async def take(store: MetadataStore, count: int) -> None:
        for _ in range(count):
            ids.append(await store.next_id("/counters/ledger-id"))

    async with trio.open_nursery() as nursery:
        for store in (first, second, first, second):
            nursery.start_soon(take, store, 10)
    assert sorted(ids) == list(range(1, 41))
    assert await first.next_id("/counters/ledger-id") == 41
    assert await first.next_id("/counters/other") == 1
    assert (await first.get("/counters/ledger-id"))[0] == b"41"


async def test_session_events_start_with_current_state(store: MetadataStore) -> None:
    events = store.session_events()
    with trio.fail_after(EVENT_TIMEOUT_S):
        assert await events.receive() is SessionState.CONNECTED
    await store.close()
    with trio.fail_after(EVENT_TIMEOUT_S):
        assert [state async for state in events] == []


async def test_binary_data_round_trips(store: MetadataStore) -> None:
    blob = bytes(range(256)) * 40
    await store.create("/bin", blob)
    assert (await store.get("/bin"))[0] == blob
    await store.set("/bin", b"\x00", 0)
    assert (await store.get("/bin"))[0] == b"\x00"
