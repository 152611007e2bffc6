"""Consumer offsets that follow: a group's committed offset here, as an offset in the remote.

For topic partition P replicated both ways between this cluster (A) and a remote (B), a group
committed at offset C here has read (1) every record written here below C and (2) every record
that came from B and sits here below C.  Its translated offset in B must not skip either kind:

- bound 1, from the offset syncs of A -> B (checkpoint `syncs`): the newest pair (s, r) with
  s <= C.  Every A-record at or after s is in B at or after r.  No pair: B's start (0).
- bound 2, from what B sent here (checkpoint `inbound`): the newest (a, o) with a <= C means
  the group read every B-record below o.  When B has sent records here but none below C, B's
  start (0); when none has been noted here yet, the first B offset where A's sends saw a
  record that is not A's (checkpoint `foreign_from`), or no bound when there is none.

The translation is the smaller bound.  The group then re-reads at most what was written (on
either side) between the last offset sync before C and C itself, i.e. about one
`checkpoint_interval_s` of traffic.  This holds for two clusters; a third cluster's records
in B are not covered (they reach A on their own link) and are not accounted for.  (Without
`foreign_from`, "no bound" for an empty `inbound` skipped B's first records when they sat in
B below A's synced ones and had not been noted here yet.)

Among three or more clusters (`translate_among`) the remote's own view is fetched too: for
every other cluster Y (this one included) B's checkpoint of its link to Y (a `LinkView`: its
inbound pairs from Y, how far it has scanned B's log, below which offset it may have skipped
records without noting them, and its outbound syncs to Y).  Each origin of B's records gets
a bound; the translation is the smallest:

- B's own records: bound 2, or the newest outbound sync (b, a) of B -> A with a <= C (every
  B-record below b sits here below C: read), whichever is larger; with neither, 0 (an empty
  list of inbound pairs here may only mean that this side has not scanned B's records yet).
- A's records: bound 1, or the origin bound below for Y = A with "read below" C.
- each third cluster X: the origin bound for Y = X, "read below" x from A's inbound pairs from
  X (newest (a, x) with a <= C; none: 0).
- origin bound: when B holds a Y-record the group has not read (a pair (b, y) with y > read
  below), the newest pair (b, y) with y <= read below (its b; none: 0): Y-records reach B in
  Y's order, so every later one sits at b or after.  Otherwise every Y-record below B's scan
  position S has been noted and none is unread, so S, unless B skipped records unnoted above
  its newest pair (a session that resumed past what its crashed predecessor sent): then that
  pair's b.

Y-records reach B only on Y's own link (a replicated record is never sent on), so the bounds
cover every origin.  B's checkpoints live in B's metadata store: B's admin API serves them
(`GET /admin/v1/replication/{topic}/inbound`) and the service fetches them
(gateway/replication/remote_admin.py) before it pushes offsets to B.  Once everything has
been replicated, noted and synced, a group committed at A's end resumes at B's end.

This module must never touch a socket or the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.replication.checkpoints import Checkpoint


def translate(checkpoint: Checkpoint, committed: int) -> int:
    """The offset in the remote at which a group committed at `committed` here resumes."""
    bound1 = 0
    for source, remote in checkpoint.syncs:
        if source <= committed:
            bound1 = remote
    if not checkpoint.inbound:  # nothing of B's noted here yet: B's records sit at or after
        # the first non-A record seen there (none seen: none there below bound 1)
        return bound1 if checkpoint.foreign_from < 0 else min(bound1, checkpoint.foreign_from)
    bound2 = 0
    for local_next, origin_next in checkpoint.inbound:
        if local_next <= committed:
            bound2 = origin_next
    return min(bound1, bound2)


Pairs = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class LinkView:
    """The remote B's checkpoint of its link to one other cluster Y, as B's admin API serves
    it: B's inbound pairs from Y, its scan position in B's log, the offset below which it may
    have skipped records unnoted, and its outbound syncs (B offset, Y offset)."""
    inbound: Pairs = ()
    scanned: int = 0
    unnoted: int = 0
    syncs: Pairs = ()


def _newest(pairs: Pairs, limit: int, *, by_first: bool = True) -> int:
    """The other member of the newest pair whose first (or second) member is <= `limit`; 0
    when there is none."""
    found = 0
    for first, second in pairs:
        if (first if by_first else second) <= limit:
            found = second if by_first else first
    return found


def _origin_bound(view: LinkView, read_below: int) -> int:
    """An offset in B below which every record from Y is one the group read (every Y-record
    below Y-offset `read_below`).  See the module docstring."""
    pairs = view.inbound
    if any(origin_next > read_below for _, origin_next in pairs):
        return _newest(pairs, read_below, by_first=False)
    last = pairs[-1][0] if pairs else 0
    return max(view.scanned, last) if view.unnoted <= last else last


def translate_among(checkpoint: Checkpoint, committed: int, inbound_here: Mapping[str, Pairs],
                    here: str, there: Mapping[str, LinkView]) -> int:
    """The offset in the remote (B) for a group committed at `committed` here (A, named
    `here`), with third clusters: `checkpoint` is A's for B; `inbound_here[X]`, A's inbound
    pairs from each third cluster X (from A's checkpoint for X); `there[Y]`, B's checkpoint
    of its link to each other cluster Y, A included (without one: B has noted nothing, scanned
    nothing and synced nothing).  See the module docstring."""
    bound1 = _newest(checkpoint.syncs, committed)
    to_here = there.get(here, LinkView())
    own = max(_newest(to_here.syncs, committed, by_first=False),
              _newest(checkpoint.inbound, committed))
    bound = min(max(bound1, _origin_bound(to_here, committed)), own)
    for cluster, view in there.items():
        if cluster != here:
            read_below = _newest(inbound_here.get(cluster, ()), committed)
            bound = min(bound, _origin_bound(view, read_below))
    return bound
