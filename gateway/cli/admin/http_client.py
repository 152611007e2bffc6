"""A tiny blocking JSON client for the admin HTTP API (the CLI runs it once and exits).

Credentials: `AdminCredentials` from --user/--password (or $LEDGERWIRE_ADMIN_USER and
$LEDGERWIRE_ADMIN_PASSWORD) for HTTP Basic, or --token ($LEDGERWIRE_ADMIN_TOKEN) for Bearer;
an https:// admin URL is verified against --cafile ($LEDGERWIRE_ADMIN_CAFILE) or the system CAs.

This module must never be imported by the server: it blocks (urllib), which only a one-shot
command may do.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
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


class AdminCredentials:
    """How the CLI proves who it is to the admin API (never printed)."""

    def __init__(self, user: str | None = None, password: str | None = None,
                 token: str | None = None, cafile: str | None = None) -> None:
        env = os.environ
        self.user = user or env.get("LEDGERWIRE_ADMIN_USER") or None
        self.password = password if password is not None else env.get(
            "LEDGERWIRE_ADMIN_PASSWORD")
        self.token = token or env.get("LEDGERWIRE_ADMIN_TOKEN") or None
        self.cafile = cafile or env.get("LEDGERWIRE_ADMIN_CAFILE") or None

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.cafile) if self.cafile else None


def admin_url(given: str | None) -> str:
    return (given or os.environ.get("LEDGERWIRE_ADMIN_URL") or DEFAULT_ADMIN_URL).rstrip("/")


def path(*segments: str, **query: Any) -> str:
    """'/admin/v1/<segments...>' with each segment quoted and the non-None query arguments."""
    text = "/admin/v1/" + "/".join(quote(s, safe="") for s in segments)
    args = {k: v for k, v in query.items() if v is not None}
    return text + ("?" + urlencode(args) if args else "")


def call(base: str, method: str, target: str, body: Any = None, timeout_s: float = 30.0,
         credentials: AdminCredentials | None = None) -> Any:
    credentials = credentials or AdminCredentials()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + target, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **credentials.headers()})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s,
                                    context=credentials.ssl_context()) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            text = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            pass
        if exc.code == 401:
            text += (" -- pass --user and --password (or $LEDGERWIRE_ADMIN_USER/_PASSWORD) or "
                     "--token ($LEDGERWIRE_ADMIN_TOKEN)")
        raise AdminRequestError(exc.code, text) from None
    except (urllib.error.URLError, OSError) as exc:
        raise AdminRequestError(0, f"cannot reach the admin API at {base}: {exc}") from None
    if not payload:
        return None
    return json.loads(payload)
