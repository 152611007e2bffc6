"""ZooKeeper URLs: hosts, chroot, timeouts and the cluster's digest identity.

    zk://h1:2181,h2:2181/chroot?session_timeout_s=10&op_timeout_s=10
    zk://user:password@h1:2181/chroot             digest identity in the URL
    zk://h1:2181/chroot?auth_file=/etc/lw/zk.auth   ... or in a file: "user:password", 0600

With an identity, the store authenticates its session (ZooKeeper digest scheme) and creates
every znode with an ACL that gives that identity all permissions and nobody else any: other
clients can neither read (credentials, ACLs) nor change anything. A file keeps the password
out of process listings; a file readable by others is used with a WARNING.

This module must never import kazoo, and never put a password into a message (`redact`).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from ledger_backend.secret_files import read_secret_file

from .store import validate_path

__all__ = ["DigestIdentity", "parse_zk_url", "redact", "zk_identity"]

_TIMEOUT_OPTIONS = ("session_timeout_s", "op_timeout_s")
_AUTH_FILE_OPTION = "auth_file"


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
        if key == _AUTH_FILE_OPTION:
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


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.partition("@")
    if not sep or not at or "/" in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{hosts}"
