"""Opening a kazoo session for the ZooKeeper metadata store: identity, default ACL and TLS.

A digest identity is sent as ZooKeeper digest auth (kazoo re-sends it after each reconnect) and
owns new nodes as digest:user:hash; with sasl=DIGEST-MD5 kazoo runs the SASL exchange (through
pure-sasl) on every connection and new nodes belong to sasl:user. TLS connections come from our
own handler: the server verified against the URL's CA file and host name, TLS 1.2 at least, the
client certificate presented, and a socket whose handshake failed closed at once.

This module must never run on the Trio thread (everything here blocks) and never log a password.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from .zk_url import DigestIdentity, ZkTransport

__all__ = ["connect", "session_args", "stop_client"]


def stop_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


class _TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler with our TLS connections: kazoo 2.11 leaves a socket whose
    handshake failed unclosed (an fd held until garbage collection, and a ResourceWarning),
    and cannot set a minimum TLS version. The SSLContext is built once per store."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(self, address: tuple[str, int], hostname: str | None = None,
                          timeout: float | None = None, **_kazoo_tls_args: Any) -> socket.socket:
        raw = socket.create_connection(address, timeout)
        try:
            # the handshake runs here; a failed one closes the TLS socket (CPython's _create)
            conn = self._context.wrap_socket(raw, server_hostname=hostname)
        except BaseException:
            raw.close()
            raise
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


def _tls_context(transport: ZkTransport) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = transport.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if transport.cafile:
        context.load_verify_locations(transport.cafile)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if transport.certfile and transport.keyfile:
        context.load_cert_chain(transport.certfile, transport.keyfile)
    return context


def session_args(identity: DigestIdentity | None, transport: ZkTransport) -> dict[str, Any]:
    """kazoo's session authentication, default ACL and TLS settings."""
    args: dict[str, Any] = {}
    if transport.tls:
        args.update(use_ssl=True, tls_context=_tls_context(transport))
    if identity is None:
        return args
    if transport.sasl_mechanism is not None:
        args["sasl_options"] = {"mechanism": transport.sasl_mechanism,
                                "username": identity.user, "password": identity.password}
        args["default_acl"] = [ACL(Permissions.ALL, Id("sasl", identity.user))]
    else:
        args["auth_data"] = [("digest", f"{identity.user}:{identity.password}")]
        args["default_acl"] = [make_digest_acl(identity.user, identity.password, all=True)]
    return args


def _start_client(hosts: str, session_timeout_s: float, connect_timeout_s: float,
                  session_args: dict[str, Any]) -> KazooClient:  # fmt: skip
    # kazoo keeps and may mutate sasl_options: each client gets its own copy
    args = {key: dict(value) if isinstance(value, dict) else value
            for key, value in session_args.items() if key != "tls_context"}
    context: ssl.SSLContext | None = session_args.get("tls_context")
    if context is not None:
        args["handler"] = _TlsHandler(context)
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 2.0},
        **args,
    )
    try:
        client.start(timeout=connect_timeout_s)
    except BaseException:
        stop_client(client)
        raise
    return client


def connect(hosts: str, chroot: str, session_timeout_s: float, connect_timeout_s: float,
            session_args: dict[str, Any]) -> KazooClient:  # fmt: skip
    """A started kazoo client on hosts + chroot (the chroot node made first if missing)."""
    if chroot:
        # the chroot must exist before a chrooted client can use it
        setup = _start_client(hosts, session_timeout_s, connect_timeout_s, session_args)
        try:
            setup.ensure_path(chroot)
        finally:
            stop_client(setup)
    return _start_client(hosts + chroot, session_timeout_s, connect_timeout_s, session_args)
