"""Plain-text tables for the admin CLI (what kafka-topics and mqadmin print, roughly).

This module must never do I/O other than returning strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value)
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns under an upper-case header; empty input gives just the header."""
    header = [c.upper() for c in columns]
    body = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for r in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def key_values(doc: dict[str, Any]) -> str:
    width = max((len(k) for k in doc), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in sorted(doc.items()))
