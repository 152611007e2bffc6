"""Consumer offsets that follow: a group's committed offset here, as an offset in the remote.

For topic partition P replicated both ways between this cluster (A) and a remote (B), a group
committed at offset C here has read (1) every record written here below C and (2) every record
that came from B and sits here below C.  Its translated offset in B must not skip either kind:

- bound 1, from the offset syncs of A -> B (checkpoint `syncs`): the newest pair (s, r) with
  s <= C.  Every A-record at or after s is in B at or after r.  No pair: B's start (0).
- bound 2, from what B sent here (checkpoint `inbound`): the newest (a, o) with a <= C means
  the group read every B-record below o.  When B has sent records here but none below C, B's
  start (0); when B never sent any here, no bound.

The translation is the smaller bound.  The group then re-reads at most what was written (on
either side) between the last offset sync before C and C itself, i.e. about one
`checkpoint_interval_s` of traffic.  This holds for two clusters; a third cluster's records
in B are not covered (they reach A on their own link) and are not accounted for.

Among three or more clusters (`translate_among`), each third cluster X adds

- bound 3, from two pair lists: A's inbound pairs from X (newest (a, x) with a <= C: the group
  read every X-record below X-offset x; none: below 0) and B's inbound pairs from X (its
  checkpoint for X: newest (b, x') with x' <= x, so every X-record at or after x sits in B at or
  after b; none: B's start).  When B has noted no record from X, B's scan position for X (its
  checkpoint's `source_next`, 0 without a checkpoint): below it B holds no X-record, above it
  B has not looked yet.

X-records reach B only on X's own link (a replicated record is never sent on), so the bounds
cover every origin.  B's pairs live in B's metadata store: B's admin API serves them
(`GET /admin/v1/replication/{topic}/inbound`) and the service fetches them
(gateway/replication/remote_admin.py) before it pushes offsets to B.

This module must never touch a socket or the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.replication.checkpoints import Checkpoint


def translate(checkpoint: Checkpoint, committed: int) -> int:
    """The offset in the remote at which a group committed at `committed` here resumes."""
    bound1 = 0
    for source, remote in checkpoint.syncs:
        if source <= committed:
            bound1 = remote
    if not checkpoint.inbound:
        return bound1
    bound2 = 0
    for local_next, origin_next in checkpoint.inbound:
        if local_next <= committed:
            bound2 = origin_next
    return min(bound1, bound2)


Pairs = Sequence[tuple[int, int]]


def _newest(pairs: Pairs, limit: int, *, by_first: bool = True) -> int:
    """The other member of the newest pair whose first (or second) member is <= `limit`; 0
    when there is none."""
    found = 0
    for first, second in pairs:
        if (first if by_first else second) <= limit:
            found = second if by_first else first
    return found


def translate_among(checkpoint: Checkpoint, committed: int, inbound_here: Mapping[str, Pairs],
                    inbound_there: Mapping[str, Pairs],
                    scanned_there: Mapping[str, int] | None = None) -> int:
    """The offset in the remote (B) for a group committed at `committed` here (A), with third
    clusters: `checkpoint` is A's for B; `inbound_here[X]`, A's inbound pairs from each third
    cluster X (from A's checkpoint for X); `inbound_there[X]`, B's (from B's checkpoint for
    X); `scanned_there[X]`, how far B's link to X has read B's log (its `source_next`; without
    it, a B that noted nothing from X holds none).  See the module docstring."""
    bound = translate(checkpoint, committed)
    for cluster, there in inbound_there.items():
        if not there:
            if scanned_there is not None:
                bound = min(bound, scanned_there.get(cluster, 0))
            continue
        read_below = _newest(inbound_here.get(cluster, ()), committed)
        bound = min(bound, _newest(there, read_below, by_first=False))
    return bound
