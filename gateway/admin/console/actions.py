"""The console's actions: create and delete a topic, reset a group's offsets, run retention or
the bookies' GC -- each asked for twice: the first POST answers a confirmation page naming
exactly what will happen, and only its "yes" POST (with the session's CSRF token, checked by
gateway/admin/app.py) acts.

The Access of each action is the API's (gateway/admin/auth.py); the work is done by the same
functions the JSON API calls (gateway/admin/api.py, gateway/admin/groups.py).  After acting,
the browser is sent on (303) to the page that shows the result.

This module must never act without the confirming POST, or on input it has not validated.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from gateway.admin import api, groups
from gateway.admin.app import AdminRoute, fixed
from gateway.admin.auth import CLUSTER_ALTER, create_topic, delete_topic, reset_group
from gateway.admin.console.pages import redirect
from gateway.admin.console.rendering import Pages, choice, group_name, int_arg, topic_name
from gateway.admin.http_server import HttpError, HttpRequest, HttpResponse

_MAINTENANCE = ("gc", "retention")


def _form_topic(q: HttpRequest) -> str:
    """The form's topic for an access check (validated later, by the action itself)."""
    try:
        return q.form().get("topic", "")
    except HttpError:
        return ""


class ConsoleActions:
    def __init__(self, ctx: Any, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages

    def routes(self) -> list[AdminRoute]:
        def action(path: str, handler: Any, access: Any) -> AdminRoute:
            return AdminRoute("POST", path, handler, access, console=True)

        return [
            action("/console/topics", self.create, lambda q: create_topic(_form_topic(q))),
            action("/console/topics/{topic}/delete", self.delete,
                   lambda q: delete_topic(q.params["topic"])),
            action("/console/groups/{group}/reset", self.reset,
                   lambda q: reset_group(q.params["group"], _form_topic(q))),
            action("/console/maintenance/{action}", self.maintenance, fixed(CLUSTER_ALTER)),
        ]

    def _confirm(self, q: HttpRequest, *, heading: str, question: str, button: str,
                 fields: list[tuple[str, str]], cancel: str, danger: bool = False,
                 details: list[str] | None = None) -> HttpResponse:
        return self.pages.render(q, "confirm.html", title=heading, heading=heading,
                                 question=question, button=button, action=q.path, fields=fields,
                                 cancel=cancel, danger=danger, details=details or [])

    async def create(self, q: HttpRequest) -> HttpResponse:
        form = q.form()
        name = topic_name(form.get("topic"))
        partitions = int_arg(form.get("partitions"), "partitions", low=1, high=10000, default=1)
        namespace = (form.get("namespace") or "").strip()
        if namespace and (len(namespace) > 200 or namespace.count("/") != 1):
            raise HttpError(400, "namespace: tenant/namespace")
        if form.get("confirm") != "yes":
            return self._confirm(
                q, heading="Create a topic", button="Create topic", cancel="/console/topics",
                question=f"Create topic {name} with {partitions} partition(s)"
                         f"{' in ' + namespace if namespace else ''}?",
                fields=[("topic", name), ("partitions", str(partitions)),
                        ("namespace", namespace)])
        body: dict[str, Any] = {"partitions": partitions}
        if namespace:
            body["namespace"] = namespace
        await api.create_topic_checked(self.ctx, name, body)
        return redirect(f"/console/topics/{quote(name, safe='')}?done=created")

    async def delete(self, q: HttpRequest) -> HttpResponse:
        name = topic_name(q.params["topic"])
        if q.form().get("confirm") != "yes":
            return self._confirm(
                q, heading="Delete a topic", button="Delete topic", danger=True,
                cancel=f"/console/topics/{quote(name, safe='')}",
                question=f"Delete topic {name} and all its messages? This cannot be undone.",
                fields=[])
        await api.delete_topic_checked(self.ctx, name)
        return redirect("/console/topics?done=deleted")

    async def reset(self, q: HttpRequest) -> HttpResponse:
        group = group_name(q.params["group"])
        form = q.form()
        topic = topic_name(form.get("topic"))
        target = choice(form.get("to"), groups.RESET_TARGETS, "to", "")
        value = None
        if target in ("offset", "timestamp"):
            value = int_arg(form.get("value"), "value", low=0, high=2**63 - 1)
            if value is None:
                raise HttpError(400, f"to={target} needs a value")
        if form.get("confirm") != "yes":
            what = target if value is None else f"{target} {value}"
            return self._confirm(
                q, heading="Reset offsets", button="Reset offsets", danger=True,
                cancel=f"/console/groups/{quote(group, safe='')}",
                question=f"Move group {group}'s committed offsets on every partition of {topic} "
                         f"to {what}?",
                fields=[("topic", topic), ("to", target), ("value", "" if value is None
                                                           else str(value))])
        if self.ctx.coordinator is None:
            raise HttpError(503, "no group coordinator in this process")
        request: dict[str, Any] = {"topic": topic, "to": target}
        if value is not None:
            request["value"] = value
        await api.translate_errors(groups.reset_offsets(
            self.ctx.coordinator, self.ctx.topics, group, request))
        return redirect(f"/console/groups/{quote(group, safe='')}?done=reset")

    async def maintenance(self, q: HttpRequest) -> HttpResponse:
        action = choice(q.params["action"], _MAINTENANCE, "action", "")
        if q.form().get("confirm") != "yes":
            question = ("Run retention and TTL on every partition this broker owns now?"
                        if action == "retention" else
                        "Run retention, then garbage collection and a major compaction on "
                        "every local bookie now? This reads and rewrites entry logs.")
            return self._confirm(q, heading="Maintenance", question=question, button="Run now",
                                 cancel="/", fields=[])
        if action == "retention":
            await api.run_retention(self.ctx)
        else:
            await api.garbage_collect(self.ctx)
        return redirect(f"/?done={action}")
