"""Ensemble placement: which bookies hold a new ledger, and who replaces a failed bookie.

Chooses among the bookies registered under /ledgerwire/bookies/available, preferring the ones this
client has placed the fewest ledgers on (ties broken at random) so load spreads, and never puts
two copies on one bookie.  A client may name bookies it prefers (`prefer`: the ones served by
its own process, reached without the wire): a new ensemble takes those first, the rest as
above.  Durability is the quorums' business, not the placement's: a preferred bookie only
changes which bookies hold the copies, never how many.  Pure functions plus a small load
counter; must never talk to the network or the metadata store itself.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from ledger_backend.client.errors import NotEnoughBookiesError


class PlacementPolicy:
    """Least-loaded-first placement with random tie breaking."""

    def __init__(self, rng: random.Random | None = None,
                 prefer: Callable[[str], bool] | None = None) -> None:
        self._rng = rng or random.Random()
        self._placed: Counter[str] = Counter()
        self._prefer = prefer

    def choose_ensemble(self, available: Iterable[str], size: int) -> list[str]:
        candidates = sorted(set(available))
        if len(candidates) < size:
            raise NotEnoughBookiesError(
                f"need {size} bookies, {len(candidates)} available: {candidates}"
            )
        preferred = [b for b in candidates if self._prefer(b)] if self._prefer else []
        chosen = self._least_loaded(preferred, min(size, len(preferred)))
        rest = [b for b in candidates if b not in chosen]
        chosen += self._least_loaded(rest, size - len(chosen))
        self._rng.shuffle(chosen)  # spread which bookie leads each write set
        self._placed.update(chosen)
        return chosen

    def choose_replacement(
        self, available: Iterable[str], ensemble: Sequence[str], exclude: Iterable[str] = ()
    ) -> str:
        """A bookie for a failed ensemble member: never one already in `ensemble` or `exclude`."""
        banned = set(ensemble) | set(exclude)
        candidates = sorted(set(available) - banned)
        if not candidates:
            raise NotEnoughBookiesError(
                f"no bookie outside {sorted(banned)} is available to replace a failed one"
            )
        (chosen,) = self._least_loaded(candidates, 1)
        self._placed[chosen] += 1
        return chosen

    def _least_loaded(self, candidates: list[str], count: int) -> list[str]:
        keyed = [(self._placed[b], self._rng.random(), b) for b in candidates]
        keyed.sort()
        return [b for _, _, b in keyed[:count]]
