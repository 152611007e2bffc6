"""The clusters this cluster knows for geo-replication, kept in the metadata store.

    /ledgerwire/clusters/<name>   {"format", "kafka", "admin_url", "security_protocol",
                                   "sasl_mechanism", "sasl_user", "sasl_password", "ssl_cafile"}

`ledgerwire admin clusters add|list|remove` reach it through the admin API.  A namespace whose
`replication_clusters` policy names a cluster replicates to the cluster registered under that
name; this cluster's own name (`[replication] cluster_name`) in that list is skipped.

This module must never change a node without a version check, nor show a password in a listing,
a log line or an exception.
"""

from __future__ import annotations

import json
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

from gateway.config.settings import parse_host_port
from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError

CLUSTERS_PATH = "/ledgerwire/clusters"
CLUSTER_FORMAT_VERSION = 1
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClusterError(ValueError):
    """A cluster registration that cannot be done (status: an HTTP-ish code)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RemoteCluster:
    """How to reach another cluster's Kafka listener (and its admin API)."""

    name: str
    kafka: str  # host:port of one or more of its brokers, comma-separated (bootstrap)
    admin_url: str = ""
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_user: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: str = ""

    @property
    def bootstrap(self) -> tuple[str, int]:
        return self.bootstraps[0]

    @property
    def bootstraps(self) -> list[tuple[str, int]]:
        """Each listed broker (a client tries the next when one does not answer)."""
        return [parse_host_port(a.strip()) for a in self.kafka.split(",")]

    def public_json(self) -> dict[str, Any]:
        """What a listing shows: everything but the password."""
        return {"name": self.name, "kafka": self.kafka, "admin_url": self.admin_url,
                "security_protocol": self.security_protocol,
                "sasl_mechanism": self.sasl_mechanism, "sasl_user": self.sasl_user,
                "ssl_cafile": self.ssl_cafile}

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    @classmethod
    def from_json(cls, name: str, doc: dict[str, Any]) -> RemoteCluster:
        """Parse and validate (a clear ClusterError for anything wrong)."""
        if not _LEGAL_NAME.fullmatch(name):
            raise ClusterError(f"cluster name {name!r}: 1-64 of [a-zA-Z0-9_-]")
        known = {"kafka", "admin_url", "security_protocol", "sasl_mechanism", "sasl_user",
                 "sasl_password", "ssl_cafile", "format", "name"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ClusterError(f"unknown cluster settings {unknown}")
        values = {k: doc.get(k) or "" for k in known - {"format", "name"}}
        if not all(isinstance(v, str) for v in values.values()):
            raise ClusterError("cluster settings must be strings")
        for address in values["kafka"].split(","):
            try:
                host, _ = parse_host_port(address.strip(), default_host="")
            except ValueError as exc:
                raise ClusterError(f"kafka must be host:port of a broker (or several, "
                                   f"comma-separated): {exc}") from None
            if not host:
                raise ClusterError("kafka must be host:port of a broker (the host is missing)")
        protocol = values["security_protocol"] or "PLAINTEXT"
        if protocol not in SECURITY_PROTOCOLS:
            raise ClusterError(f"security_protocol must be one of {list(SECURITY_PROTOCOLS)}")
        mechanism = values["sasl_mechanism"]
        if protocol.startswith("SASL_"):
            mechanism = mechanism or "SCRAM-SHA-512"
            if mechanism not in SASL_MECHANISMS or not values["sasl_user"]:
                raise ClusterError(f"{protocol} needs sasl_user and a sasl_mechanism of "
                                   f"{list(SASL_MECHANISMS)}")
        else:
            mechanism = ""
        return cls(name, values["kafka"], values["admin_url"], protocol, mechanism,
                   values["sasl_user"], values["sasl_password"], values["ssl_cafile"])

    def to_json(self) -> dict[str, Any]:
        return {**self.public_json(), "sasl_password": self.sasl_password,
                "format": CLUSTER_FORMAT_VERSION}


class ClusterRegistry:
    """Add, list and remove remote clusters (every call reads the store: a few nodes)."""

    def __init__(self, store: MetadataStore, local_name: str) -> None:
        self._store = store
        self.local_name = local_name

    async def add(self, name: str, doc: dict[str, Any]) -> RemoteCluster:
        cluster = RemoteCluster.from_json(name, doc)
        if name == self.local_name:
            raise ClusterError(f"{name!r} is this cluster's own name", 409)
        data = json.dumps(cluster.to_json(), sort_keys=True).encode()
        try:
            await self._store.create(f"{CLUSTERS_PATH}/{name}", data, make_parents=True)
        except NodeExistsError as exc:
            raise ClusterError(f"cluster {name!r} is already registered", 409) from exc
        return cluster

    async def remove(self, name: str) -> None:
        try:
            _, stat = await self._store.get(f"{CLUSTERS_PATH}/{name}")
            await self._store.delete(f"{CLUSTERS_PATH}/{name}", stat.version)
        except NoNodeError as exc:
            raise ClusterError(f"cluster {name!r} is not registered", 404) from exc

    async def get(self, name: str) -> RemoteCluster | None:
        try:
            data, _ = await self._store.get(f"{CLUSTERS_PATH}/{name}")
        except NoNodeError:
            return None
        doc = json.loads(data)
        if doc.get("format") != CLUSTER_FORMAT_VERSION:
            raise ClusterError(f"cluster {name!r}: unknown node format {doc.get('format')}", 500)
        return RemoteCluster.from_json(name, doc)

    async def list(self) -> list[RemoteCluster]:
        try:
            names = sorted(await self._store.children(CLUSTERS_PATH))
        except NoNodeError:
            return []
        found = [await self.get(n) for n in names]
        return [c for c in found if c is not None]
