"""Server-side HTML for the console: the Jinja2 environment, its filters, and form parsing.

Why Jinja2: the well-kept template engine with autoescaping on by default, so every value a
page shows (topic names, keys, message bodies) is HTML-escaped unless a template says
otherwise (none do).  Templates and static assets live in this package (templates/, static/):
no build step, no CDN.

Forms are validated here into plain values; a bad one raises HttpError(400) with a message the
page shows -- never a traceback.

This module must never reach broker state: it only renders what handlers pass in.
"""

from __future__ import annotations

import datetime as dt
import time
from importlib import metadata
from typing import Any

import jinja2

from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse
from protocols.kafka.errors import InvalidTopicError
from protocols.kafka.topic_names import validate_topic_name

_REASONS = {400: "Bad request", 401: "Log in first", 403: "Not allowed", 404: "Not found",
            405: "Method not allowed", 409: "Conflict", 413: "Too large", 500: "Internal error",
            503: "Unavailable"}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.admin.console", "templates"),
    autoescape=True,
    undefined=jinja2.ChainableUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _size(value: Any) -> str:
    if value is None:
        return "–"
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(value)  # pragma: no cover


def _ms_time(value: Any) -> str:
    if value is None or not isinstance(value, int) or value < 0:
        return "–"
    return dt.datetime.fromtimestamp(value / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


_env.filters["size"] = _size
_env.filters["ms_time"] = _ms_time


def version() -> str:
    try:
        return metadata.version("ledgerwire")
    except metadata.PackageNotFoundError:
        return "unknown"


def uptime(started_at: float) -> str:
    seconds = max(0, int(time.time() - started_at))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s"


class Pages:
    """Renders templates with what every page shows (principal, CSRF token, version)."""

    def __init__(self, broker_id: int, login_required: bool) -> None:
        self.broker_id = broker_id
        self.login_required = login_required
        self.version = version()

    def render(self, q: HttpRequest, template: str, *, status: int = 200,
               headers: dict[str, str] | None = None, **context: Any) -> HttpResponse:
        identity = q.identity
        session = getattr(identity, "session", None)
        base = {"principal": getattr(identity, "principal", None),
                "csrf": session.csrf if session is not None else "",
                "can_logout": session is not None and self.login_required,
                "version": self.version, "broker_id": self.broker_id, "page": "",
                "title": "ledgerwire", "notice": None}
        base.update(context)
        body = _env.get_template(template).render(base)
        return HttpResponse(status, body.encode(), "text/html; charset=utf-8",
                            {**(headers or {}), "content-security-policy": (
                                "default-src 'self'; img-src 'self' data:; "
                                "style-src 'self' 'unsafe-inline'; "
                                "frame-ancestors 'none'; form-action 'self'")})

    def error(self, q: HttpRequest, status: int, message: str) -> HttpResponse:
        if status == 401:  # who are you? -> the login form, coming back here afterwards
            return self.render(q, "login.html", status=401, title="Log in", error=None,
                               next=safe_next(q.raw_target if q.method == "GET" else "/"))
        return self.render(q, "error.html", status=status, status_code=status,
                           reason=_REASONS.get(status, "Error"), message=message,
                           title=_REASONS.get(status, "Error"))


# --- validation -----------------------------------------------------------------------------

def topic_name(value: str | None) -> str:
    try:
        return validate_topic_name(value)
    except InvalidTopicError:
        raise HttpError(400, "a topic name is 1-249 letters, digits, '.', '_' or '-'") from None


def group_name(value: str | None) -> str:
    if not value or len(value) > 255 or any(ord(c) < 32 for c in value):
        raise HttpError(400, "a group id is 1-255 printable characters")
    return value


def int_arg(value: str | None, name: str, *, low: int, high: int,
            default: int | None = None) -> int | None:
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise HttpError(400, f"{name} must be a whole number") from None
    if not low <= number <= high:
        raise HttpError(400, f"{name} must be between {low} and {high}")
    return number


def time_arg(value: str | None) -> int | None:
    """Milliseconds since the epoch from digits or an ISO date/time (UTC unless it says)."""
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if text.isdigit():
        return int_arg(text, "time", low=0, high=2**53)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise HttpError(400, "time: milliseconds since 1970 or an ISO date such as "
                             "2026-01-31T12:00:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def choice(value: str | None, allowed: tuple[str, ...], name: str, default: str) -> str:
    if value is None or value == "":
        return default
    if value not in allowed:
        raise HttpError(400, f"{name} must be one of {', '.join(allowed)}")
    return value


def safe_next(value: str | None) -> str:
    """A same-site path to go to after logging in (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value \
            or len(value) > 2000:
        return "/"
    return value
