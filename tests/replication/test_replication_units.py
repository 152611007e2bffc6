"""The sans-IO parts of geo-replication: what crosses, and how group offsets translate."""

from __future__ import annotations

from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.replication.batches import committed_batches, last_origin_offset, record_origins
from gateway.replication.checkpoints import Checkpoint
from gateway.replication.clusters import RemoteCluster
from gateway.replication.offset_translation import LinkView, translate, translate_among
from gateway.replication.record_rewrite import OutgoingBatches, frame
from gateway.replication.remote import InFlightWindow, RemoteKafka
from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    parse_header,
    patch_base_offset,
)
from tests.support.ports import free_port


def _batch(base: int, values: list[bytes], **kw: object) -> bytes:
    return build_batch([Record(0, 1000 + i, b"k", v, [("h", b"1")])
                        for i, v in enumerate(values)], base_offset=base, **kw)  # type: ignore[arg-type]


def test_aborted_and_control_and_replicated_in_records_stay_home() -> None:
    origin: list[tuple[str, bytes | None]] = [("lw.origin", b"west"),
                                              ("lw.origin.offset", (7).to_bytes(8, "big"))]
    foreign = build_batch([Record(0, 5, None, b"from-west", origin)], base_offset=7)
    batches = [
        _batch(0, [b"a", b"b"]),
        _batch(2, [b"t1", b"t2"], producer_id=9, producer_epoch=0, base_sequence=0,
               is_transactional=True),
        build_control_batch(CONTROL_ABORT, producer_id=9, producer_epoch=0, base_offset=4),
        _batch(5, [b"u1"], producer_id=10, producer_epoch=0, base_sequence=0,
               is_transactional=True),
        build_control_batch(CONTROL_COMMIT, producer_id=10, producer_epoch=0,
                            base_offset=6),
        foreign,
        _batch(8, [b"c"]),
        _batch(9, [b"beyond-stable"]),
    ]
    kept, next_offset = committed_batches(batches, 9, [(9, 2)])
    assert next_offset == 9
    out = OutgoingBatches("east", 1 << 20)
    for data in kept:
        out.add(data, 1)
    [(payload, count, base_ts, max_ts, last)] = out.finish()
    records = decode_records(frame(payload, count, base_ts, max_ts, 3, 0, 0))
    assert [r.value for r in records] == [b"b", b"u1", b"c"]
    assert out.inbound == [(7, "west", 7)]
    assert last == 8
    assert committed_batches(batches[-1:], 9, []) == ([], None)


def test_outgoing_batches_keep_everything_and_mark_the_origin() -> None:
    source = build_batch([Record(0, 1000 - i, b"k%d" % i, b"x" * 100, [("h", b"1")])
                          for i in range(30)], base_offset=40, compression=codecs.ZSTD)
    out = OutgoingBatches("east", 1000)
    out.add(source, 0)
    groups = out.finish()
    assert len(groups) > 1 and sum(g[1] for g in groups) == 30
    blob = b"".join(frame(p, n, b, m, 5, 0, 0) for p, n, b, m, _ in groups)
    assert last_origin_offset(blob, "east") == (groups[-1][1] - 1, 69)
    assert last_origin_offset(blob, "west") is None
    first = decode_records(frame(*groups[0][:4], 5, 0, 0))
    assert [(r.key, r.timestamp) for r in first] == [(b"k%d" % i, 1000 - i)
                                                     for i in range(len(first))]
    assert first[0].headers[0] == ("h", b"1")
    assert first[0].headers[1:] == [("lw.origin", b"east"),
                                    ("lw.origin.offset", (40).to_bytes(8, "big"))]


def test_translation_takes_the_lower_bound_of_both_directions() -> None:
    cp = Checkpoint(syncs=[(10, 4), (20, 15), (30, 27)])
    assert translate(cp, 5) == 0  # before the first sync: the remote's start
    assert translate(cp, 25) == 15
    cp.inbound = [(12, 3), (28, 9)]
    assert translate(cp, 25) == 3  # the remote's own records after 3 may be unread
    assert translate(cp, 35) == 9
    assert translate(cp, 11) == 0


