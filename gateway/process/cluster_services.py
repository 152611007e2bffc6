"""The operations side of `ledgerwire broker`: namespaces, Kafka security, retention/TTL and
the admin HTTP API, made right for a broker that owns only part of the cluster.

`ledgerwire standalone` owns everything it sees; a cluster broker does not.  So here:

- the namespace registry is shared through the metadata store and *followed*
  (`NamespaceRegistry.follow`, started by run_broker): a tenant, namespace, policy or topic
  mapping made through another broker's admin API reaches this one within seconds (and open
  partitions get the new policies);
- the admin API sees topics through `OwnedTopics`: it never opens (and so never fences) a
  partition another broker owns, and lists/measures only partitions owned here;
- groups are those of the coordinator partitions this broker owns (ClusterGroupCoordinator's
  `offsets` and `loaded_partitions()`);
- message TTL: a partition's owner publishes the first offset inside the TTL, and each group's
  coordinator moves that group's committed offset up to it (`ClusterRetentionScope`);
- retention/TTL (`ClusterRetentionScope`) act only on partitions owned here; consumed-data
  deletion needs the committed offsets of *every* group in the cluster, so each broker
  publishes, in an ephemeral node, the smallest offset its groups committed per partition and
  which coordinator partitions that covers; a partition's owner deletes consumed ledgers only
  when the published summaries cover every coordinator partition, below the smallest offset
  any of them reports;
- bookies and brokers are listed from their registries in the metadata store;
- /ready is true only while the ownership loop runs and its lease is valid.

This module must never open a partition another broker owns, nor let retention delete data
that a group coordinated elsewhere has not committed past.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.admin.api import AdminContext
from gateway.admin.metrics import BrokerMetrics
from gateway.cluster.broker_registry import read_bundle_owners, read_draining, read_live_brokers
from gateway.cluster.bundle_placement import GROUP_TOPIC
from gateway.cluster.ownership import OwnershipService
from gateway.cluster.peer_client import PeerSecurity, peer_security_from_config
from gateway.config.settings import Config
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.security.admin_tokens import TokenStore
from gateway.security.setup import KafkaSecurity, setup_kafka_security
from gateway.security.tenant_authorizer import TenantAuthorizer
from gateway.topics.backlog_quota import BacklogQuotas
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.retention_policies import RetentionPolicies
from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
from ledger_backend.faults import log_failure
from ledger_backend.metadata.store import MetadataError, MetadataStore, NoNodeError
from protocols.kafka.errors import KafkaProtocolError, NotLeaderOrFollowerError
from protocols.kafka.group_model import CommittedOffset

log = logging.getLogger("ledgerwire.cluster_ops")

COMMITTED_FLOORS_PATH = "/ledgerwire/retention/committed-floors"
FLOORS_FORMAT_VERSION = 1
FLOORS_PUBLISH_INTERVAL_S = 10.0

PartitionKey = tuple[str, int]


# --- namespaces ---------------------------------------------------------------------------------

async def setup_namespaces(store: MetadataStore, topics: Any,
                           config: Config) -> NamespaceRegistry:
    namespaces = NamespaceRegistry(store, config.admin.default_namespace,
                                   data_dir=config.data_dir)
    await namespaces.load()
    topics.namespaces = namespaces
    return namespaces


@dataclass
class ClusterSecurity:
    """The Kafka security pieces, with the authorizer behind the tenant check."""

    kafka: KafkaSecurity
    authorizer: TenantAuthorizer
    peers: PeerSecurity = field(default_factory=PeerSecurity)  # how to reach other brokers


async def setup_security(config: Config, store: MetadataStore, namespaces: NamespaceRegistry,
                         background: trio.Nursery) -> ClusterSecurity:
    """TLS/SASL/ACLs as in the standalone; users and ACLs live in the shared store, so every
    broker of a cluster authenticates and authorises alike (the ACL store follows changes).
    Also the inter-broker login (`setup_inter_broker_security`)."""
    security = await setup_kafka_security(config, store)  # loads the ACLs once
    background.start_soon(follow_acls, security.acls)
    peers = await setup_inter_broker_security(config, security)
    return ClusterSecurity(security, TenantAuthorizer(security.authorizer, namespaces), peers)


async def setup_inter_broker_security(config: Config, security: KafkaSecurity) -> PeerSecurity:
    """How this broker logs in to its peers (security.inter_broker_*).  Its principal becomes a
    super user (as Kafka operators list brokers in super.users) unless
    inter_broker_super_user = false, and its password is checked against the stored
    credential now, so a wrong one is an error in the log at start rather than a mystery when
    the first transaction spans two brokers.  Neither check stops the broker."""
    peers = peer_security_from_config(config)
    protocol = config.kafka.security_protocol
    if peers.sasl_mechanism is None:
        if protocol == "SSL" and config.kafka.ssl_client_auth == "none" \
                and security.authorizer.enabled:
            log.warning("an SSL listener with kafka.ssl_client_auth = none: brokers are "
                        "User:ANONYMOUS to each other and requests to other brokers will be "
                        "refused; require client certificates and list the brokers' "
                        "principal in security.super_users")
        if protocol.startswith("SASL_"):
            log.warning("security.inter_broker_user is not set on a %s listener: requests to "
                        "other brokers (transaction markers, transactional offsets) will be "
                        "refused", protocol)
        return peers
    principal = peers.principal
    if config.security.inter_broker_super_user and principal is not None:
        security.authorizer.super_users = security.authorizer.super_users | {principal}
    await check_inter_broker_credential(security.credentials, peers)
    log.info("inter-broker security", extra={
        "peers": peers.describe(), "super_user": principal in security.authorizer.super_users})
    return peers


async def check_inter_broker_credential(credentials: Any, peers: PeerSecurity) -> bool:
    """Does the stored credential of the inter-broker user accept its configured password?
    Logs an error naming the setting to fix when not (never the password)."""
    try:
        credential = await credentials.lookup(peers.user, peers.sasl_mechanism)
    except MetadataError as exc:
        log.warning("cannot check the inter-broker credential of %r now: %r", peers.user, exc)
        return False
    if credential is None:
        log.error("inter-broker user %r has no %s credential: add it to security.users (or "
                  "users_file) with the password of security.inter_broker_password; requests "
                  "to other brokers will be refused", peers.user, peers.sasl_mechanism)
        return False
    if not await trio.to_thread.run_sync(credential.check_password, peers.password):
        log.error("security.inter_broker_password does not match the stored password of "
                  "inter-broker user %r: requests to other brokers (transaction markers, "
                  "transactional offsets) will be refused until it is fixed", peers.user)
        return False
    return True


async def follow_acls(acls: Any, retry_s: float = 1.0) -> None:
    """The ACL store's own follower, restarted when its watch ends (a ZooKeeper session can be
    lost and renewed under a cluster broker; the ACLs loaded last stay in force meanwhile)."""
    while True:
        try:
            await acls.run()
        except MetadataError as exc:
            log.info("ACL watch ended (%r); watching again", exc)
        await trio.sleep(retry_s)


# --- what the admin API and retention see -------------------------------------------------------

class OwnedTopics:
    """The topic service as the ops side of a cluster broker may use it: partitions owned
    elsewhere are neither opened nor listed (opening one would fence its owner)."""

    def __init__(self, topics: Any, ownership: OwnershipService) -> None:
        self._topics = topics
        self._ownership = ownership

    def __getattr__(self, name: str) -> Any:
        return getattr(self._topics, name)

    async def partition(self, topic: str, partition: int) -> Any:
        if not self._ownership.is_local(topic, partition):
            owner = self._ownership.owner_of(topic, partition)
            raise NotLeaderOrFollowerError(
                f"{topic}-{partition} is owned by broker "
                f"{owner.node_id if owner is not None else 'none'}")
        return await self._topics.partition(topic, partition)

    def open_partitions(self) -> dict[PartitionKey, Any]:
        return {key: plog for key, plog in self._topics.open_partitions().items()
                if self._ownership.is_local(*key)}


# --- cluster-wide committed floors for consumed-data retention ---------------------------------

def local_floors(offsets: Mapping[str, Mapping[PartitionKey, Any]]) -> dict[PartitionKey, int]:
    """The smallest offset any of these groups committed, per partition (negative = none)."""
    floors: dict[PartitionKey, int] = {}
    for committed in offsets.values():
        for key, offset in committed.items():
            if offset.offset >= 0:
                floors[key] = min(offset.offset, floors.get(key, offset.offset))
    return floors


def encode_floors(broker_id: int, covered: Iterable[int], floors: Mapping[PartitionKey, int],
                  ttl_first_live: Mapping[PartitionKey, int] | None = None) -> bytes:
    return json.dumps({"format": FLOORS_FORMAT_VERSION, "broker": broker_id,
                       "covered": sorted(covered),
                       "floors": [[t, p, o] for (t, p), o in sorted(floors.items())],
                       "ttl_first_live": [[t, p, o] for (t, p), o
                                          in sorted((ttl_first_live or {}).items())]}).encode()


def combine_ttl_first_live(summaries: Iterable[bytes]) -> dict[PartitionKey, int]:
    """Per partition with a message TTL, the first offset still inside it, as its owner
    published (the smallest if a previous owner's summary is still there)."""
    out: dict[PartitionKey, int] = {}
    for data in summaries:
        try:
            doc = json.loads(data)
            if doc.get("format") != FLOORS_FORMAT_VERSION:
                continue
            for topic, partition, offset in doc.get("ttl_first_live", []):
                key = (str(topic), int(partition))
                out[key] = min(int(offset), out.get(key, int(offset)))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def combine_floors(summaries: Iterable[bytes],
                   group_partitions: int) -> dict[PartitionKey, int] | None:
    """The cluster-wide smallest committed offset per partition, or None when the summaries do
    not cover every coordinator partition (some groups' offsets are unknown: delete nothing)."""
    covered: set[int] = set()
    floors: dict[PartitionKey, int] = {}
    for data in summaries:
        try:
            doc = json.loads(data)
            if doc.get("format") != FLOORS_FORMAT_VERSION:
                return None
            covered.update(int(p) for p in doc["covered"])
            for topic, partition, offset in doc["floors"]:
                key = (str(topic), int(partition))
                floors[key] = min(int(offset), floors.get(key, int(offset)))
        except (ValueError, KeyError, TypeError):
            return None  # an unreadable summary hides offsets: be safe
    if not set(range(group_partitions)) <= covered:
        return None
    return floors


class ClusterRetentionScope:
    """What RetentionPolicies may act on in a cluster (see the module docstring).

    Message TTL crosses brokers too: a partition's owner publishes the first offset still
    inside its TTL, and the coordinator of a group (which may be another broker) moves that
    group's committed offset up to it; RetentionPolicies handles the groups coordinated by
    the partition's owner itself."""

    def __init__(self, store: MetadataStore, ownership: OwnershipService,
                 groups: ClusterGroupCoordinator, broker_id: int, topics: OwnedTopics,
                 namespaces: NamespaceRegistry,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._store = store
        self._ownership = ownership
        self._groups = groups
        self._path = f"{COMMITTED_FLOORS_PATH}/{broker_id}"
        self._broker_id = broker_id
        self._topics = topics
        self._namespaces = namespaces
        self._now_ms = now_ms

    def owns(self, topic: str, partition: int) -> bool:
        return self._ownership.is_local(topic, partition)

    def covered(self) -> set[int]:
        return {p for p in self._groups.loaded_partitions()
                if self._ownership.is_local(GROUP_TOPIC, p)}

    async def _ttl_first_live(self) -> dict[PartitionKey, int]:
        out: dict[PartitionKey, int] = {}
        for (topic, partition), plog in sorted(self._topics.open_partitions().items()):
            ttl_s = self._namespaces.topic_policies(topic).message_ttl_seconds
            if not ttl_s or ttl_s <= 0 or plog.failed or plog.closed:
                continue
            try:
                found = await plog.offset_for_timestamp(self._now_ms() - ttl_s * 1000)
            except KafkaProtocolError:
                continue
            out[(topic, partition)] = plog.high_watermark if found is None else found[0]
        return out

    async def _expire_remote(self, first_live: Mapping[PartitionKey, int]) -> None:
        """TTL for this broker's groups on partitions other brokers own."""
        for group_id, committed in self._groups.offsets.items():
            moved = {key: CommittedOffset(first_live[key], c.leader_epoch, c.metadata,
                                          self._now_ms())
                     for key, c in committed.items()
                     if key in first_live and 0 <= c.offset < first_live[key]
                     and not self.owns(*key)}
            if not moved:
                continue
            try:
                await self._groups.advance_offsets(group_id, moved)
            except KafkaProtocolError as exc:
                log.info("TTL of group %s not applied: %r", group_id, exc)
                continue
            log.info("TTL moved committed offsets", extra={
                "group": group_id, "to": {f"{t}-{p}": c.offset for (t, p), c in moved.items()}})

    async def publish(self) -> None:
        data = encode_floors(self._broker_id, self.covered(), local_floors(self._groups.offsets),
                             await self._ttl_first_live())
        try:
            await self._store.set(self._path, data, -1)
        except NoNodeError:
            # Ephemeral: a dead broker's summary goes with its session (coverage then lacks
            # its partitions until the new owners publish, and nothing is deleted meanwhile).
            await self._store.create(self._path, data, ephemeral=True, make_parents=True)

    async def _summaries(self) -> list[bytes]:
        try:
            names = await self._store.children(COMMITTED_FLOORS_PATH)
        except NoNodeError:
            return []
        summaries = []
        for name in names:
            try:
                summaries.append((await self._store.get(f"{COMMITTED_FLOORS_PATH}/{name}"))[0])
            except NoNodeError:
                continue
        return summaries

    async def committed_floors(self) -> dict[PartitionKey, int] | None:
        """Apply the other owners' TTLs to this broker's groups, publish this broker's
        summary, then combine every summary (None: some groups' offsets unknown)."""
        try:
            await self._expire_remote(combine_ttl_first_live(await self._summaries()))
            await self.publish()
            summaries = await self._summaries()
        except MetadataError as exc:
            log.warning("committed floors unavailable: %r", exc)
            return None
        return combine_floors(summaries, self._ownership.layout.group_partitions)

    async def run_publisher(self, interval_s: float = FLOORS_PUBLISH_INTERVAL_S) -> None:
        while True:
            try:
                await self.publish()
            except (MetadataError, KafkaProtocolError) as exc:
                log.debug("publishing committed floors failed: %r", exc)
            await trio.sleep(interval_s)


# --- registries for the admin API ---------------------------------------------------------------

async def registered_bookies(store: MetadataStore) -> list[dict[str, Any]]:
    """The bookies registered as available (what `ledgerwire cluster status` lists)."""
    try:
        names = sorted(await store.children(AVAILABLE_BOOKIES_PATH))
    except NoNodeError:
        return []
    rows = []
    for name in names:
        try:
            data, _ = await store.get(f"{AVAILABLE_BOOKIES_PATH}/{name}")
            doc = json.loads(data)
        except NoNodeError:
            continue
        except ValueError:
            doc = {}
        rows.append({"bookie": doc.get("bookie_id", name), "address": doc.get("address", name),
                     "state": "available"})
    return rows


async def registered_brokers(store: MetadataStore) -> list[dict[str, Any]]:
    live = await read_live_brokers(store)
    draining = await read_draining(store)
    owners = await read_bundle_owners(store)
    return [{"broker_id": node_id, "kafka": f"{b.host}:{b.port}",
             "state": "draining" if node_id in draining else "owning",
             "bundles": sorted(bundle for bundle, o in owners.items() if o == node_id)}
            for node_id, b in sorted(live.items())]


# --- assembly -----------------------------------------------------------------------------------

def build_admin(config: Config, store: MetadataStore, topics: Any,
                namespaces: NamespaceRegistry, ownership: OwnershipService,
                groups: ClusterGroupCoordinator, kafka_address: str,
                ownership_running: Callable[[], bool]
                ) -> tuple[AdminContext, ClusterRetentionScope]:
    """The admin context of a cluster broker and its retention scope (neither running yet)."""
    owned = OwnedTopics(topics, ownership)

    def owner_of(topic: str, partition: int) -> int | None:
        owner = ownership.owner_of(topic, partition)
        return owner.node_id if owner is not None else None

    scope = ClusterRetentionScope(store, ownership, groups, config.kafka.broker_id, owned,
                                  namespaces)
    admin = AdminContext(store, owned, namespaces, groups, BrokerMetrics(), [],
                         config.kafka.broker_id, kafka_address,
                         retention=RetentionPolicies(owned, namespaces, groups, scope=scope),
                         tokens=TokenStore(store))
    # Backlog quotas: checked on owned partitions only, counting groups coordinated anywhere
    # (the scope's committed floors); the produce/send handlers ask the real topic service.
    quotas = BacklogQuotas(owned, namespaces, groups, scope=scope)
    topics.backlog_quotas = quotas
    admin.retention.backlog = quotas
    admin.ready_check = lambda: ownership_running() and ownership.lease_valid()
    admin.bookie_lister = lambda: registered_bookies(store)
    admin.broker_lister = lambda: registered_brokers(store)
    admin.owner_of = owner_of
    return admin, scope


async def keep_running(name: str, task: Callable[[], Awaitable[None]],
                       retry_s: float = 5.0) -> None:
    """Run a background loop, restarting it after an error: a lost ZooKeeper session or a
    partition fenced by its new owner in the middle of a pass must not stop the broker."""
    while True:
        try:
            await task()
            return
        except Exception:
            log_failure(log, "%s failed; restarting in %.0f s", name, retry_s,
                        bug_level=logging.ERROR)
        await trio.sleep(retry_s)


async def start_ops_background(admin: AdminContext, scope: ClusterRetentionScope,
                               background: trio.Nursery) -> None:
    """Retention/TTL passes and the committed-floor publisher, in the broker's nursery."""
    background.start_soon(keep_running, "retention", admin.retention.run)
    background.start_soon(keep_running, "committed-floor publisher", scope.run_publisher)
    if admin.retention.backlog is not None:
        background.start_soon(keep_running, "backlog quotas", admin.retention.backlog.run)
