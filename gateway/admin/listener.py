"""What the admin listener needs from the configuration and the broker's security: its
authenticator (gateway/admin/auth.py), its TLS context, and the line that says at start how it
is protected.

The rules (docs/admin.md, "Admin HTTP API"): authentication is on unless the Kafka listener is
PLAINTEXT and no users are configured ([admin] authentication = "auto"); it then checks HTTP
Basic against the SASL/SCRAM credentials and Bearer admin tokens, and authorises with the same
ACL authorizer (and tenant check) as the Kafka listener.  With authentication off the default
listener is 127.0.0.1:8080, and the settings refuse (ConfigError) an unauthenticated
non-loopback listener on a secured broker.  TLS uses the Kafka listener's certificate.

This module must never weaken those rules: it only assembles what the settings decided.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from gateway.admin.auth import AdminAuth
from gateway.admin.http_server import admin_ssl_context
from gateway.config.settings import Config, is_loopback, parse_host_port
from gateway.security.admin_tokens import TokenStore
from ledger_backend.metadata.store import MetadataStore

log = logging.getLogger("ledgerwire.admin")


def admin_auth(config: Config, store: MetadataStore, credentials: Any,
               authorizer: Any) -> AdminAuth:
    """The admin surface's authenticator for this process."""
    return AdminAuth(required=config.admin_authentication(), credentials=credentials,
                     tokens=TokenStore(store), authorizer=authorizer,
                     metrics_public=not config.admin.metrics_authentication,
                     failed_delay_s=config.kafka.failed_authentication_delay_ms / 1000)


def admin_tls(config: Config) -> ssl.SSLContext | None:
    """HTTPS with the Kafka listener's certificate and key, when [admin] tls says so."""
    if not config.admin_tls():
        return None
    return admin_ssl_context(config.kafka.ssl_certfile, config.kafka.ssl_keyfile)


def announce(config: Config, auth: AdminAuth, port: int | None) -> None:
    """One line at start saying where the admin surface listens and who may use it."""
    listener = config.admin_listener()
    if not listener or port is None:
        return
    host, _ = parse_host_port(listener)
    scheme = "https" if config.admin_tls() else "http"
    if auth.required:
        log.info("admin API and console on %s://%s:%d: HTTP Basic (SASL/SCRAM users) or "
                 "Bearer tokens, ACLs enforced as on the Kafka listener%s", scheme, host, port,
                 "" if auth.metrics_public is False else "; /metrics open")
    elif is_loopback(host):
        log.info("admin API and console on %s://%s:%d WITHOUT authentication (loopback only: "
                 "the Kafka listener is PLAINTEXT and no users are configured; set [admin] "
                 "authentication = \"on\" and listener to open it to other hosts)",
                 scheme, host, port)
    else:
        log.warning("admin API and console on %s://%s:%d WITHOUT authentication and reachable "
                    "from other hosts: anyone who reaches it can change the cluster; set "
                    "[admin] authentication = \"on\"", scheme, host, port)
