"""Structured logging for ledgerwire processes: one JSON object (or one text line) per event.

Modules log through the standard `logging` module with `extra={...}` fields; this module only
decides how records are rendered. It must never be imported by protocols/ or ledger_backend/
(they log through `logging` and stay unaware of the format).
"""

from __future__ import annotations

import json
import logging
import sys
import time

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                event[key] = value if isinstance(value, int | float | bool | None) else str(value)
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-5s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {
            k: v
            for k, v in vars(record).items()
            if k not in _STANDARD_ATTRS and not k.startswith("_")
        }
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def setup_logging(level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kazoo is chatty at INFO about every connection state change it retries through
    logging.getLogger("kazoo").setLevel(logging.WARNING)
