"""The admin HTTP application: one Starlette app holding the API, /metrics, probes and console.

Routes are declared in tables (`AdminRoute`: method, path, handler, access); `build_app` turns
each into a Starlette route whose endpoint authenticates, authorises (gateway/admin/auth.py),
reads the bounded body, calls the handler and turns its `HttpResponse` or `HttpError` into an
answer.  Every route must name its Access -- a route cannot be added without one -- and only
/health, /ready, the login page and the console's static assets are public (/metrics too when
[admin] metrics_authentication is off).

Why Starlette: a small, well-kept ASGI toolkit (routing, requests, responses, static files)
that runs on Trio through anyio, so the handlers stay plain Trio code calling the broker's
services; hypercorn (gateway/admin/http_server.py) serves it.

Errors: the API answers JSON {"error": ...} (404/405 included); the console answers an HTML
page; an unexpected exception is logged once with its traceback and answered 500 with no
detail (no stack trace ever reaches a client).  A state-changing request whose Origin header
names another site is refused (403): a page elsewhere cannot drive the API from an operator's
browser.

This module must never call the broker's services itself: handlers (gateway/admin/api.py and
the console) do; it only routes, checks and converts.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.admin.auth import (
    SESSION_COOKIE,
    Access,
    AdminAuth,
    Identity,
    Refused,
    log_refusal,
)
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse, error_body

log = logging.getLogger("ledgerwire.admin")

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
AccessRule = Callable[[HttpRequest], Access]
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class AdminRoute:
    method: str
    path: str
    handler: Handler
    access: AccessRule
    console: bool = False  # HTML errors, the session cookie accepted, CSRF checked on POST


def fixed(access: Access) -> AccessRule:
    return lambda _request: access


def _cross_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if not origin or request.method in _SAFE_METHODS:
        return False
    parts = urlsplit(origin)
    return parts.netloc.lower() != request.headers.get("host", "").lower()


FORWARDED_HEADER = "x-ledgerwire-forwarded"


def _scheme_and_client(request: Request) -> tuple[str, str]:
    """The caller's scheme and host.  On a unix socket (request.client is None: a
    `standalone --workers` worker's private socket, which only its supervisor reaches) they
    come from the supervisor's FORWARDED_HEADER ("<scheme> <host>"); elsewhere that header is
    ignored."""
    own_scheme = str(request.scope.get("scheme", "http"))
    if request.client is None:
        scheme, _, client = request.headers.get(FORWARDED_HEADER, "").partition(" ")
        if scheme in ("http", "https"):
            return scheme, client
        return own_scheme, ""
    return own_scheme, request.client.host


def _to_response(answer: HttpResponse) -> Response:
    headers = {**SECURITY_HEADERS, **answer.headers}
    return Response(answer.body, answer.status, headers, media_type=answer.content_type)


def _json_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(status, message), status, {**SECURITY_HEADERS, **(headers or {})},
                    media_type="application/json")


ErrorPage = Callable[[HttpRequest, int, str], HttpResponse]


class Endpoints:
    """Builds one endpoint per AdminRoute, sharing the auth and the console's error pages."""

    def __init__(self, auth: AdminAuth, error_page: ErrorPage | None = None) -> None:
        self.auth = auth
        self.error_page = error_page

    def endpoint(self, route: AdminRoute) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return await self._serve(route, request)
        return serve

    def _refused(self, route: AdminRoute, q: HttpRequest, exc: Refused,
                 principal: str | None) -> Response:
        log_refusal(exc.status, exc.message, q.method, q.path, q.client, principal)
        if route.console and self.error_page is not None:  # 401: the login form
            return _to_response(self.error_page(q, exc.status, exc.message))
        challenge = ({"www-authenticate": 'Basic realm="ledgerwire admin", charset="UTF-8"'}
                     if exc.status == 401 and not route.console else {})
        return _json_error(exc.status, exc.message, challenge)

    def _error(self, route: AdminRoute, q: HttpRequest, status: int, message: str) -> Response:
        if route.console and self.error_page is not None:
            return _to_response(self.error_page(q, status, message))
        return _json_error(status, message)

    async def _serve(self, route: AdminRoute, request: Request) -> Response:
        scheme, client = _scheme_and_client(request)
        q = HttpRequest(request.method, request.url.path, parse_qs(request.url.query),
                        {k.lower(): v for k, v in request.headers.items()}, b"",
                        dict(request.path_params), client)
        q.raw_target = request.url.path + ("?" + request.url.query if request.url.query else "")
        q.scheme = scheme
        identity: Identity | None = None
        try:
            if _cross_origin(request):
                raise Refused(403, "cross-origin request refused")
            identity = await self.auth.identify(q.headers, request.cookies,
                                                allow_session=route.console)
            if identity is None:
                self.auth.check(None, client, _access_before_body(route, q))  # 401 unless public
            q.identity = identity
            q.body = await request.body()  # bounded by BodyLimits (1 MiB, 10 s)
            self.auth.check(identity, client, route.access(q))
            new_session = None
            if route.console and identity is not None and identity.method == "anonymous":
                new_session = self.auth.sessions.create(identity.principal)  # forms need CSRF
                q.identity = identity = Identity(identity.principal, "session", new_session)
            if route.console and q.method == "POST" and identity is not None:
                _check_csrf(q, identity, fresh=new_session is not None)
            response = _to_response(await route.handler(q))
            if new_session is not None:
                response.set_cookie(SESSION_COOKIE, new_session.session_id, httponly=True,
                                    samesite="strict", secure=scheme == "https")
            return response
        except Refused as exc:
            return self._refused(route, q, exc, identity.principal if identity else None)
        except HttpError as exc:
            return self._error(route, q, exc.status, exc.message)
        except Exception:  # a handler bug: one traceback in the log, nothing to the client
            log.exception("admin request failed", extra={"path": q.path, "method": q.method})
            return self._error(route, q, 500, "internal error (see the broker log)")


def _access_before_body(route: AdminRoute, q: HttpRequest) -> Access:
    """The route's Access as far as it can be known without the body (a rule that needs the
    body counts as not public)."""
    try:
        return route.access(q)
    except HttpError:
        return Access()


def _check_csrf(q: HttpRequest, identity: Identity, *, fresh: bool) -> None:
    session = identity.session
    if session is None:  # a browser replays cached Basic credentials for any page's form
        raise Refused(403, "console forms need a console login (scripts: use the API)")
    given = q.form().get("csrf", "")
    if fresh or not hmac.compare_digest(given.encode(), session.csrf.encode()):
        raise Refused(403, "the form has expired; reload the page and try again")


def build_app(routes: Sequence[AdminRoute], auth: AdminAuth, *,
              error_page: ErrorPage | None = None) -> Starlette:
    """The Starlette application over `routes` (see the module doc)."""
    endpoints = Endpoints(auth, error_page)
    starlette_routes: list[BaseRoute] = []
    for route in routes:
        starlette_routes.append(Route(route.path, endpoints.endpoint(route),
                                      methods=[route.method], name=None))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = {404: f"no such endpoint: {request.url.path}",
                  405: f"{request.method} not allowed on {request.url.path}"}.get(
                      status, "bad request")
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
        return _json_error(status, detail, headers)

    return Starlette(routes=starlette_routes, exception_handlers={HTTPException: not_found})

