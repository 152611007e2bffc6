"""A tiny blocking JSON client for the admin HTTP API (the CLI runs it once and exits).

This module must never be imported by the server: it blocks (urllib), which only a one-shot
command may do.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"


class AdminRequestError(Exception):
    """The admin API refused a request (status and its error text) or could not be reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


def admin_url(given: str | None) -> str:
    return (given or os.environ.get("LEDGERWIRE_ADMIN_URL") or DEFAULT_ADMIN_URL).rstrip("/")


def path(*segments: str, **query: Any) -> str:
    """'/admin/v1/<segments...>' with each segment quoted and the non-None query arguments."""
    text = "/admin/v1/" + "/".join(quote(s, safe="") for s in segments)
    args = {k: v for k, v in query.items() if v is not None}
    return text + ("?" + urlencode(args) if args else "")


def call(base: str, method: str, target: str, body: Any = None, timeout_s: float = 30.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + target, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            text = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            pass
        raise AdminRequestError(exc.code, text) from None
    except (urllib.error.URLError, OSError) as exc:
        raise AdminRequestError(0, f"cannot reach the admin API at {base}: {exc}") from None
    if not payload:
        return None
    return json.loads(payload)
