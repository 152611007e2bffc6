"""RocketMQ plain ACL (Apache RocketMQ 4.x `plain_acl.yml` semantics), sans-IO.

A client signs each request (Apache AclClientRPCHook, C++ ClientRPCHook, ali-ons): it adds the
extFields `AccessKey` (and optionally `SecurityToken`; the C++ client and ali-ons add
`OnsChannel`), concatenates the *values* of all extFields except `Signature`, sorted by key (Java
TreeMap order), appends the body bytes, and puts base64(HmacSHA1(secret key, content)) in the
extField `Signature`.  The broker recomputes it; like Apache's server it leaves `Signature` and
`_UNIQUE_KEY_QUERY` out of the content.

Validation order (Apache PlainPermissionManager.validate):
1. a peer address in `global_white_remote_addresses` passes (no signature, no permission check);
2. no `AccessKey` -> refused; an unknown access key -> refused;
3. a peer matching the account's `white_remote_address` passes (no signature check);
4. the signature must match (compared in constant time);
5. admin request codes (17, 25, 215, 200, 207) need `admin = true`;
6. every resource the request names must be allowed: topics by `topic_perms` else
   `default_topic_perm`, groups (also the retry topic `%RETRY%group`) by `group_perms` else
   `default_group_perm`.  Permissions: DENY, PUB, SUB, PUB|SUB (anything else is DENY).
ledgerwire adds a tenant rule: an account with `tenant` may only name topics whose namespace
belongs to that tenant; an account without one is held to the tenant's `allowed_principals`
as principal "User:<access key>" (the Kafka side's rule).

Which resources a request names (Apache PlainAccessResource.parse, with two gaps closed:
SEND_BATCH_MESSAGE and QUERY_CONSUMER_OFFSET are checked too): send -> topic PUB (a retry topic
-> its group SUB); pull -> topic SUB + group SUB; consumer offset query/update -> topic SUB +
group SUB; send-back -> group SUB + original topic PUB; query message -> topic SUB; heartbeat ->
each consumer group SUB and each subscribed topic SUB; unregister / consumer list -> group SUB.

Refusals are `AclRefusedError` = NO_PERMISSION (16), what Apache 5 answers for authentication and
authorisation failures; Apache 4.x's plain ACL let its AclException become SYSTEM_ERROR (1) with
the exception text, which clients treat the same way (the request fails).  The message texts
follow Apache's.

Per connection only the peer's white-list results are cached (a WeakKeyDictionary keyed by the
connection object); each account's HMAC key schedule is prepared once.

This module must never do I/O, and never grant a request whose signature it has not checked
(apart from the white-listed addresses the configuration names).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import re
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocols.rocketmq.codec import RemotingCommand
from protocols.rocketmq.errors import NoPermissionError
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import RETRY_PREFIX

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_NOT_SIGNED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})
MIN_KEY_LENGTH = 7  # Apache: access and secret keys must be longer than 6 characters

PERM_DENY = 1
PERM_ANY = 1 << 1
PERM_PUB = 1 << 2
PERM_SUB = 1 << 3
_PERM_NAMES = {"DENY": PERM_DENY, "PUB": PERM_PUB, "SUB": PERM_SUB,
               "PUB|SUB": PERM_PUB | PERM_SUB, "SUB|PUB": PERM_PUB | PERM_SUB}

UPDATE_BROKER_CONFIG = 25
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
DELETE_SUBSCRIPTIONGROUP = 207
ADMIN_CODES = frozenset({int(RequestCode.UPDATE_AND_CREATE_TOPIC), UPDATE_BROKER_CONFIG,
                         int(RequestCode.DELETE_TOPIC_IN_BROKER),
                         UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP})


class AclConfigError(ValueError):
    """The account table cannot be used (a bad permission, a short key, a bad address)."""


class AclRefusedError(NoPermissionError):
    """A request the ACL refuses (NO_PERMISSION)."""


def parse_perm(text: object) -> int:
    """Apache Permission.parsePermFromString: DENY, PUB, SUB, PUB|SUB; anything else DENY."""
    return _PERM_NAMES.get(text.strip(), PERM_DENY) if isinstance(text, str) else PERM_DENY


def perm_allows(needed: int, owned: int) -> bool:
    """Apache Permission.checkPermission."""
    if owned & PERM_DENY:
        return False
    if needed & PERM_ANY:
        return bool(owned & (PERM_PUB | PERM_SUB))
    return bool(needed & owned)


# --- signing ----------------------------------------------------------------------------------


def _java_key_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")  # Java String.compareTo: UTF-16 code units


def signed_values(ext_fields: Mapping[str, str]) -> bytes:
    """The extField values (not Signature) concatenated in Java TreeMap key order."""
    keys = [k for k in ext_fields if k not in _NOT_SIGNED]
    if "".join(keys).isascii():
        keys.sort()  # for ASCII, code point order is UTF-16 order
    else:
        keys.sort(key=_java_key_order)
    return "".join([ext_fields[k] for k in keys]).encode("utf-8", "surrogatepass")


def signing_content(ext_fields: Mapping[str, str], body: bytes) -> bytes:
    """What is signed: the extField values (not Signature) in key order, then the body."""
    return signed_values(ext_fields) + body


def sign(content: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(secret_key, content)), as Apache AclSigner.calSignature."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_request(ext_fields: dict[str, str], body: bytes, access_key: str, secret_key: str,
                 security_token: str | None = None) -> dict[str, str]:
    """The client side (AclClientRPCHook): add AccessKey (SecurityToken), then Signature."""
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields[SIGNATURE] = sign(signing_content(ext_fields, body), secret_key)
    return ext_fields


# --- remote addresses -------------------------------------------------------------------------

_RANGE = re.compile(r"(\d{1,3})-(\d{1,3})")


class AddressPattern:
    """Apache RemoteAddressStrategy forms: "*" / "*.*.*.*" (any), "" (none), an exact IPv4 or
    IPv6 address, "192.168.0.{1,2}" (a list in the last segment), and per-segment "*" or "a-b"
    ranges ("192.168.*.*", "192.168.1-10.*")."""

    def __init__(self, text: str) -> None:
        self.text = text = (text or "").strip()
        self._any = text in ("*", "*.*.*.*")
        self._exact: str | None = None
        self._choices: tuple[str, frozenset[str]] | None = None
        self._segments: list[tuple[int, int]] | None = None
        if self._any or not text:
            return
        if "{" in text:
            match = re.fullmatch(r"((?:\d{1,3}\.){3})\{([\d,\s]+)\}", text)
            if not match:
                raise AclConfigError(f"bad remote address pattern {text!r}")
            lasts = frozenset(str(int(x)) for x in match.group(2).split(",") if x.strip())
            self._choices = (match.group(1), lasts)
            return
        if "*" in text or "-" in text:
            parts = text.split(".")
            if len(parts) != 4:
                raise AclConfigError(f"bad remote address pattern {text!r}")
            segments = []
            for part in parts:
                ranged = _RANGE.fullmatch(part)
                if part == "*":
                    segments.append((0, 255))
                elif ranged:
                    segments.append((int(ranged.group(1)), int(ranged.group(2))))
                elif part.isdigit():
                    segments.append((int(part), int(part)))
                else:
                    raise AclConfigError(f"bad remote address pattern {text!r}")
            if any(not 0 <= lo <= hi <= 255 for lo, hi in segments):
                raise AclConfigError(f"bad remote address range {text!r}")
            self._segments = segments
            return
        try:
            self._exact = str(ipaddress.ip_address(text))
        except ValueError as exc:
            raise AclConfigError(f"bad remote address {text!r}") from exc

    def matches(self, host: str) -> bool:
        if self._any:
            return True
        if self._exact is not None:
            try:
                return str(ipaddress.ip_address(host)) == self._exact
            except ValueError:
                return False
        if self._choices is not None:
            prefix, lasts = self._choices
            return host.startswith(prefix) and host[len(prefix):] in lasts
        if self._segments is not None:
            parts = host.split(".")
            if len(parts) != 4 or not all(p.isdigit() for p in parts):
                return False
            return all(lo <= int(p) <= hi for p, (lo, hi) in zip(parts, self._segments,
                                                                 strict=True))
        return False


# --- accounts ---------------------------------------------------------------------------------


def _retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def _parse_resource_perms(entries: object, kind: str) -> dict[str, int]:
    """["topicA=DENY", "topicB=PUB|SUB"] (Apache form) or {"topicA": "DENY"}."""
    if entries is None:
        return {}
    if isinstance(entries, Mapping):
        pairs = [(str(k), v) for k, v in entries.items()]
    elif isinstance(entries, list | tuple):
        pairs = []
        for entry in entries:
            name, sep, perm = str(entry).partition("=")
            if not sep or not name.strip() or "=" in perm:
                raise AclConfigError(f"parse resource permission failed for {kind}:{entry}")
            pairs.append((name, perm))
    else:
        raise AclConfigError(f"{kind}_perms must be a list of \"name=PERM\" strings")
    return {name.strip(): parse_perm(perm) for name, perm in pairs}


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower().replace("-", "_")


@dataclass
class AclAccount:
    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern = field(default_factory=lambda: AddressPattern(""))
    admin: bool = False
    default_topic_perm: int = PERM_DENY
    default_group_perm: int = PERM_DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)  # keyed by %RETRY%group
    tenant: str | None = None
    _mac: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._mac = hmac.new(self.secret_key.encode("utf-8"), digestmod=hashlib.sha1)

    def signature_of(self, ext_fields: Mapping[str, str], body: bytes) -> bytes:
        """base64 HmacSHA1 of the request's signing content (the key schedule is reused)."""
        mac = self._mac.copy()
        mac.update(signed_values(ext_fields))
        mac.update(body)
        return base64.b64encode(mac.digest())

    def perm_for(self, resource: str) -> tuple[int, bool]:
        is_group = resource.startswith(RETRY_PREFIX)
        owned = (self.group_perms if is_group else self.topic_perms).get(resource)
        if owned is None:
            owned = self.default_group_perm if is_group else self.default_topic_perm
        return owned, is_group

    @classmethod
    def from_config(cls, doc: Mapping[str, object]) -> AclAccount:
        """One account table; keys in snake_case (or Apache's camelCase)."""
        d = {_snake(str(k)): v for k, v in doc.items()}
        known = {"access_key", "secret_key", "white_remote_address", "admin",
                 "default_topic_perm", "default_group_perm", "topic_perms", "group_perms",
                 "tenant"}
        unknown = set(d) - known
        if unknown:
            raise AclConfigError(f"unknown account settings {sorted(unknown)}")
        access_key, secret_key = d.get("access_key"), d.get("secret_key")
        if not isinstance(access_key, str) or not isinstance(secret_key, str) or \
                len(access_key) < MIN_KEY_LENGTH or len(secret_key) < MIN_KEY_LENGTH:
            raise AclConfigError("access_key and secret_key must be strings longer than 6 "
                                 f"characters (account {access_key!r})")
        admin = d.get("admin", False)
        if not isinstance(admin, bool):
            raise AclConfigError(f"admin must be true or false (account {access_key!r})")
        tenant = d.get("tenant")
        groups = _parse_resource_perms(d.get("group_perms"), "group")
        return cls(access_key=access_key, secret_key=secret_key,
                   white_remote_address=AddressPattern(str(d.get("white_remote_address") or "")),
                   admin=admin, default_topic_perm=parse_perm(d.get("default_topic_perm")),
                   default_group_perm=parse_perm(d.get("default_group_perm")),
                   topic_perms=_parse_resource_perms(d.get("topic_perms"), "topic"),
                   group_perms={_retry_topic(g): p for g, p in groups.items()},
                   tenant=str(tenant) if tenant else None)