def test_before_anything_of_the_remote_is_noted_its_first_foreign_record_bounds() -> None:
    """b0 was written in B, then A's a0 landed after it (B: b0 a0); a0 is synced (1, 2) and b0
    has not reached A.  A group that read a0 must not resume in B past b0."""
    assert translate(Checkpoint(syncs=[(1, 2)], foreign_from=0), 1) == 0
    assert translate(Checkpoint(syncs=[(1, 2)], foreign_from=1), 1) == 1
    assert translate(Checkpoint(syncs=[(1, 2)]), 1) == 2  # B holds A's records only


def test_a_batch_another_replicator_wrote_is_skipped_whole() -> None:
    west = OutgoingBatches("west", 1 << 20)
    west.add(_batch(100, [b"a", b"b", b"c"]), 0)
    [(payload, n, base_ts, max_ts, _)] = west.finish()
    arrived = bytearray(frame(payload, n, base_ts, max_ts, 1, 0, 0))
    arrived[:8] = (500).to_bytes(8, "big")  # stored in east at offsets 500..502
    east = OutgoingBatches("east", 1 << 20)
    east.add(bytes(arrived), 0)
    east.add(_batch(503, [b"mine"]), 0)
    [(payload, n, *_)] = east.finish()
    assert n == 1 and east.inbound == [(502, "west", 102)]
    # the same answer, record by record, when one record lacks the mark
    mixed = build_batch([*decode_records(bytes(arrived)), Record(0, 5, None, b"plain", [])],
                        base_offset=500)
    slow = OutgoingBatches("east", 1 << 20)
    slow.add(mixed, 0)
    assert [x[1] for x in slow.finish()] == [1]
    assert slow.inbound == [(500, "west", 100), (501, "west", 101), (502, "west", 102)]


_SPEC = st.tuples(st.integers(1, 25), st.sampled_from([codecs.NONE, codecs.GZIP, codecs.ZSTD]),
                  st.integers(0, 1500), st.booleans(), st.integers(-70_000, 70_000),
                  st.booleans())


@settings(max_examples=40, deadline=None)
@given(st.lists(_SPEC, min_size=1, max_size=6), st.integers(0, 60),
       st.sampled_from([0, 4000, 1 << 20]))
def test_what_leaves_is_every_record_from_the_start_once_in_order_and_comes_back_inbound(
        specs: list[tuple[int, int, int, bool, int, bool]], start: int, threshold: int) -> None:
    """Forwarded whole (alone or in runs of batches) or re-framed, each record at or after
    `start` leaves once, in order, unchanged, with its origin offset readable; arrived on the
    other side, the batches are all inbound and the last one names the last record's origin
    offset.  Batches' timestamps go back and forth, and some follow a gap of offsets (what a
    control batch or an aborted transaction leaves), which a run must not cross."""
    batches, base = [], 0
    for n, codec, size, transactional, clock, gap in specs:
        base += gap
        records = [Record(0, 100_000 + clock + i * 7, b"k%d" % (base + i),
                          bytes([i % 251]) * size, [("h", b"%d" % i)]) for i in range(n)]
        batches.append(build_batch(records, base_offset=base, compression=codec,
                                   producer_id=9 if transactional else -1,
                                   producer_epoch=0 if transactional else -1,
                                   base_sequence=base if transactional else -1,
                                   is_transactional=transactional))
        base += n
    out = OutgoingBatches("east", 1 << 20, forward_min_bytes=threshold)
    for data in batches:
        out.add(data, start)
    framed, sequence = [], 0
    for payload, n, base_ts, max_ts, _ in out.finish():
        framed.append(frame(payload, n, base_ts, max_ts, 3, 0, sequence))
        sequence += n
    want = [(r.key, r.value, r.headers, r.timestamp, ("east", r.offset))
            for data in batches for r in decode_records(data) if r.offset >= start]
    got = [(r.key, r.value, [h for h in r.headers if not h[0].startswith("lw.")], r.timestamp,
            origin) for data in framed
           for r, origin in zip(decode_records(data), record_origins(data), strict=True)]
    assert got == want
    if threshold == 0 and start == 0:
        assert out.forwarded == len(batches)
    if not want:
        return
    stored, at = [], 500  # as the other side stores them
    for data in framed:
        copy = bytearray(data)
        patch_base_offset(copy, at)
        stored.append(bytes(copy))
        at = parse_header(copy).last_offset + 1
    assert last_origin_offset(b"".join(stored), "east") == (at - 1, want[-1][4][1])
    west = OutgoingBatches("west", 1 << 20, forward_min_bytes=threshold)
    for data in stored:
        west.add(data, 0)
    assert west.finish() == [] and west.inbound[-1] == (at - 1, "east", want[-1][4][1])


