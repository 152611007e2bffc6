"""Tag subscriptions: parsing "*" / "a || b" expressions and filtering messages by tag.

The server filters by tag (what Java does with hash codes first and the client rechecks by
name; here the tag strings are at hand, so the filter compares names directly and the hash
codes are only reported back in heartbeats/consumer data).

This module must never do I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from protocols.rocketmq.errors import SubscriptionParseFailedError
from protocols.rocketmq.message_encoding import java_string_hash

SUB_ALL = "*"


@dataclass(frozen=True, slots=True)
class TagFilter:
    expression: str
    tags: frozenset[str] | None  # None: everything

    def matches(self, tag: str | None) -> bool:
        if self.tags is None:
            return True
        return tag is not None and tag in self.tags

    @property
    def matcher(self) -> Callable[[str | None], bool] | None:
        """`matches`, or None when everything matches (a per-message call saved)."""
        return None if self.tags is None else self.matches

    @property
    def codes(self) -> list[int]:
        return sorted(java_string_hash(t) for t in (self.tags or ()))


MATCH_ALL = TagFilter(SUB_ALL, None)


def parse_tag_expression(expression: str | None, expression_type: str = "TAG") -> TagFilter:
    if expression_type and expression_type.upper() not in ("TAG", ""):
        raise SubscriptionParseFailedError(
            f"expression type {expression_type!r} is not supported (only TAG)")
    if expression is None:
        return MATCH_ALL
    text = expression.strip()
    if not text or text == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise SubscriptionParseFailedError(f"tag expression {expression!r} has no tag")
    return TagFilter(text, tags)
