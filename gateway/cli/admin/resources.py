"""The resource subcommands of `ledgerwire admin`: argument parsing and printing.

    admin tenants    list | create NAME [--allowed-principal User:x]... | delete NAME
    admin namespaces list [--tenant T] | create T/NS [--policy k=v]... | describe T/NS | delete T/NS
    admin topics     list [--namespace T/NS] | create NAME [--partitions N] [--config k=v]...
                     [--namespace T/NS] | describe NAME | delete NAME
                     | compact NAME (a compaction pass now) | compaction NAME (progress, last)
                     | offload NAME (closed ledgers to tiered storage now) | offload-status NAME
    admin groups     list | describe GROUP | reset-offsets GROUP --topic T
                     (--to-earliest | --to-latest | --to-timestamp MS | --to-offset N)
                     [--partitions 0,1]
    admin bookies    list | gc
    admin brokers    list
    admin policies   get T/NS | set T/NS k=v...
    admin tokens     list | create User:NAME [--ttl S] [--description D] | revoke ID
    admin clusters   list | add NAME --kafka HOST:PORT ... | remove NAME  (cli/admin/replication.py)
    admin replication status

Every one takes --admin-url, --json (print the API's JSON instead of a table) and the
credentials: --user/--password or --token (or $LEDGERWIRE_ADMIN_USER, _PASSWORD, _TOKEN).

This module must never reach the metadata store or a broker other than through the admin API.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from gateway.cli.admin import replication
from gateway.cli.admin.http_client import (
    AdminCredentials,
    AdminRequestError,
    admin_url,
    call,
    path,
)
from gateway.cli.admin.tables import key_values, table

RESOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tenants": ("tenants: list, create, delete", ("list", "create", "delete")),
    "namespaces": ("namespaces: list, create, describe, delete",
                   ("list", "create", "describe", "delete")),
    "topics": ("topics: list, create, describe, delete, compact, compaction, offload, "
               "offload-status",
               ("list", "create", "describe", "delete", "compact", "compaction", "offload",
                "offload-status")),
    "groups": ("consumer groups: list, describe (lag), reset-offsets",
               ("list", "describe", "reset-offsets")),
    "bookies": ("bookies: list (state, disk use), gc", ("list", "gc")),
    "brokers": ("brokers: list", ("list",)),
    "policies": ("namespace policies: get, set", ("get", "set")),
    "tokens": ("admin API tokens: list, create PRINCIPAL, revoke ID",
               ("list", "create", "revoke")),
    **replication.RESOURCES,
}


def parse_value(text: str) -> Any:
    """A policy or config value: true/false, null, an integer, else the text itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "default"):
        return None
    try:
        return int(text)
    except ValueError:
        return text


def parse_pairs(pairs: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"ledgerwire admin: expected key=value, got {pair!r}")
        out[key.strip().replace("-", "_") if "." not in key else key.strip()] = parse_value(value)
    return out


