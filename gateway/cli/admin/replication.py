"""`ledgerwire admin clusters` and `ledgerwire admin replication`: geo-replication's CLI.

    admin clusters     list | add NAME --kafka HOST:PORT [--remote-admin-url URL]
                       [--security-protocol P] [--sasl-mechanism M] [--sasl-user U]
                       [--sasl-password-env VAR] [--ssl-cafile F] | remove NAME
    admin replication  status | pause TOPIC | resume TOPIC

(`--admin-url` already names the admin API this command talks to, so the remote cluster's
admin URL is `--remote-admin-url`.)  The SASL password is read from an environment variable
(default $LEDGERWIRE_REMOTE_SASL_PASSWORD), never from a flag that `ps` shows.

This module must never reach the metadata store other than through the admin API.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from gateway.cli.admin.http_client import path
from gateway.cli.admin.tables import table

RESOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "clusters": ("geo-replication: the other clusters: list, add, remove",
                 ("list", "add", "remove")),
    "replication": ("geo-replication: status per remote, topic and partition; pause or resume "
                    "a topic", ("status", "pause", "resume")),
}


def add_arguments(resource: str, p: argparse.ArgumentParser) -> None:
    if resource != "clusters":
        return
    p.add_argument("--kafka", metavar="HOST:PORT[,HOST:PORT...]",
                   help="brokers of the remote cluster (the first that answers is used)")
    p.add_argument("--remote-admin-url", default="", help="the remote cluster's admin API")
    p.add_argument("--security-protocol", default="PLAINTEXT",
                   choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    p.add_argument("--sasl-mechanism", default="")
    p.add_argument("--sasl-user", default="")
    p.add_argument("--sasl-password-env", default="LEDGERWIRE_REMOTE_SASL_PASSWORD",
                   metavar="VAR", help="environment variable holding the SASL password")
    p.add_argument("--ssl-cafile", default="")


def request(args: argparse.Namespace,
            need_name: Callable[[argparse.Namespace], str]) -> tuple[str, str, Any,
                                                                     Callable[[Any], str]]:
    if args.admin_resource == "replication" and args.action in ("pause", "resume"):
        topic = need_name(args)
        return "POST", path("replication", topic, args.action), None, lambda d: (
            f"replication of {d['topic']} {'paused' if d['paused'] else 'resumed'}")
    if args.admin_resource == "replication":
        return "GET", path("replication"), None, lambda d: f"cluster {d['cluster']}\n" + table(
            d["partitions"], ["remote", "topic", "partition", "state", "position",
                              "backlog_messages", "lag_seconds", "sent_total", "last_error"])
    if args.action == "list":
        return "GET", path("clusters"), None, lambda d: table(
            d, ["name", "kafka", "admin_url", "security_protocol", "sasl_user"])
    name = need_name(args)
    if args.action == "remove":
        return "DELETE", path("clusters", name), None, lambda d: f"removed {d['removed']}"
    if not args.kafka:
        raise SystemExit("ledgerwire admin clusters add: --kafka HOST:PORT is required")
    body = {"kafka": args.kafka, "admin_url": args.remote_admin_url,
            "security_protocol": args.security_protocol,
            "sasl_mechanism": args.sasl_mechanism, "sasl_user": args.sasl_user,
            "sasl_password": os.environ.get(args.sasl_password_env, ""),
            "ssl_cafile": args.ssl_cafile}
    return "PUT", path("clusters", name), body, lambda d: f"added cluster {d['name']}"
