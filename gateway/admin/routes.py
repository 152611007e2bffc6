"""The admin listener's route table, its application, and the task that serves it.

`api_routes` declares every JSON endpoint of docs/admin.md's "Admin HTTP API" with the Access it
needs (gateway/admin/auth.py): reading needs DESCRIBE on the resource (or on the cluster), changing
needs the Kafka operation on the resource (CREATE, DELETE; READ on group and topic to reset
offsets) or ALTER on the cluster; tenants, namespaces, policies, bookies, GC, retention and
tokens are cluster-wide (DESCRIBE to read, ALTER to change); a read ticket for Spark executors
needs READ on every topic it names (gateway/admin/read_tickets.py).  Lists of topics and groups are
filtered to what the caller may DESCRIBE.  `build_admin_app` adds the console
(gateway/admin/console/) and its static assets; `serve_admin_api` serves it all with hypercorn
(gateway/admin/http_server.py).

This module must never reach broker state except through gateway/admin/api.py and
gateway/admin/groups.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from starlette.applications import Starlette

from gateway.admin import api, groups
from gateway.admin.api import AdminContext, body_object, coordinator_of, translate_errors
from gateway.admin.app import AdminRoute, build_app, fixed
from gateway.admin.auth import (
    CLUSTER_ALTER,
    CLUSTER_DESCRIBE,
    PUBLIC,
    Access,
    AdminAuth,
    alter_topic,
    create_topic,
    delete_topic,
    describe_group,
    describe_topic,
    reset_group,
)
from gateway.admin.console.actions import ConsoleActions
from gateway.admin.console.pages import ANY_PRINCIPAL, ConsolePages
from gateway.admin.console.rendering import Pages
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse, serve, serve_unix
from gateway.admin.metrics import render_metrics
from gateway.admin.read_tickets import ticket_access
from gateway.admin.replication_routes import replication_routes
from gateway.security.admin_tokens import TokenError

log = logging.getLogger("ledgerwire.admin")
V1 = "/admin/v1"

Operation = Callable[[HttpRequest], Awaitable[Any]]


def _json(fn: Operation, status: int = 200) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    async def handler(q: HttpRequest) -> HttpResponse:
        return HttpResponse.json(await translate_errors(fn(q)), status)
    return handler


async def _value(value: Any) -> Any:
    return value


async def _then(action: Awaitable[Any], answer: Any) -> Any:
    await action
    return answer


def _ns(q: HttpRequest) -> str:
    return f"{q.params['tenant']}/{q.params['namespace']}"


def _reset_access(q: HttpRequest) -> Access:
    try:
        topic = body_object(q).get("topic") if q.body else None
    except HttpError:  # the handler answers the bad body
        topic = None
    return reset_group(q.params["group"], topic if isinstance(topic, str) else "")


def api_routes(ctx: AdminContext, auth: AdminAuth) -> list[AdminRoute]:
    ns = ctx.namespaces

    async def health(_: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"status": "ok"})

    async def ready(_: HttpRequest) -> HttpResponse:
        is_ready = ctx.is_ready()
        return HttpResponse.json({"ready": is_ready}, 200 if is_ready else 503)

    async def metrics(q: HttpRequest) -> HttpResponse:
        body, content_type = render_metrics(await api.metrics_snapshot(ctx),
                                            q.headers.get("accept", ""))
        return HttpResponse(200, body, content_type)

    async def topics(q: HttpRequest) -> Any:
        rows = api.list_topics(ctx, q.arg("namespace"),
                               q.arg("include_internal", "false") == "true")
        names = set(auth.visible(q.identity, q.client, [r["topic"] for r in rows],
                                 describe_topic))
        return [r for r in rows if r["topic"] in names]

    async def group_list(q: HttpRequest) -> Any:
        rows = groups.list_groups(coordinator_of(ctx))
        classic = {r["group"] for r in rows}
        rows += [r for r in await groups.share_group_rows(ctx.share_groups)
                 if r["group"] not in classic]
        names = set(auth.visible(q.identity, q.client, [r["group"] for r in rows],
                                 describe_group))
        return [r for r in rows if r["group"] in names]

    async def group_detail(q: HttpRequest) -> Any:
        name = q.params["group"]
        if ctx.share_groups is not None and not coordinator_of(ctx).describe(name):
            shared = await groups.describe_share_group(ctx.share_groups, ctx.topics, name)
            if shared is not None:
                return shared
        return await groups.describe_group(coordinator_of(ctx), ctx.topics, name)

    async def delete_namespace(q: HttpRequest) -> Any:
        await ns.delete_namespace(_ns(q), [t["topic"] for t in api.list_topics(ctx, _ns(q))])
        return {"deleted": _ns(q)}

    async def describe_namespace(q: HttpRequest) -> Any:
        return {"namespace": _ns(q), "policies": ns.policies(_ns(q)).to_json(),
                "topics": [t["topic"] for t in api.list_topics(ctx, _ns(q))]}

    async def set_policies(q: HttpRequest) -> Any:
        policies = await ns.set_policies(_ns(q), body_object(q))
        await ctx.topics.reapply_configs()
        return policies.to_json()

    def tokens() -> Any:
        if ctx.tokens is None:
            raise HttpError(503, "admin tokens are not kept by this process")
        return ctx.tokens

    async def create_token(q: HttpRequest) -> Any:
        body = body_object(q)
        ttl = body.get("ttl_s", 0)
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            raise HttpError(400, "ttl_s must be a whole number of seconds")
        try:
            token, info = await tokens().create(str(body.get("principal", "")), ttl_s=ttl,
                                                description=str(body.get("description", "")))
        except TokenError as exc:
            raise HttpError(400, str(exc)) from exc
        return {"token": token, **info.to_json()}

    async def revoke_token(q: HttpRequest) -> Any:
        try:
            gone = await tokens().revoke(q.params["token_id"])
        except TokenError as exc:
            raise HttpError(400, str(exc)) from exc
        if not gone:
            raise HttpError(404, "no such token")
        return {"revoked": q.params["token_id"]}

    async def read_ticket(q: HttpRequest) -> Any:
        if ctx.read_tickets is None:
            raise HttpError(503, "read tickets are not issued by this process")
        return await ctx.read_tickets.issue(q)

    def topic_param(rule: Callable[[str], Access]) -> Callable[[HttpRequest], Access]:
        return lambda q: rule(q.params["topic"])

    def group_param(rule: Callable[[str], Access]) -> Callable[[HttpRequest], Access]:
        return lambda q: rule(q.params["group"])

    table: list[tuple[str, str, Operation, int, Callable[[HttpRequest], Access]]] = [
        ("GET", "/tenants", lambda q: _value(ns.tenants()), 200, fixed(CLUSTER_DESCRIBE)),
        ("PUT", "/tenants/{tenant}", lambda q: _then(
            ns.create_tenant(q.params["tenant"], body_object(q).get("allowed_principals")),
            {"tenant": q.params["tenant"]}), 201, fixed(CLUSTER_ALTER)),
        ("DELETE", "/tenants/{tenant}", lambda q: _then(
            ns.delete_tenant(q.params["tenant"]), {"deleted": q.params["tenant"]}), 200,
         fixed(CLUSTER_ALTER)),
        ("GET", "/namespaces", lambda q: _value(ns.namespaces(q.arg("tenant"))), 200,
         fixed(CLUSTER_DESCRIBE)),
        ("PUT", "/namespaces/{tenant}/{namespace}", lambda q: _then(
            ns.create_namespace(_ns(q), body_object(q).get("policies")),
            {"namespace": _ns(q)}), 201, fixed(CLUSTER_ALTER)),
        ("GET", "/namespaces/{tenant}/{namespace}", describe_namespace, 200,
         fixed(CLUSTER_DESCRIBE)),
        ("DELETE", "/namespaces/{tenant}/{namespace}", delete_namespace, 200,
         fixed(CLUSTER_ALTER)),
        ("GET", "/namespaces/{tenant}/{namespace}/policies",
         lambda q: _value(ns.policies(_ns(q)).to_json()), 200, fixed(CLUSTER_DESCRIBE)),
        ("POST", "/namespaces/{tenant}/{namespace}/policies", set_policies, 200,
         fixed(CLUSTER_ALTER)),
        ("GET", "/topics", topics, 200, fixed(ANY_PRINCIPAL)),
        ("GET", "/topics/{topic}", lambda q: api.describe_topic(ctx, q.params["topic"]), 200,
         topic_param(describe_topic)),
        ("PUT", "/topics/{topic}", lambda q: api.create_topic(ctx, q.params["topic"],
                                                              body_object(q)), 201,
         topic_param(create_topic)),
        ("DELETE", "/topics/{topic}", lambda q: api.delete_topic_checked(ctx, q.params["topic"]),
         200, topic_param(delete_topic)),
        ("POST", "/topics/{topic}/compact", lambda q: api.compact_topic(ctx, q.params["topic"]),
         200, topic_param(alter_topic)),
        ("GET", "/topics/{topic}/compaction", lambda q: _value(ctx.topics.compaction.status(
            q.params["topic"])), 200, topic_param(describe_topic)),
        ("POST", "/topics/{topic}/offload", lambda q: api.offload_topic(ctx, q.params["topic"]),
         200, topic_param(alter_topic)),
        ("GET", "/topics/{topic}/offload", lambda q: _value(ctx.topics.offload.status(
            q.params["topic"])), 200, topic_param(describe_topic)),
        ("GET", "/groups", group_list, 200, fixed(ANY_PRINCIPAL)),
        ("GET", "/groups/{group}", group_detail, 200, group_param(describe_group)),
        ("POST", "/groups/{group}/reset-offsets", lambda q: groups.reset_offsets(
            coordinator_of(ctx), ctx.topics, q.params["group"], body_object(q)), 200,
         _reset_access),
        ("GET", "/bookies", lambda q: api.bookie_rows(ctx), 200, fixed(CLUSTER_DESCRIBE)),
        ("GET", "/bookies/capacity", lambda q: api.bookie_capacity_json(ctx), 200,
         fixed(CLUSTER_DESCRIBE)),
        ("POST", "/bookies/gc", lambda q: api.garbage_collect(ctx), 200, fixed(CLUSTER_ALTER)),
        ("GET", "/brokers", lambda q: api.broker_rows(ctx), 200, fixed(CLUSTER_DESCRIBE)),
        ("POST", "/retention/run", lambda q: api.run_retention(ctx), 200, fixed(CLUSTER_ALTER)),
        ("GET", "/tokens", lambda q: _value_async_list(tokens()), 200, fixed(CLUSTER_ALTER)),
        ("POST", "/tokens", create_token, 201, fixed(CLUSTER_ALTER)),
        ("DELETE", "/tokens/{token_id}", revoke_token, 200, fixed(CLUSTER_ALTER)),
        ("POST", "/read-tickets", read_ticket, 201, ticket_access),
    ]
    routes = [AdminRoute(method, V1 + path, _json(fn, status), access)
              for method, path, fn, status, access in table]
    routes += replication_routes(ctx)
    routes += [
        AdminRoute("GET", "/health", health, fixed(PUBLIC)),
        AdminRoute("GET", "/ready", ready, fixed(PUBLIC)),
        AdminRoute("GET", "/metrics", metrics,
                   fixed(PUBLIC if auth.metrics_public else CLUSTER_DESCRIBE)),
    ]
    return routes


async def _value_async_list(store: Any) -> Any:
    return [t.to_json() for t in await store.list()]


def build_admin_app(ctx: AdminContext, auth: AdminAuth) -> Starlette:
    """The whole admin surface: JSON API, probes, /metrics, console and its assets."""
    pages = Pages(ctx.broker_id, login_required=auth.required)
    console = ConsolePages(ctx, auth, pages)
    actions = ConsoleActions(ctx, pages)
    return build_app([*api_routes(ctx, auth), *console.routes(), *actions.routes()], auth,
                     error_page=pages.error)


async def serve_admin_api(ctx: AdminContext, listener: str, auth: AdminAuth, *,
                          ssl_context: Any = None,
                          task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the admin surface on `listener` ("host:port"; "unix:PATH" = a unix socket, as a
    `standalone --workers` worker serves it to its supervisor; "" = not at all) until cancelled.

    A port already in use is logged and the process runs on without the admin API: the broker's
    data path matters more than its dashboard.
    """
    from gateway.config.settings import parse_host_port

    if not listener:
        task_status.started(None)
        return
    ctx.broker_metrics.topic_names_by_id = lambda topic_id: next(
        (n for n, i in ctx.topics.topics().items() if i.topic_id == topic_id), None)
    try:
        if listener.startswith("unix:"):  # a worker's private listener (started(None))
            await serve_unix(build_admin_app(ctx, auth), listener[5:], task_status=task_status)
            return
        host, port = parse_host_port(listener)
        await serve(build_admin_app(ctx, auth), host, port, ssl_context=ssl_context,
                    task_status=task_status)
    except OSError as exc:
        log.error("admin HTTP API not started: cannot listen on %s: %s", listener, exc)
        task_status.started(None)