def add_resource_parsers(sub: Any) -> None:
    for resource, (help_text, actions) in RESOURCES.items():
        p = sub.add_parser(resource, help=help_text)
        p.add_argument("action", choices=actions)
        p.add_argument("name", nargs="?", help="tenant, tenant/namespace, topic or group")
        p.add_argument("pairs", nargs="*", help="policies set: key=value ...")
        p.add_argument("--admin-url", help="admin API of a running process "
                                           "(default $LEDGERWIRE_ADMIN_URL or "
                                           "http://127.0.0.1:8080)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        add_credential_arguments(p)
        p.set_defaults(admin_resource=resource)
        replication.add_arguments(resource, p)
        if resource == "tenants":
            p.add_argument("--allowed-principal", action="append", metavar="User:NAME")
        if resource in ("namespaces",):
            p.add_argument("--tenant")
            p.add_argument("--policy", action="append", metavar="KEY=VALUE")
        if resource == "topics":
            p.add_argument("--namespace", metavar="TENANT/NS")
            p.add_argument("--partitions", type=int, default=-1)
            p.add_argument("--config", action="append", metavar="KEY=VALUE")
            p.add_argument("--include-internal", action="store_true",
                           help="list: also RocketMQ's system topics (schedule, "
                                "transaction, retry)")
        if resource == "tokens":
            p.add_argument("--ttl", type=int, default=0, help="seconds (0: never expires)")
            p.add_argument("--description", default="")
        if resource == "groups":
            p.add_argument("--topic")
            p.add_argument("--partitions", help="comma-separated (default: all)")
            target = p.add_mutually_exclusive_group()
            target.add_argument("--to-earliest", action="store_true")
            target.add_argument("--to-latest", action="store_true")
            target.add_argument("--to-timestamp", type=int, metavar="MS")
            target.add_argument("--to-offset", type=int, metavar="N")


def add_credential_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", help="admin user (a SASL/SCRAM user; default "
                                  "$LEDGERWIRE_ADMIN_USER)")
    p.add_argument("--password", help="its password (default $LEDGERWIRE_ADMIN_PASSWORD; "
                                      "prefer the variable: flags show in ps)")
    p.add_argument("--token", help="an admin token instead (default $LEDGERWIRE_ADMIN_TOKEN)")
    p.add_argument("--cafile", help="CA certificate for an https admin URL "
                                    "(default $LEDGERWIRE_ADMIN_CAFILE)")


def credentials_of(args: argparse.Namespace) -> AdminCredentials:
    return AdminCredentials(args.user, args.password, args.token, args.cafile)


def _need_name(args: argparse.Namespace) -> str:
    if not args.name:
        raise SystemExit(f"ledgerwire admin {args.admin_resource} {args.action}: name missing")
    return str(args.name)


def _ns_segments(full: str) -> tuple[str, str]:
    tenant, sep, namespace = full.partition("/")
    if not sep:
        raise SystemExit(f"ledgerwire admin: namespace {full!r} must be tenant/namespace")
    return tenant, namespace


def _request(args: argparse.Namespace) -> tuple[str, str, Any, Callable[[Any], str]]:
    """(method, path, body, human renderer) for one invocation."""
    r, a = args.admin_resource, args.action
    if r in replication.RESOURCES:
        return replication.request(args, _need_name)
    def done(doc: Any) -> str:
        return key_values(doc) if isinstance(doc, dict) else str(doc)
    if r == "tenants":
        if a == "list":
            return "GET", path("tenants"), None, lambda d: table(
                [{"tenant": t, **v} for t, v in sorted(d.items())],
                ["tenant", "allowed_principals"])
        body = {"allowed_principals": args.allowed_principal or []} if a == "create" else None
        return ("PUT" if a == "create" else "DELETE"), path("tenants", _need_name(args)), \
            body, done
    if r == "namespaces":
        if a == "list":
            return "GET", path("namespaces", tenant=args.tenant), None, lambda d: table(
                [{"namespace": n} for n in d], ["namespace"])
        tenant, namespace = _ns_segments(_need_name(args))
        target = path("namespaces", tenant, namespace)
        if a == "create":
            return "PUT", target, {"policies": parse_pairs(args.policy)}, done
        if a == "describe":
            return "GET", target, None, lambda d: key_values(
                {"namespace": d["namespace"], "topics": d["topics"], **d["policies"]})
        return "DELETE", target, None, done
    if r == "topics":
        if a == "list":
            internal = "true" if args.include_internal else None
            return "GET", path("topics", namespace=args.namespace,
                               include_internal=internal), None, lambda d: table(
                d, ["topic", "partitions", "namespace", "internal"])
        name = _need_name(args)
        if a == "create":
            return "PUT", path("topics", name), {
                "partitions": args.partitions, "configs": parse_pairs(args.config),
                "namespace": args.namespace}, done
        if a == "describe":
            return "GET", path("topics", name), None, _topic_table
        if a == "compact":
            return "POST", path("topics", name, "compact"), {}, lambda d: table(
                d, ["partition", "reason", "bytes_before", "bytes_after", "records_before",
                    "records_after", "keys", "error", "skipped"])
        if a == "compaction":
            return "GET", path("topics", name, "compaction"), None, lambda d: table(
                [{"partition": x["partition"], "running": x["running"],
                  "phase": x["progress"]["phase"], "passes": x["passes"],
                  "last": (x["last"] or {}).get("reason"), "error": x["last_error"]}
                 for x in d], ["partition", "running", "phase", "passes", "last", "error"])
        offload_columns = ["partition", "ledgers", "ledgers_offloaded", "bytes_offloaded",
                           "ledgers_on_bookies", "bytes_on_bookies", "in_progress", "last_error"]
        if a == "offload":
            return "POST", path("topics", name, "offload"), {}, lambda d: table(
                d, [*offload_columns, "offloaded_now", "skipped"])
        if a == "offload-status":
            return "GET", path("topics", name, "offload"), None, lambda d: table(
                d, offload_columns)
        return "DELETE", path("topics", name), None, done
    if r == "groups":
        if a == "list":
            return "GET", path("groups"), None, lambda d: table(
                d, ["group", "state", "members", "protocol_type"])
        name = _need_name(args)
        if a == "describe":
            return "GET", path("groups", name), None, lambda d: (
                f"group {d['group']} ({d['state']}, {d['members']} members), "
                f"total lag {d['total_lag']}\n" + table(d["partitions"], [
                    "topic", "partition", "committed_offset", "log_end_offset", "lag"]))
        return "POST", path("groups", name, "reset-offsets"), _reset_body(args), lambda d: table(
            [{"topic": d["topic"], "partition": p, "new_offset": o}
             for p, o in d["offsets"].items()], ["topic", "partition", "new_offset"])
    if r == "bookies":
        if a == "gc":
            return "POST", path("bookies", "gc"), {}, lambda d: json.dumps(d, indent=1)
        return "GET", path("bookies"), None, lambda d: table(d, [
            "bookie", "address", "state", "ledgers", "data_bytes", "disk_used_bytes",
            "disk_total_bytes"])
    if r == "brokers":
        return "GET", path("brokers"), None, lambda d: table(
            d, ["broker_id", "kafka", "state", "partitions_open"])
    if r == "tokens":
        if a == "list":
            return "GET", path("tokens"), None, lambda d: table(
                d, ["id", "principal", "created_ms", "expires_ms", "description"])
        if a == "create":
            return "POST", path("tokens"), {"principal": _need_name(args), "ttl_s": args.ttl,
                                            "description": args.description}, \
                lambda d: f"{d['token']}\n(token {d['id']} for {d['principal']}: shown only now)"
        return "DELETE", path("tokens", _need_name(args)), None, done
    tenant, namespace = _ns_segments(_need_name(args))
    target = path("namespaces", tenant, namespace, "policies")
    if a == "get":
        return "GET", target, None, done
    update = parse_pairs(args.pairs)
    if not update:
        raise SystemExit("ledgerwire admin policies set: give key=value pairs")
    return "POST", target, update, done


def _reset_body(args: argparse.Namespace) -> dict[str, Any]:
    if not args.topic:
        raise SystemExit("ledgerwire admin groups reset-offsets: --topic is required")
    if args.to_earliest:
        to, value = "earliest", None
    elif args.to_latest:
        to, value = "latest", None
    elif args.to_timestamp is not None:
        to, value = "timestamp", args.to_timestamp
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    else:
        raise SystemExit("ledgerwire admin groups reset-offsets: give one --to-... option")
    body: dict[str, Any] = {"topic": args.topic, "to": to, "value": value}
    if args.partitions:
        body["partitions"] = [int(p) for p in args.partitions.split(",")]
    return body


def _topic_table(doc: dict[str, Any]) -> str:
    head = (f"topic {doc['topic']}  namespace {doc['namespace']}  "
            f"partitions {len(doc['partitions'])}  bytes {doc['bytes']}")
    rows = [{"partition": p["partition"], "owner": p["owner"],
             "log_start": p["log_start_offset"], "log_end": p["log_end_offset"],
             "ledgers": [x["ledger_id"] for x in p["ledgers"]], "bytes": p["bytes"],
             "e/qw/qa": "/".join(str(x) for x in (
                 p["ledgers"][-1]["ensemble_size"], p["ledgers"][-1]["write_quorum"],
                 p["ledgers"][-1]["ack_quorum"])) if p["ledgers"] else None}
            for p in doc["partitions"]]
    return head + "\n" + table(rows, ["partition", "owner", "log_start", "log_end", "ledgers",
                                      "bytes", "e/qw/qa"])


def run_resource(args: argparse.Namespace) -> int:
    method, target, body, render = _request(args)
    try:
        result = call(admin_url(args.admin_url), method, target, body,
                      credentials=credentials_of(args))
    except AdminRequestError as exc:
        print(f"ledgerwire admin: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    else:
        print(render(result))
    return 0