def test_batches_that_follow_each_other_go_as_one_run_up_to_the_limit() -> None:
    """Forwardable batches without a gap between them leave as one batch (its first record marks
    the whole run); an offset gap or the send limit starts the next one."""
    def batch(base: int, ts: int) -> bytes:
        return build_batch([Record(0, ts - i * 1000, b"k", bytes(300), [("h", b"1")])
                            for i in range(4)], base_offset=base)

    stored = [batch(0, 5000), batch(4, 90_000), batch(8, 200), batch(13, 7000)]  # 12: a gap
    out = OutgoingBatches("east", 1 << 20, forward_min_bytes=0)
    for data in stored:
        out.add(data, 0)
    groups = out.finish()
    assert [(n, last) for _, n, _, _, last in groups] == [(12, 11), (4, 16)]
    assert out.forwarded == 4
    framed = [frame(p, n, b, m, 3, 0, 0) for p, n, b, m, _ in groups]
    assert [r.offset for r in decode_records(framed[0])] == list(range(12))
    got = [(r.timestamp, origin) for data in framed
           for r, origin in zip(decode_records(data), record_origins(data), strict=True)]
    assert got == [(r.timestamp, ("east", r.offset)) for data in stored
                   for r in decode_records(data)]
    assert parse_header(framed[0]).max_timestamp == 90_000
    size = len(stored[0]) - 61
    small = OutgoingBatches("east", 2 * size + 400, forward_min_bytes=0)  # two fit, not three
    for data in stored[:3]:
        small.add(data, 0)
    assert [g[1] for g in small.finish()] == [8, 4]


async def test_in_flight_window_counts_requests_and_bytes() -> None:
    window = InFlightWindow(max_requests=3, max_bytes=100)
    for _ in range(3):
        await window.reserve(10)
    with trio.move_on_after(0.05) as blocked:  # a fourth request waits
        await window.reserve(10)
    assert blocked.cancelled_caught and window.requests == 3
    window.release(10)
    await window.reserve(80)  # 90 bytes with the other two: fits
    with trio.move_on_after(0.05) as blocked:  # 11 more bytes would not
        await window.reserve(11)
    assert blocked.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(window.reserve, 11)
        await trio.sleep(0.01)
        window.release(80)  # room again: the waiting one goes on
    assert (window.requests, window.bytes) == (3, 31)
    for size in (10, 10, 11):
        window.release(size)
    await window.reserve(500)  # larger than the budget: it goes alone
    assert (window.requests, window.bytes) == (1, 500)


