"""Authentication and authorisation on every admin route (API, /metrics, console).

An in-process admin stack with real SCRAM credentials, admin tokens and ACLs in the metadata
store: no or wrong credentials get 401 on every non-public route, a principal without the
ACLs gets 403, a DESCRIBE-only user can look but not delete, super users pass, tokens stand for
their principal until revoked, and a cross-site form cannot act.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from gateway.admin.auth import AdminAuth
from gateway.admin.http_server import serve
from gateway.admin.routes import build_admin_app
from gateway.security.acl_store import AclStore, Authorizer
from gateway.security.admin_tokens import TokenStore
from gateway.security.credentials import CredentialStore
from protocols.kafka.acl_model import (
    OP_DESCRIBE,
    PAT_LITERAL,
    PERM_ALLOW,
    RES_GROUP,
    RES_TOPIC,
    AclBinding,
)
from tests.operations.http_support import exchange, found, request
from tests.operations.ops_stack import OpsStack, batch

USERS = {"root": "root-secret", "alice": "alice-secret", "bob": "bob-secret"}
PUBLIC = {("GET", "/health"), ("GET", "/ready"), ("GET", "/login"), ("POST", "/login"),
          ("GET", "/console/static/seen")}  # the console's CSS and JS


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture
async def secured(ops: OpsStack) -> AsyncIterator[dict[str, Any]]:
    credentials = CredentialStore(ops.store)
    for user, password in USERS.items():
        await credentials.set_password(user, password, ("SCRAM-SHA-512",), iterations=4096)
    acls = AclStore(ops.store)
    await acls.create([
        AclBinding(RES_TOPIC, "seen", PAT_LITERAL, "User:alice", "*", OP_DESCRIBE, PERM_ALLOW),
        AclBinding(RES_GROUP, "g1", PAT_LITERAL, "User:alice", "*", OP_DESCRIBE, PERM_ALLOW),
    ])
    tokens = TokenStore(ops.store)
    alice_token, _ = await tokens.create("User:alice", description="test")
    auth = AdminAuth(required=True, credentials=credentials, tokens=tokens,
                     authorizer=Authorizer(acls, enabled=True, super_users={"User:root"}),
                     failed_delay_s=0.05)
    await ops.topics.create_topic("seen", 1, {})
    await ops.topics.create_topic("hidden", 1, {})
    plog = await ops.topics.partition("seen", 0)
    await plog.append(batch(3))
    app = build_admin_app(ops.admin, auth)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, app, "127.0.0.1", 0)
        yield {"port": port, "app": app, "auth": auth, "tokens": tokens, "token": alice_token}
        nursery.cancel_scope.cancel()


def every_route(app: Any) -> list[tuple[str, str]]:
    """(method, concrete path) of each route the app declares (parameters filled in)."""
    out = []
    for route in app.routes:
        path = getattr(route, "path", "")
        for method in sorted(getattr(route, "methods", None) or ()):
            if method == "HEAD":
                continue
            out.append((method, re.sub(r"\{(\w+)\}", lambda m: {"tenant": "public",
                                                                 "namespace": "default",
                                                                 "action": "gc"}.get(
                m.group(1), "seen"), path)))
    return out


async def test_every_route_refuses_missing_and_wrong_credentials(secured: dict[str, Any]) -> None:
    port = secured["port"]
    routes = every_route(secured["app"])
    assert len(routes) > 30
    for method, path in routes:
        if (method, path) in PUBLIC:
            continue
        status, _ = await request(port, method, path, {} if method != "GET" else None)
        assert status == 401, (method, path, status)
        status, _ = await request(port, method, path, None, basic("alice", "wrong"))
        assert status == 401, (method, path, status)
        status, _ = await request(port, method, path, None, basic("nobody", "x"))
        assert status == 401, (method, path, status)
        status, _ = await request(port, method, path, None,
                                  {"Authorization": "Bearer lwt_0123456789abcdef_" + "A" * 43})
        assert status == 401, (method, path, status)
    assert (await request(port, "GET", "/health"))[0] == 200


async def test_a_principal_without_acls_is_refused_403(secured: dict[str, Any]) -> None:
    port = secured["port"]
    bob = basic("bob", USERS["bob"])
    for method, path in every_route(secured["app"]):
        if (method, path) in PUBLIC or path in ("/admin/v1/topics", "/admin/v1/groups",
                                                "/console/topics", "/console/groups",
                                                "/logout"):
            continue
        status, _ = await request(port, method, path, {} if method != "GET" else None, bob)
        assert status == 403, (method, path, status)
    status, listed = await request(port, "GET", "/admin/v1/topics", None, bob)
    assert status == 200 and listed == []  # lists are filtered, as Kafka's Metadata is


async def test_describe_only_user_can_look_but_not_delete(secured: dict[str, Any]) -> None:
    port = secured["port"]
    alice = basic("alice", USERS["alice"])
    status, topic = await request(port, "GET", "/admin/v1/topics/seen", None, alice)
    assert status == 200 and topic["partitions"][0]["log_end_offset"] == 3
    status, listed = await request(port, "GET", "/admin/v1/topics", None, alice)
    assert [t["topic"] for t in listed] == ["seen"]
    assert (await request(port, "GET", "/admin/v1/topics/hidden", None, alice))[0] == 403
    status, body = await request(port, "DELETE", "/admin/v1/topics/seen", None, alice)
    assert status == 403 and "DELETE" in body["error"]
    assert (await request(port, "PUT", "/admin/v1/topics/new", {"partitions": 1}, alice))[0] \
        == 403
    assert (await request(port, "GET", "/metrics", None, alice))[0] == 403
    status, page = await request(port, "GET", "/console/topics/seen", None, alice)
    assert status == 200 and "seen" in page
    # message contents need READ, which alice does not have
    assert (await request(port, "GET", "/console/topics/seen/messages", None, alice))[0] == 403
    root = basic("root", USERS["root"])
    assert (await request(port, "DELETE", "/admin/v1/topics/seen", None, root))[0] == 200


async def test_tokens_stand_for_their_principal_until_revoked(secured: dict[str, Any]) -> None:
    port, token = secured["port"], secured["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    status, topic = await request(port, "GET", "/admin/v1/topics/seen", None, bearer)
    assert status == 200
    assert (await request(port, "DELETE", "/admin/v1/topics/seen", None, bearer))[0] == 403
    token_id = token.split("_")[1]
    assert await secured["tokens"].revoke(token_id)
    assert (await request(port, "GET", "/admin/v1/topics/seen", None, bearer))[0] == 401


async def test_refusals_are_logged_once(secured: dict[str, Any],
                                        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ledgerwire.admin.auth"):
        await request(secured["port"], "DELETE", "/admin/v1/topics/seen", None,
                      basic("alice", USERS["alice"]))
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "403" in refused[0].getMessage()
    assert "alice-secret" not in caplog.text


async def test_unauthenticated_answers_are_json_with_a_challenge(secured: dict[str, Any]) -> None:
    raw = b"GET /admin/v1/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = await exchange(secured["port"], raw)
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 401")
    assert b"www-authenticate: basic" in head and b"application/json" in head


async def test_a_cross_site_post_is_refused(secured: dict[str, Any]) -> None:
    root = basic("root", USERS["root"])
    status, _ = await request(secured["port"], "DELETE", "/admin/v1/topics/seen", None,
                              {**root, "Origin": "http://evil.example"})
    assert status == 403
    status, _ = await request(secured["port"], "DELETE", "/admin/v1/topics/seen", None,
                              {**root, "Origin": "http://x"})  # same origin as Host: x
    assert status == 200


async def test_console_login_session_and_csrf(secured: dict[str, Any]) -> None:
    port = secured["port"]
    status, page = await request(port, "GET", "/console/topics")
    assert status == 401 and 'name="password"' in page  # the login form, not a traceback
    form = "user=root&password=root-secret&next=%2Fconsole%2Ftopics"
    raw = (f"POST /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           f"Content-Type: application/x-www-form-urlencoded\r\n"
           f"Content-Length: {len(form)}\r\n\r\n{form}").encode()
    answer = (await exchange(port, raw)).decode()
    assert answer.startswith("HTTP/1.1 303")
    cookie = found(r"set-cookie: (lw_session=[^;]+)", answer, re.I)
    status, page = await request(port, "GET", "/console/topics", None, {"Cookie": cookie})
    assert status == 200 and "hidden" in page and "seen" in page
    # a form without the session's CSRF token is refused
    status, _ = await request(port, "POST", "/console/topics/seen/delete", None,
                              {"Cookie": cookie})
    assert status == 403
    # and the API never takes the cookie
    assert (await request(port, "GET", "/admin/v1/topics", None, {"Cookie": cookie}))[0] == 401


async def test_a_wrong_password_is_answered_late(secured: dict[str, Any]) -> None:
    secured["auth"].failed_delay_s = 0.3
    started = trio.current_time()
    assert (await request(secured["port"], "GET", "/admin/v1/brokers", None,
                          basic("root", "guess")))[0] == 401
    assert trio.current_time() - started >= 0.3
    assert (await request(secured["port"], "GET", "/admin/v1/brokers", None,
                          basic("root", USERS["root"])))[0] == 200