# --- which resources a request names ----------------------------------------------------------


def _send_resources(topic: str | None) -> dict[str, int]:
    if topic is None:
        return {}
    if topic.startswith(RETRY_PREFIX):  # a consumer re-sending to its retry topic: group SUB
        return {topic: PERM_SUB}
    return {topic: PERM_PUB}


def required_resources(request: RemotingCommand) -> dict[str, int]:
    """Resource -> permission the request needs (groups as their %RETRY% topic)."""
    ext, code = request.ext_fields, request.code
    needed: dict[str, int] = {}

    def add(resource: str | None, perm: int) -> None:
        if resource is not None:
            needed[resource] = needed.get(resource, 0) | perm

    def add_group(group: str | None) -> None:
        if group:
            add(_retry_topic(group), PERM_SUB)

    if code == RequestCode.SEND_MESSAGE:
        return _send_resources(ext.get("topic"))
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return _send_resources(ext.get("b", ext.get("topic")))
    if code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add_group(ext.get("group"))
        add(ext.get("originTopic"), PERM_PUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET,
                  RequestCode.QUERY_CONSUMER_OFFSET):
        add(ext.get("topic"), PERM_SUB)
        add_group(ext.get("consumerGroup"))
    elif code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:  # moves a group's offsets durably
        add(ext.get("topic"), PERM_SUB)
        add_group(ext.get("group"))
    elif code == RequestCode.QUERY_MESSAGE:
        add(ext.get("topic"), PERM_SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add_group(ext.get("consumerGroup"))
    elif code == RequestCode.HEART_BEAT:
        for group, topics in _heartbeat_consumers(request.body):
            add_group(group)
            for topic in topics:
                add(topic, PERM_SUB)
    return needed


def _heartbeat_consumers(body: bytes) -> Iterable[tuple[str, list[str]]]:
    try:
        doc = json.loads(body) if body else {}
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AclRefusedError(f"AclException: heartbeat body is not JSON: {exc}") from exc
    consumers = doc.get("consumerDataSet") if isinstance(doc, dict) else None
    for consumer in consumers if isinstance(consumers, list) else []:
        if not isinstance(consumer, dict):
            continue
        subs = consumer.get("subscriptionDataSet")
        topics = [str(s["topic"]) for s in (subs if isinstance(subs, list) else [])
                  if isinstance(s, dict) and s.get("topic") is not None]
        yield str(consumer.get("groupName") or ""), topics


# --- the validator ----------------------------------------------------------------------------


class NamespacesLike(Protocol):
    def namespace_of(self, topic: str) -> str: ...
    def principal_allowed(self, topic: str, principal: str) -> bool: ...


class _PeerState:
    __slots__ = ("host", "globally_white", "account_white")

    def __init__(self, host: str, globally_white: bool) -> None:
        self.host = host
        self.globally_white = globally_white
        self.account_white: dict[str, bool] = {}


def _storage_name(topic: str) -> str:
    return topic.replace("%", ".")  # topic_names.to_storage without its validation


class PlainAclValidator:
    """Checks requests against the account table (see module doc)."""

    def __init__(self, accounts: Iterable[AclAccount],
                 global_white_remote_addresses: Iterable[str] = (),
                 namespaces: NamespacesLike | None = None) -> None:
        self.accounts: dict[str, AclAccount] = {}
        for account in accounts:
            if account.access_key in self.accounts:
                raise AclConfigError(f"access key {account.access_key!r} is listed twice")
            self.accounts[account.access_key] = account
        self.global_white = [AddressPattern(a) for a in global_white_remote_addresses]
        self.namespaces = namespaces
        self._peers: weakref.WeakKeyDictionary[Any, _PeerState] = weakref.WeakKeyDictionary()

    @classmethod
    def from_config(cls, accounts: Iterable[Mapping[str, object]],
                    global_white_remote_addresses: Iterable[str] = (),
                    namespaces: NamespacesLike | None = None) -> PlainAclValidator:
        return cls([AclAccount.from_config(a) for a in accounts],
                   list(global_white_remote_addresses), namespaces)

    def _peer(self, conn: Any) -> _PeerState:
        state = self._peers.get(conn)
        if state is None:
            host = str(conn.peer[0])
            state = _PeerState(host, any(p.matches(host) for p in self.global_white))
            self._peers[conn] = state
        return state

    def check(self, conn: Any, request: RemotingCommand, broker: Any = None
              ) -> AclAccount | None:
        """Raise AclRefusedError unless `request` on `conn` (which has .peer) is allowed.
        Returns the account that signed it (None for a globally white-listed peer)."""
        if self.globally_white(conn):
            return None
        account = self.authenticate(conn, request)
        if not self._peer(conn).account_white.get(account.access_key):
            self._check_perms(account, request)
        return account

    def globally_white(self, conn: Any) -> bool:
        return self._peer(conn).globally_white

    def authenticate(self, conn: Any, request: RemotingCommand) -> AclAccount:
        """Steps 2-4 of the module doc: the account whose key signed `request` (or whose
        white-listed address sent it); raises AclRefusedError otherwise."""
        peer = self._peer(conn)
        ext = request.ext_fields
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            raise AclRefusedError("AclException: No accessKey is configured")
        account = self.accounts.get(access_key)
        if account is None:
            raise AclRefusedError(f"AclException: No acl config for {access_key}")
        white = peer.account_white.get(access_key)
        if white is None:
            white = peer.account_white[access_key] = \
                account.white_remote_address.matches(peer.host)
        if white:
            return account
        given = ext.get(SIGNATURE, "").encode("utf-8", "surrogatepass")
        if not hmac.compare_digest(account.signature_of(ext, request.body), given):
            raise AclRefusedError(
                f"AclException: Check signature failed for accessKey={access_key}")
        return account

    def _check_perms(self, account: AclAccount, request: RemotingCommand) -> None:
        if request.code in ADMIN_CODES and not account.admin:
            raise AclRefusedError(
                f"AclException: Need admin permission for request code={request.code}, but "
                f"accessKey={account.access_key} is not")
        for resource, needed in required_resources(request).items():
            owned, is_group = account.perm_for(resource)
            if not perm_allows(needed, owned):
                what = (f"group={resource[len(RETRY_PREFIX):]}" if is_group
                        else f"topic={resource}")
                raise AclRefusedError(f"AclException: No default permission for {what}")
            if not is_group:
                self._check_tenant(account, resource)

    def _check_tenant(self, account: AclAccount, topic: str) -> None:
        if self.namespaces is None or topic.startswith("%"):
            return  # system topics (%RETRY%, %DLQ%) belong to no tenant
        name = _storage_name(topic)
        tenant = self.namespaces.namespace_of(name).split("/", 1)[0]
        if account.tenant is not None:
            allowed = tenant == account.tenant
        else:
            allowed = self.namespaces.principal_allowed(name, f"User:{account.access_key}")
        if not allowed:
            raise AclRefusedError(
                f"AclException: topic={topic} belongs to tenant {tenant}, not to "
                f"accessKey={account.access_key}")
