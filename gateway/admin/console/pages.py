"""The web console's read-only pages and its login: overview, topics, a topic's partitions and
ledgers, the message browser, consumer groups with their lag, tenants and namespaces.

Each page is an `AdminRoute` with the same Access rule as the API call it mirrors
(gateway/admin/auth.py): a page lists only what its principal may DESCRIBE, the message browser
needs READ on the topic.  Pages get their data from the same functions the JSON API uses
(gateway/admin/api.py, gateway/admin/groups.py); the small JSON feeds under /console/data/
drive the live charts (console.js).

This module must never open a partition another broker owns (that would fence it), change
anything (gateway/admin/console/actions.py does, after a confirmation), or show a traceback.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import trio

from gateway.admin import api, groups
from gateway.admin.app import AdminRoute, fixed
from gateway.admin.auth import (
    CLUSTER_DESCRIBE,
    PUBLIC,
    SESSION_COOKIE,
    Access,
    AdminAuth,
    describe_group,
    describe_topic,
    log_refusal,
    read_topic,
)
from gateway.admin.console import messages
from gateway.admin.console.rendering import (
    Pages,
    choice,
    group_name,
    int_arg,
    safe_next,
    time_arg,
    topic_name,
    uptime,
)
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse
from gateway.admin.metrics import traffic_totals
from ledger_backend.autorecovery.under_replication import list_underreplicated
from ledger_backend.metadata.store import MetadataError

ANY_PRINCIPAL = Access(((),), what="a login")  # lists filter what each principal may see
_STATIC = {name: ((resources.files("gateway.admin.console") / "static" / name).read_bytes(), kind)
           for name, kind in (("console.css", "text/css; charset=utf-8"),
                              ("console.js", "text/javascript; charset=utf-8"))}
_LOGIN_FAILED = "Wrong user name or password."


def redirect(location: str, headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse(303, b"", "text/plain", {"location": location, **(headers or {})})


class ConsolePages:
    def __init__(self, ctx: Any, auth: AdminAuth, pages: Pages) -> None:
        self.ctx = ctx
        self.auth = auth
        self.pages = pages

    def routes(self) -> list[AdminRoute]:
        def console(method: str, path: str, handler: Any, access: Any) -> AdminRoute:
            return AdminRoute(method, path, handler, access, console=True)

        return [
            console("GET", "/login", self.login_form, fixed(PUBLIC)),
            console("POST", "/login", self.login, fixed(PUBLIC)),
            console("POST", "/logout", self.logout, fixed(ANY_PRINCIPAL)),
            console("GET", "/", self.overview, fixed(CLUSTER_DESCRIBE)),
            console("GET", "/console/topics", self.topics, fixed(ANY_PRINCIPAL)),
            console("GET", "/console/topics/{topic}", self.topic,
                    lambda q: describe_topic(q.params["topic"])),
            console("GET", "/console/topics/{topic}/messages", self.messages,
                    lambda q: read_topic(q.params["topic"])),
            console("GET", "/console/groups", self.groups, fixed(ANY_PRINCIPAL)),
            console("GET", "/console/groups/{group}", self.group,
                    lambda q: describe_group(q.params["group"])),
            console("GET", "/console/namespaces", self.namespaces, fixed(CLUSTER_DESCRIBE)),
            console("GET", "/console/data/traffic", self.traffic, fixed(CLUSTER_DESCRIBE)),
            console("GET", "/console/data/groups/{group}", self.group_data,
                    lambda q: describe_group(q.params["group"])),
            console("GET", "/console/static/{name}", self.static, fixed(PUBLIC)),
        ]

    async def static(self, q: HttpRequest) -> HttpResponse:
        """The console's CSS and JavaScript (read once from the package; nothing else)."""
        found = _STATIC.get(q.params["name"])
        if found is None:
            raise HttpError(404, "no such asset")
        body, content_type = found
        return HttpResponse(200, body, content_type, {"cache-control": "max-age=300"})

    # --- login ------------------------------------------------------------------------------

    async def login_form(self, q: HttpRequest) -> HttpResponse:
        if not self.auth.required:
            return redirect("/")
        return self.pages.render(q, "login.html", title="Log in", next=safe_next(q.arg("next")),
                                 error=None)

    async def login(self, q: HttpRequest) -> HttpResponse:
        form = q.form()
        user, password = form.get("user", ""), form.get("password", "")
        target = safe_next(form.get("next"))
        if not self.auth.required:
            return redirect(target)
        if not user or not await self.auth.check_password(user, password):
            await trio.sleep(self.auth.failed_delay_s)
            log_refusal(401, "console login failed", "POST", "/login", q.client,
                        f"User:{user[:100]}" if user else None)
            return self.pages.render(q, "login.html", status=401, title="Log in", next=target,
                                     error=_LOGIN_FAILED)
        session = self.auth.sessions.create(f"User:{user}")
        secure = "; Secure" if q.scheme == "https" else ""
        return redirect(target, {"set-cookie": f"{SESSION_COOKIE}={session.session_id}; Path=/; "
                                               f"HttpOnly; SameSite=Strict{secure}"})

    async def logout(self, q: HttpRequest) -> HttpResponse:
        session = getattr(q.identity, "session", None)
        if session is not None:
            self.auth.sessions.drop(session.session_id)
        return redirect("/login" if self.auth.required else "/", {
            "set-cookie": f"{SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"})

    # --- pages --------------------------------------------------------------------------------

    async def overview(self, q: HttpRequest) -> HttpResponse:
        ctx = self.ctx
        under: int | str
        try:
            under = len(await list_underreplicated(ctx.store))
        except MetadataError:
            under = "?"
        return self.pages.render(
            q, "overview.html", page="overview", title="Overview",
            uptime=uptime(ctx.started_at), brokers=await api.broker_rows(ctx),
            bookies=await api.bookie_rows(ctx), under_replicated=under,
            topic_count=len(ctx.topics.topics()), notice=_done(q))

    def _visible_topics(self, q: HttpRequest) -> list[dict[str, Any]]:
        rows = api.list_topics(self.ctx, None)
        names = set(self.auth.visible(q.identity, q.client, [r["topic"] for r in rows],
                                      describe_topic))
        return [r for r in rows if r["topic"] in names]

    async def topics(self, q: HttpRequest) -> HttpResponse:
        search = (q.arg("q") or "").strip()[:249]
        rows = [r for r in self._visible_topics(q) if search.lower() in r["topic"].lower()]
        return self.pages.render(q, "topics.html", page="topics", title="Topics", topics=rows,
                                 search=search, notice=_done(q))

    async def topic(self, q: HttpRequest) -> HttpResponse:
        name = topic_name(q.params["topic"])
        described = await api.describe_topic(self.ctx, name)
        return self.pages.render(q, "topic.html", page="topic", title=name, topic=described,
                                 notice=_done(q))

    async def messages(self, q: HttpRequest) -> HttpResponse:
        name = topic_name(q.params["topic"])
        info = self.ctx.topics.topics().get(name) or await self.ctx.topics.refresh_topic(name)
        if info is None:
            raise HttpError(404, f"topic {name!r} does not exist")
        partition = int_arg(q.arg("partition"), "partition", low=0,
                            high=max(0, info.partitions - 1), default=0)
        key_text = q.arg("key")
        if key_text is not None and len(key_text) > 1000:
            raise HttpError(400, "key: at most 1000 characters")
        form: dict[str, Any] = {"partition": partition,
                "offset": int_arg(q.arg("offset"), "offset", low=0, high=2**63 - 1),
                "time": (q.arg("time") or "").strip()[:40],
                "key": key_text,
                "format": choice(q.arg("format"), messages.FORMATS, "format", "text"),
                "limit": int_arg(q.arg("limit"), "limit", low=1, high=messages.MAX_LIMIT,
                                 default=20)}
        timestamp = time_arg(form["time"])
        context: dict[str, Any] = {"page": "topic-messages", "title": f"{name} messages",
                                   "topic": name, "partitions": info.partitions, "form": form,
                                   "formats": messages.FORMATS, "max_limit": messages.MAX_LIMIT,
                                   "result": None, "owner_note": None}
        assert partition is not None
        owner = (self.ctx.owner_of(name, partition) if self.ctx.owner_of is not None
                 else self.ctx.broker_id)
        if owner != self.ctx.broker_id:  # reading here would open (and fence) its partition
            context["owner_note"] = (f"Partition {partition} is owned by broker {owner}: browse "
                                     "it on that broker's console.")
        else:
            plog = await self.ctx.topics.partition(name, partition)
            context["result"] = await messages.browse(
                plog, offset=form["offset"], timestamp_ms=timestamp,
                key=key_text.encode() if key_text else None, limit=form["limit"],
                fmt=form["format"])
        return self.pages.render(q, "messages.html", **context)

    async def groups(self, q: HttpRequest) -> HttpResponse:
        coordinator = self.ctx.coordinator
        rows = groups.list_groups(coordinator) if coordinator is not None else []
        names = set(self.auth.visible(q.identity, q.client, [r["group"] for r in rows],
                                      describe_group))
        return self.pages.render(q, "groups.html", page="groups", title="Consumer groups",
                                 groups=[r for r in rows if r["group"] in names],
                                 coordinator=coordinator is not None)

    async def _group(self, q: HttpRequest) -> dict[str, Any]:
        if self.ctx.coordinator is None:
            raise HttpError(503, "no group coordinator in this process")
        group = group_name(q.params["group"])
        return await groups.describe_group(self.ctx.coordinator, self.ctx.topics, group)

    async def group(self, q: HttpRequest) -> HttpResponse:
        described = await self._group(q)
        max_lag = max([p["lag"] or 0 for p in described["partitions"]] + [0])
        return self.pages.render(q, "group.html", page="group", title=described["group"],
                                 group=described, max_lag=max_lag,
                                 reset_targets=groups.RESET_TARGETS, notice=_done(q))

    async def group_data(self, q: HttpRequest) -> HttpResponse:
        return HttpResponse.json(await self._group(q))

    async def namespaces(self, q: HttpRequest) -> HttpResponse:
        ns = self.ctx.namespaces
        tenants = [{"tenant": t, **doc} for t, doc in sorted(ns.tenants().items())]
        rows = []
        for full in ns.namespaces(None):
            rows.append({"namespace": full, "policies": ns.policies(full).to_json(),
                         "topics": len(api.list_topics(self.ctx, full))})
        return self.pages.render(q, "namespaces.html", page="namespaces", title="Namespaces",
                                 tenants=tenants, namespaces=rows)

    async def traffic(self, q: HttpRequest) -> HttpResponse:
        return HttpResponse.json(traffic_totals(self.ctx.broker_metrics))


_DONE = {"created": "Topic created.", "deleted": "Topic deleted.", "reset": "Offsets reset.",
         "gc": "Garbage collection and compaction ran.", "retention": "Retention ran."}


def _done(q: HttpRequest) -> str | None:
    return _DONE.get(q.arg("done") or "")