class _Mesh:
    """One partition replicated among clusters, modelled record by record: each log holds
    (origin cluster, offset there); each link X -> Y reads X's log in order, sends X's own
    records to Y, notes the records that came from Y (X's inbound pairs for Y) and writes offset
    syncs, as the replicators do.  A record from Y passed without noting it is what a session
    that resumed past its crashed predecessor's sends does: the link's `unnoted` moves past it.
    A sync stores the link's checkpoint, which is what Y's admin API serves."""

    def __init__(self, clusters: list[str]) -> None:
        self.logs: dict[str, list[tuple[str, int]]] = {c: [] for c in clusters}
        self.links = {(x, y): Checkpoint() for x in clusters for y in clusters if x != y}
        self.cursor = dict.fromkeys(self.links, 0)
        self.remote_next = dict.fromkeys(self.links, 0)
        self.stored = {link: LinkView() for link in self.links}

    def write(self, cluster: str) -> None:
        self.logs[cluster].append((cluster, len(self.logs[cluster])))

    def step(self, x: str, y: str, note: bool = True) -> None:
        at = self.cursor[(x, y)]
        if at >= len(self.logs[x]):
            return
        origin, offset = self.logs[x][at]
        self.cursor[(x, y)] = at + 1
        if origin == x:
            if len(self.logs[y]) > self.remote_next[(x, y)]:  # the answer's base: a gap
                self.links[(x, y)].note_foreign(self.remote_next[(x, y)])
            self.logs[y].append((origin, offset))
            self.remote_next[(x, y)] = len(self.logs[y])
        elif origin == y and note:
            self.links[(x, y)].add_inbound(at + 1, offset + 1)
        elif origin == y:
            self.links[(x, y)].unnoted = at + 1

    def settle(self) -> None:
        """Every link reads its log to the end (twice: what one link delivered is read by the
        others)."""
        for _ in range(2):
            for x, y in self.links:
                while self.cursor[(x, y)] < len(self.logs[x]):
                    self.step(x, y)

    def sync(self, x: str, y: str) -> None:
        checkpoint = self.links[(x, y)]
        checkpoint.add_sync(self.cursor[(x, y)], self.remote_next[(x, y)])
        self.stored[(x, y)] = LinkView(tuple(checkpoint.inbound), self.cursor[(x, y)],
                                       checkpoint.unnoted, tuple(checkpoint.syncs))

    def translated(self, here: str, there: str, committed: int) -> int:
        thirds = [c for c in self.logs if c not in (here, there)]
        return translate_among(self.links[(here, there)], committed,
                               {c: self.links[(here, c)].inbound for c in thirds}, here,
                               {c: self.stored[(there, c)] for c in self.logs if c != there})

    def skipped(self, here: str, there: str, committed: int, translated: int) -> list[
            tuple[str, int]]:
        """Records of `there` below `translated` that a group committed at `committed` here
        has not read."""
        read = set(self.logs[here][:committed])
        return [r for r in self.logs[there][:translated] if r not in read]


