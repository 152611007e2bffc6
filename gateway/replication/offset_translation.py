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

This module must never touch a socket or the store.
"""

from __future__ import annotations

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
