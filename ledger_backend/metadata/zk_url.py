"""ZooKeeper URLs: hosts, chroot, timeouts, the cluster's identity and the transport.

    zk://h1:2181,h2:2181/chroot?session_timeout_s=10&op_timeout_s=10
    zk://user:password@h1:2181/chroot             digest identity in the URL
    zk://h1:2181/chroot?auth_file=/etc/lw/zk.auth   ... or in a file: "user:password", 0600
    ...&sasl=DIGEST-MD5                           the identity logs in with SASL instead
    ...&tls=true&tls_cafile=ca.pem&tls_certfile=c.pem&tls_keyfile=k.pem    TLS (secureClientPort)

With an identity, the store authenticates its session (ZooKeeper digest scheme, or SASL
DIGEST-MD5 against the server's JAAS users with sasl=DIGEST-MD5) and creates every znode with
an ACL that gives that identity (digest:user:hash or sasl:user) all permissions and nobody else
any: other clients can neither read (credentials, ACLs) nor change anything. A file keeps the
password out of process listings; a file readable by others is used with a WARNING.

TLS verifies the server against tls_cafile (or the system CAs) and its host name unless
tls_check_hostname=false; tls_certfile/tls_keyfile present a client certificate (ZooKeeper's
secure port asks for one by default, ssl.clientAuth=need).

This module must never import kazoo, and never put a password into a message (`redact`).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from ledger_backend.secret_files import read_secret_file

from .store import validate_path

__all__ = ["DigestIdentity", "ZkTransport", "parse_zk_url", "redact", "zk_identity",
           "zk_transport"]

_TIMEOUT_OPTIONS = ("session_timeout_s", "op_timeout_s")
_AUTH_FILE_OPTION = "auth_file"
_SASL_OPTION = "sasl"
_SASL_MECHANISMS = ("DIGEST-MD5",)  # GSSAPI would need Kerberos: not offered
_TLS_FLAGS = ("tls", "tls_check_hostname")
_TLS_FILES = ("tls_cafile", "tls_certfile", "tls_keyfile")
_TRANSPORT_OPTIONS = (_SASL_OPTION, *_TLS_FLAGS, *_TLS_FILES)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class ZkTransport:
    """How the session reaches and logs in to ZooKeeper, besides the identity itself."""

    sasl_mechanism: str | None = None
    tls: bool = False
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True


@dataclass(frozen=True)
class DigestIdentity:
    """A ZooKeeper digest-scheme identity (never shown with its password)."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, text: str, where: str) -> DigestIdentity:
        user, sep, password = text.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"{where}: expected user:password")
        return cls(user, password)


def _split(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "zk" or not parts.netloc.rpartition("@")[2]:
        raise ValueError(f"not a ZooKeeper URL: {redact(url)!r}")
    return parts


def parse_zk_url(url: str) -> tuple[str, str, dict[str, float]]:
    """"zk://h1:2181,h2:2181/chroot?session_timeout_s=6" -> (hosts, chroot, timeout options).

    The identity (user:password@, auth_file=) is accepted here and read by `zk_identity`.
    """
    parts = _split(url)
    chroot = parts.path.rstrip("/")
    if chroot:
        validate_path(chroot)
    options: dict[str, float] = {}
    for key, value in urllib.parse.parse_qsl(parts.query):
        if key == _AUTH_FILE_OPTION or key in _TRANSPORT_OPTIONS:
            continue
        if key not in _TIMEOUT_OPTIONS:
            raise ValueError(f"unknown ZooKeeper URL option {key!r} in {redact(url)!r}")
        options[key] = float(value)
    return parts.netloc.rpartition("@")[2], chroot, options


def zk_identity(url: str) -> DigestIdentity | None:
    """The digest identity the URL names (in the URL or its auth_file), or None."""
    parts = _split(url)
    userinfo = parts.netloc.rpartition("@")[0]
    files = [v for k, v in urllib.parse.parse_qsl(parts.query) if k == _AUTH_FILE_OPTION]
    if userinfo and files:
        raise ValueError("a ZooKeeper URL names user:password@ or auth_file, not both")
    if len(files) > 1:
        raise ValueError("a ZooKeeper URL names auth_file once")
    if files:
        text = read_secret_file(files[0], "ZooKeeper credentials")
        return DigestIdentity.parse(text, f"ZooKeeper credentials file {files[0]}")
    if userinfo:
        return DigestIdentity.parse(urllib.parse.unquote(userinfo), "ZooKeeper URL user info")
    return None


def _flag(key: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"ZooKeeper URL option {key}: expected true or false, not {value!r}")


def zk_transport(url: str) -> ZkTransport:
    """SASL and TLS options of the URL (ValueError when they contradict each other)."""
    options: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(_split(url).query):
        if key in _TRANSPORT_OPTIONS:
            if key in options:
                raise ValueError(f"a ZooKeeper URL names {key} once")
            options[key] = value
    mechanism = options.get(_SASL_OPTION)
    if mechanism is not None:
        mechanism = mechanism.upper()
        if mechanism not in _SASL_MECHANISMS:
            raise ValueError(f"ZooKeeper SASL mechanism {mechanism!r} not offered "
                             f"(only {', '.join(_SASL_MECHANISMS)})")
        if zk_identity(url) is None:
            raise ValueError("sasl= needs an identity: zk://user:password@... or auth_file=")
    tls = _flag("tls", options.get("tls", "false"))
    if not tls and any(key in options for key in (*_TLS_FILES, "tls_check_hostname")):
        raise ValueError("tls_* options need tls=true in the ZooKeeper URL")
    if ("tls_certfile" in options) != ("tls_keyfile" in options):
        raise ValueError("tls_certfile and tls_keyfile go together in the ZooKeeper URL")
    return ZkTransport(
        sasl_mechanism=mechanism,
        tls=tls,
        cafile=options.get("tls_cafile"),
        certfile=options.get("tls_certfile"),
        keyfile=options.get("tls_keyfile"),
        check_hostname=_flag("tls_check_hostname", options.get("tls_check_hostname", "true")),
    )


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.partition("@")
    if not sep or not at or "/" in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hosts}"