_CLUSTERS = ["a", "b", "c"]
_LINKS = [(x, y) for x in _CLUSTERS for y in _CLUSTERS if x != y]
# rounds: some clusters write, then some links read on (up to n records, noting inbound pairs
# or, when sessions crash, perhaps not) and sync
_ROUNDS = st.lists(st.tuples(
    st.lists(st.sampled_from(_CLUSTERS), max_size=4),
    st.lists(st.tuples(st.sampled_from(_LINKS), st.booleans(), st.integers(1, 8)),
             max_size=6)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_ROUNDS, st.booleans())
def test_among_three_clusters_a_moved_group_skips_nothing_and_re_reads_only_the_unsynced(
        rounds: list[tuple[Any, ...]], crashes: bool) -> None:
    """Never skips: for any interleaving of writes, replication, unnoted passes and syncs, a
    group committed anywhere and moved anywhere resumes where it has read everything below.
    Re-reads only what is not synced yet: once every link has read, noted and synced all, a
    group committed at a cluster's end resumes at the other's end (re-reads nothing)."""
    mesh = _Mesh(_CLUSTERS)
    for writers, links in rounds:
        for cluster in writers:
            mesh.write(cluster)
        for (x, y), note, records in links:
            for _ in range(records):
                mesh.step(x, y, note or not crashes)
            mesh.sync(x, y)
    for here in _CLUSTERS:  # a group committed anywhere here, moved to any other cluster
        for there in _CLUSTERS:
            if here != there:
                for committed in range(len(mesh.logs[here]) + 1):
                    translated = mesh.translated(here, there, committed)
                    assert mesh.skipped(here, there, committed, translated) == []
    mesh.settle()
    for x, y in _LINKS:
        mesh.sync(x, y)
    for here in _CLUSTERS:
        for there in _CLUSTERS:
            if here != there:
                end = len(mesh.logs[here])
                translated = mesh.translated(here, there, end)
                assert mesh.skipped(here, there, end, translated) == []
                if not crashes:
                    assert translated == len(mesh.logs[there]), (here, there)


_PAIR_LINKS = [("a", "b"), ("b", "a")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.lists(st.sampled_from(["a", "b"]), max_size=4),
    st.lists(st.tuples(st.sampled_from(_PAIR_LINKS), st.integers(1, 8)), max_size=4)),
    max_size=12))
def test_between_two_clusters_a_moved_group_skips_nothing(rounds: list[tuple[Any, ...]]
                                                          ) -> None:
    """The two-cluster translation, from the first record on (nothing noted either way yet
    included): a group committed anywhere in one resumes in the other where it has read
    everything below."""
    mesh = _Mesh(["a", "b"])
    for writers, links in rounds:
        for cluster in writers:
            mesh.write(cluster)
        for (x, y), records in links:
            for _ in range(records):
                mesh.step(x, y)
            mesh.sync(x, y)
    for here, there in _PAIR_LINKS:
        for committed in range(len(mesh.logs[here]) + 1):
            translated = translate(mesh.links[(here, there)], committed)
            assert mesh.skipped(here, there, committed, translated) == []


def test_the_two_cluster_translation_skips_a_third_clusters_records() -> None:
    """Why the third clusters' bound: c's records reached b before they reached a."""
    mesh = _Mesh(_CLUSTERS)
    for cluster in _CLUSTERS:
        mesh.write(cluster)
    mesh.settle()
    for _ in range(5):  # c writes five more: they reach b, not yet a
        mesh.write("c")
        mesh.step("c", "b")
    mesh.write("b")  # then b writes one, which reaches a
    mesh.write("a")
    for _ in range(20):
        mesh.step("b", "a")
        mesh.step("a", "b")  # a sends its own and notes b's
        mesh.step("b", "c")  # b notes the records that came from c
    for x, y in _LINKS:
        mesh.sync(x, y)
    committed = len(mesh.logs["a"])
    two = translate(mesh.links[("a", "b")], committed)
    assert len(mesh.skipped("a", "b", committed, two)) == 5  # c's five, never read in a
    among = mesh.translated("a", "b", committed)
    assert among < two and mesh.skipped("a", "b", committed, among) == []


async def test_a_remote_that_comes_back_is_tried_at_once() -> None:
    """The back-off after a failure ends as soon as a remote that took no connection takes one
    (one probe for all the remote's replicators); a remote that takes connections gets the
    whole back-off (its failure was something else)."""
    port = free_port()
    remote = RemoteKafka(RemoteCluster("west", f"127.0.0.1:{port}"), "probe-test")
    listener: trio.SocketListener | None = None
    try:
        with trio.fail_after(60):  # the back-off below is 600 s: only the probe ends it early
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(remote.pause_after_failure, 600.0)
                # all three wait, nothing listening yet: one probes, two wait for it (a fixed
                # sleep here let a waiter not yet run see the listener below and wait 600 s)
                while not (remote._probing  # noqa: ASYNC110 - no event says "waiting"
                           and remote._back.statistics().tasks_waiting == 2):
                    await trio.sleep(0.01)
                listener = (await trio.open_tcp_listeners(port, host="127.0.0.1"))[0]
        start = trio.current_time()
        await remote.pause_after_failure(0.3)  # it takes connections now
        assert trio.current_time() - start >= 0.3
    finally:
        if listener is not None:
            await listener.aclose()
        await remote.aclose()


