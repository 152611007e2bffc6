"""RocketMQ delay levels: "1s 5s 10s 30s 1m ..." parsed to seconds (level n = entry n - 1).

This module must never do I/O.
"""

from __future__ import annotations

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_delay_levels(text: str = DEFAULT_DELAY_LEVELS) -> list[float]:
    levels: list[float] = []
    for item in text.split():
        for unit in ("ms", "s", "m", "h", "d"):
            if item.endswith(unit) and item[: -len(unit)].replace(".", "", 1).isdigit():
                levels.append(float(item[: -len(unit)]) * _UNITS[unit])
                break
        else:
            raise ValueError(f"bad delay level {item!r} (want e.g. 5s, 1m, 2h)")
    if not levels:
        raise ValueError("no delay levels")
    return levels


def clamp_level(level: int, levels: list[float]) -> int:
    return max(1, min(level, len(levels)))


# Arbitrary delivery times: ali-ons' setStartDeliverTime and RocketMQ 5's timer properties.
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_PROPERTIES = (PROPERTY_START_DELIVER_TIME, PROPERTY_TIMER_DELIVER_MS,
                    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)


def timer_deliver_at(props: dict[str, str], now_ms: int) -> int | None:
    """The wall-clock delivery time (ms) a message asks for, or None; ValueError if garbled."""
    for name in (PROPERTY_START_DELIVER_TIME, PROPERTY_TIMER_DELIVER_MS):
        if props.get(name):
            return int(props[name])
    if props.get(PROPERTY_TIMER_DELAY_SEC):
        return now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
    if props.get(PROPERTY_TIMER_DELAY_MS):
        return now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
    return None
