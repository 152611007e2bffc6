"""`ledgerwire admin <resource> <action>`: the operator CLI over the admin HTTP API.

One module per concern: http_client.py (talks to a running process's admin port), tables.py
(human-readable output), resources.py (tenants, namespaces, topics, groups, bookies, brokers,
policies).  gateway/cli/commands/admin.py adds these subcommands next to its own drain/undrain.

The CLI never opens the metadata store itself: a running standalone holds the embedded store
locked, so every operation goes through the process's HTTP admin API (`--admin-url`, default
http://127.0.0.1:8080, or $LEDGERWIRE_ADMIN_URL).
"""

from __future__ import annotations

from gateway.cli.admin.resources import RESOURCES, add_resource_parsers, run_resource

__all__ = ["RESOURCES", "add_resource_parsers", "run_resource"]