def test_a_batch_whose_records_do_not_parse_leaves_alone_as_it_is() -> None:
    """The broker stores a client's batch without looking into its records: one whose later
    records do not parse is not joined to a run (that would need them) but goes alone, as
    before, and the run before it is unchanged."""
    good = build_batch([Record(0, 10, b"k", bytes(300), []) for _ in range(3)], base_offset=0)
    bad = bytearray(build_batch([Record(0, 20, b"k", bytes(300), []) for _ in range(2)],
                                base_offset=3))
    second = 61 + 1 + (len(bad) - 61) // 2  # inside the second record: its body is garbage now
    bad[second:second + 8] = b"\xff" * 8
    out = OutgoingBatches("east", 1 << 20, forward_min_bytes=0)
    out.add(good, 0)
    out.add(bytes(bad), 0)
    groups = out.finish()
    assert [(g[1], g[4]) for g in groups] == [(3, 2), (2, 4)]
    assert bytes(groups[1][0]).endswith(bytes(bad[second:]))


def test_a_remote_that_noted_nothing_from_a_third_cluster_is_bounded_by_its_scan() -> None:
    # A and B in sync up to 50; B's link to X has read B's log only up to 12 and noted no
    # X-record: an X-record may sit in B at 12 or after, so the group resumes there
    checkpoint = Checkpoint(syncs=[(50, 50)], inbound=[(45, 60)])  # B-records read below 60
    assert translate_among(checkpoint, 50, {"x": [(30, 5)]}, "a",
                           {"x": LinkView(scanned=12)}) == 12
    assert translate_among(checkpoint, 50, {"x": [(30, 5)]}, "a",
                           {"x": LinkView(scanned=80)}) == 50
    assert translate_among(checkpoint, 50, {"x": [(30, 5)]}, "a", {"x": LinkView()}) == 0
    # B passed records unnoted up to 30 (a crashed session's): an X-record may hide below it
    assert translate_among(checkpoint, 50, {"x": [(30, 5)]}, "a",
                           {"x": LinkView(scanned=80, unnoted=30)}) == 0
    assert translate_among(checkpoint, 50, {"x": [(30, 5)]}, "a",
                           {"x": LinkView([(40, 5)], scanned=80, unnoted=30)}) == 50


def test_the_remote_s_scans_and_outbound_syncs_carry_the_offset_past_its_last_pairs() -> None:
    """A committed at 100 and B caught up: B's last X-record (noted at 60) and A's last record
    in B (bound 1: 70) no longer cap the offset once B's links have scanned past them and B's
    sync to A shows its own records below 120 sit below 100 here."""
    checkpoint = Checkpoint(syncs=[(100, 70)], inbound=[(90, 40)])
    there = {"a": LinkView([(70, 100)], scanned=120, syncs=[(110, 95), (120, 100)]),
             "x": LinkView([(60, 9)], scanned=120)}
    assert translate_among(checkpoint, 100, {"x": [(80, 9)]}, "a", there) == 120
    # B holds an X-record the group has not read (X offset 9 > 8 read here): back to after the
    # last one it read
    assert translate_among(checkpoint, 100, {"x": [(80, 8)]}, "a", {
        **there, "x": LinkView([(50, 8), (60, 9)], scanned=120)}) == 50
    # B's sync to A is not past here yet: its own records after 40 (bound 2) may be unread
    assert translate_among(checkpoint, 100, {"x": [(80, 9)]}, "a", {
        **there, "a": LinkView([(70, 100)], scanned=120, syncs=[(120, 101)])}) == 40
