"""The admin API of geo-replication: registered clusters and replication status.

    GET    /admin/v1/clusters            the other clusters (never their passwords)
    PUT    /admin/v1/clusters/{name}     register one: {"kafka", "admin_url", "security_protocol",
                                         "sasl_mechanism", "sasl_user", "sasl_password",
                                         "ssl_cafile"}
    DELETE /admin/v1/clusters/{name}
    GET    /admin/v1/replication         this cluster's name and, per remote, topic and
                                         partition: state, position, backlog, lag, sent, error
    GET    /admin/v1/replication/{topic}/inbound  per partition and other cluster, this
                                          side's checkpoint of the link: inbound pairs, scan
                                          position, unnoted-below and outbound offset syncs
                                          (what other clusters translate offsets with)
    POST   /admin/v1/replication/{topic}/pause    stop replicating the topic (durable)
    POST   /admin/v1/replication/{topic}/resume   start again from where it stopped

Reading needs DESCRIBE on the cluster, changing needs ALTER.  This module must never reach the
replicators except through gateway/replication/service.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.admin.api import AdminContext, body_object
from gateway.admin.app import AdminRoute, fixed
from gateway.admin.auth import CLUSTER_ALTER, CLUSTER_DESCRIBE
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse
from gateway.replication.clusters import ClusterError
from gateway.replication.service import ReplicationService

V1 = "/admin/v1"


def _service(ctx: AdminContext) -> ReplicationService:
    if ctx.replication is None:
        raise HttpError(503, "geo-replication does not run in this process")
    return ctx.replication  # type: ignore[no-any-return]


def _handler(fn: Callable[[HttpRequest], Awaitable[Any]],
             status: int = 200) -> Callable[[HttpRequest], Awaitable[HttpResponse]]:
    async def handler(q: HttpRequest) -> HttpResponse:
        try:
            return HttpResponse.json(await fn(q), status)
        except ClusterError as exc:
            raise HttpError(exc.status, str(exc)) from exc
    return handler


def replication_routes(ctx: AdminContext) -> list[AdminRoute]:
    async def list_clusters(_: HttpRequest) -> Any:
        return [c.public_json() for c in await _service(ctx).clusters.list()]

    async def add_cluster(q: HttpRequest) -> Any:
        cluster = await _service(ctx).clusters.add(q.params["name"], body_object(q))
        return cluster.public_json()

    async def remove_cluster(q: HttpRequest) -> Any:
        await _service(ctx).clusters.remove(q.params["name"])
        return {"removed": q.params["name"]}

    async def status(_: HttpRequest) -> Any:
        return _service(ctx).status()

    async def inbound(q: HttpRequest) -> Any:
        return await _service(ctx).inbound(q.params["topic"])

    async def pause(q: HttpRequest) -> Any:
        return await _service(ctx).set_paused(q.params["topic"], True)

    async def resume(q: HttpRequest) -> Any:
        return await _service(ctx).set_paused(q.params["topic"], False)

    return [
        AdminRoute("GET", f"{V1}/clusters", _handler(list_clusters), fixed(CLUSTER_DESCRIBE)),
        AdminRoute("PUT", f"{V1}/clusters/{{name}}", _handler(add_cluster, 201),
                   fixed(CLUSTER_ALTER)),
        AdminRoute("DELETE", f"{V1}/clusters/{{name}}", _handler(remove_cluster),
                   fixed(CLUSTER_ALTER)),
        AdminRoute("GET", f"{V1}/replication", _handler(status), fixed(CLUSTER_DESCRIBE)),
        AdminRoute("GET", f"{V1}/replication/{{topic}}/inbound", _handler(inbound),
                   fixed(CLUSTER_DESCRIBE)),
        AdminRoute("POST", f"{V1}/replication/{{topic}}/pause", _handler(pause),
                   fixed(CLUSTER_ALTER)),
        AdminRoute("POST", f"{V1}/replication/{{topic}}/resume", _handler(resume),
                   fixed(CLUSTER_ALTER)),
    ]
