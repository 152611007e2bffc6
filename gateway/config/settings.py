"""Configuration of a ledgerwire process: defaults, a TOML file, then command-line flags.

Every setting has one home here, with its default. The order of precedence is fixed:
built-in default < TOML file < command-line flag. This module holds the settings, their
defaults and their validation; reading the TOML file and the flags into them is loading.py's.
It never opens sockets or files.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger_backend.managed_ledger.types import ManagedLedgerConfig
from protocols.kafka.ssl_principal import BadMappingRuleError, parse_rules


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


def parse_host_port(text: str, *, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """Parse "host:port", ":port" or "port" (IPv6 as "[::1]:9092")."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.lstrip(":")
    elif ":" in text:
        host, _, port_text = text.rpartition(":")
    else:
        host, port_text = "", text
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"not a host:port: {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"port out of range: {text!r}")
    return (host or default_host), port


@dataclass
class KafkaConfig:
    listener: str = "0.0.0.0:9092"
    advertised_host: str = ""  # empty: the listener host, or 127.0.0.1 for a wildcard listener
    advertised_port: int = 0  # 0: the listener port
    broker_id: int = 0
    cluster_id: str = "ledgerwire-standalone"
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_message_bytes: int = 1048588
    max_frame_bytes: int = 100 * 1024 * 1024
    sasl_max_receive_bytes: int = 512 * 1024  # sasl.server.max.receive.size: frames before login
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    connections_max_reauth_ms: int = 0  # KIP-368: clients re-authenticate within this (0: no)
    max_connections: int = 0  # max.connections (0: no limit)
    max_connections_per_ip: int = 0  # max.connections.per.ip (0: no limit)
    fetch_max_bytes: int = 55 * 1024 * 1024  # fetch.max.bytes: the broker's cap on an answer
    # Partitions one CreateTopics or CreatePartitions request may create in all (a topic may
    # have at most 10,000); the controller_mutation_rate quota limits the rate.
    max_partitions_per_request: int = 10_000
    shutdown_grace_s: float = 10.0
    group_initial_rebalance_delay_ms: int = 3000  # Kafka's group.initial.rebalance.delay.ms
    offsets_retention_minutes: int = 7 * 24 * 60  # Kafka's offsets.retention.minutes
    group_consumer_session_timeout_ms: int = 45000  # KIP-848 group.consumer.session.timeout.ms
    group_consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    group_share_session_timeout_ms: int = 45000  # KIP-932 group.share.session.timeout.ms
    group_share_heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL (TLS needs ssl_certfile and ssl_keyfile)
    security_protocol: str = "PLAINTEXT"
    sasl_mechanisms: list[str] = field(
        default_factory=lambda: ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    ssl_certfile: str = ""  # PEM certificate chain
    ssl_keyfile: str = ""  # PEM private key
    # Kafka's ssl.client.auth: none | requested | required (client certificates checked
    # against ssl_cafile); on an SSL listener the certificate's DN, mapped by
    # ssl_principal_mapping_rules (Kafka's syntax, protocols/kafka/ssl_principal.py), is the
    # principal; without a certificate the client is User:ANONYMOUS.
    ssl_client_auth: str = "none"
    ssl_cafile: str = ""
    ssl_principal_mapping_rules: list[str] = field(default_factory=lambda: ["DEFAULT"])


@dataclass
class StorageConfig:
    bookies: int = 1
    bookie_host: str = "127.0.0.1"
    bookie_port: int = 3181  # first bookie; the others take the next ports
    # standalone --workers N: each worker serves its share of max(bookies, N) bookies in its
    # own process (its adds never leave it); false: all bookies in one process of their own
    worker_bookies: bool = True
    # what the bookies register for readers on other hosts (Spark executors); "": bookie_host
    bookie_advertised_host: str = ""
    ensemble_size: int = ManagedLedgerConfig.ensemble_size
    write_quorum: int = ManagedLedgerConfig.write_quorum
    ack_quorum: int = ManagedLedgerConfig.ack_quorum
    fsync: bool = True
    journal_max_group_wait_ms: float = 2.0
    journal_writes_in_flight: int = 1  # overlapping journal group writes (1: one at a time)
    write_cache_mb: int = 256  # 64 stalled bookie adds on flushes at 150+ MB/s of produce
    read_cache_mb: int = 64
    max_entries_per_ledger: int = ManagedLedgerConfig.max_entries_per_ledger
    max_ledger_mb: int = ManagedLedgerConfig.max_ledger_bytes >> 20
    max_ledger_age_s: float = ManagedLedgerConfig.max_ledger_age_s
    # a partition log nobody used this long is closed (its data stays; the next request opens
    # it again, as Pulsar unloads bundles); <= 0: never
    partition_idle_unload_s: float = 600.0
    # open partition logs at most per broker process (the least recently used idle ones are
    # closed beyond it); 0: no bound
    max_open_partitions: int = 0
    entry_log_max_mb: int = 1024  # a bookie's entry log rolls at this size (GC frees whole logs)
    journal_max_file_mb: int = 512  # a journal file rolls at this size (checkpoints trim old ones)
    # zero-fill journal files this far ahead of their writes (cheaper fdatasyncs); 0: off
    journal_preallocate_mb: int = 4
    # The cluster's shared bookie secret (>= 16 bytes): bookies authenticate every connection
    # with it, brokers present it. Prefer the file (mode 0600; first line) over the value.
    bookie_secret: str = field(default="", repr=False)
    bookie_secret_file: str = ""
    # TLS on bookie connections (ledger_backend/bookie/tls.py): the certificate and key serve
    # (bookies) and identify (clients); the CA file verifies peers (and requires client
    # certificates on bookies). Empty: plaintext.
    bookie_tls_certfile: str = ""
    bookie_tls_keyfile: str = ""
    bookie_tls_cafile: str = ""
    # Ledgers this process creates get this password (first line of the file): bookies then
    # take their adds, fencing reads and recovery adds only with its master key. Brokers and
    # auto-recovery (`--ledger-password-file`) need the same one. Empty: no password.
    ledger_password_file: str = ""
    # Entries of the ledgers this process creates carry an HMAC-SHA256 keyed from the ledger
    # password instead of a CRC (BookKeeper's MAC digest type): a bookie cannot forge or alter
    # them. Needs ledger_password_file; every reader of those ledgers needs the password too.
    entry_mac: bool = False


@dataclass
class RetentionConfig:
    """[retention]: a topic's defaults (Kafka's log.retention.ms/bytes).  The one place they
    are stated: the topic service's and the Kafka broker's configs take theirs from here."""

    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # per partition; -1: no size bound


@dataclass
class OffloadConfig:
    """[offload]: tiered storage of closed ledgers (ledger_backend/offload); driver "" = off."""

    driver: str = ""  # "" (off) | "filesystem" | "s3"
    directory: str = ""  # filesystem: where objects go ("" = <data_dir>/offload)
    bucket: str = ""  # s3 (any S3-compatible endpoint)
    prefix: str = ""
    endpoint: str = ""  # e.g. http://127.0.0.1:9000; "" = AWS
    region: str = "us-east-1"
    access_key_id: str = ""  # "" = from the environment (AWS_ACCESS_KEY_ID, ...)
    secret_access_key: str = ""
    threshold_mb: float = -1  # keep at most this much per partition on bookies; -1 = never
    threshold_seconds: float = -1  # and offload ledgers whose data is this old; -1 = never
    deletion_lag_s: float = 4 * 3600  # bookie copies go this long after the offload
    interval_s: float = 60.0  # background offload passes
    cache_mb: int = 64  # decoded blocks of offloaded ledgers kept in memory

    @property
    def threshold_bytes(self) -> int:
        """threshold_mb in bytes (-1: never)."""
        return -1 if self.threshold_mb < 0 else int(self.threshold_mb * (1 << 20))


@dataclass
class AdminConfig:
    # admin HTTP API, console, /health, /ready, /metrics; "" = off.  "auto": 0.0.0.0:8080 when
    # admin authentication is on, else 127.0.0.1:8080 (loopback only)
    listener: str = "auto"
    default_namespace: str = "public/default"  # where a Kafka topic without a mapping lives
    # HTTP Basic (SASL/SCRAM users) or Bearer (admin tokens), ACLs as for Kafka.  "auto": on
    # unless the Kafka listener is PLAINTEXT and no users are configured
    authentication: str = "auto"  # auto | on | off
    metrics_authentication: bool = True  # false: /metrics answers without credentials
    tls: str = "auto"  # auto: HTTPS when the Kafka listener uses TLS (its certificate) | on | off


@dataclass
class RocketMQAclConfig:
    """Apache plain_acl.yml as TOML: [rocketmq.acl] and [[rocketmq.acl.accounts]] tables with
    access_key, secret_key, white_remote_address, admin, default_topic_perm,
    default_group_perm, topic_perms/group_perms (["name=DENY|PUB|SUB|PUB|SUB"]) and tenant."""

    enabled: bool = False
    global_white_remote_addresses: list[str] = field(default_factory=list)
    accounts: list[dict[str, Any]] = field(default_factory=list)
    # On a secured broker (Kafka SASL or ACLs on) RocketMQ requests must be signed by an
    # account; true lets unsigned ones in as User:ANONYMOUS (the Kafka ACLs still decide).
    allow_anonymous: bool = False
    # Before a connection's first request is authenticated (signed requests only): a larger
    # frame closes it unread (one largest message, 4 MiB, plus 64 KiB of header), and it
    # must prove an account within this time.
    pre_auth_max_frame_bytes: int = 4 * 1024 * 1024 + 64 * 1024
    pre_auth_timeout_ms: int = 10_000


@dataclass
class RocketMQConfig:
    enabled: bool = True
    name_server_listener: str = "0.0.0.0:9876"
    broker_listener: str = "0.0.0.0:10911"
    grpc_listener: str = "0.0.0.0:8081"  # RocketMQ 5 clients (gRPC); '' = off
    advertised_host: str = ""  # empty: the listener host, or 127.0.0.1 for a wildcard listener
    advertised_port: int = 0  # 0: the bound port
    broker_name: str = "ledgerwire-broker"
    cluster_name: str = "DefaultCluster"
    auto_create_topics: bool = True
    default_queue_nums: int = 4
    max_reconsume_times: int = 16
    delay_levels: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    transaction_check_timeout_s: float = 6.0
    transaction_check_interval_s: float = 60.0
    transaction_max_checks: int = 15
    # Connections held at once on the RocketMQ ports of this process together (name server,
    # brokers, gRPC), in all and per client address, as Kafka's max.connections[.per.ip]
    max_connections: int = 0  # 0: no limit
    max_connections_per_ip: int = 0  # 0: no limit
    acl: RocketMQAclConfig = field(default_factory=RocketMQAclConfig)


@dataclass
class LogConfig:
    level: str = "INFO"
    format: str = "json"  # json | text


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class SecurityConfig:
    # ACL enforcement: "auto" = on for SASL listeners (principals are known), else off
    authorization: str = "auto"  # auto | on | off
    super_users: list[str] = field(default_factory=list)  # e.g. ["User:admin"]
    allow_everyone_if_no_acl_found: bool = False
    # SASL users created (or their password reset) at start: [{name, password, mechanisms?}]
    users: list[dict[str, Any]] = field(default_factory=list)
    users_file: str = ""  # a TOML file with [[users]] tables of the same shape
    # How this broker logs in to the other brokers of a cluster (transaction markers, offsets):
    # Kafka's sasl.mechanism.inter.broker.protocol and the broker's own JAAS user.  The user
    # must exist (security.users) and is a super user unless inter_broker_super_user = false
    # (then grant it CLUSTER_ACTION on the cluster).  Password: inter_broker_password, else
    # the first line of inter_broker_password_file, else the named environment variable.
    inter_broker_user: str = ""
    inter_broker_password: str = ""
    inter_broker_password_file: str = ""
    inter_broker_password_env: str = "LEDGERWIRE_INTER_BROKER_PASSWORD"
    inter_broker_mechanism: str = "SCRAM-SHA-512"  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    inter_broker_super_user: bool = True
    inter_broker_ssl_cafile: str = ""  # SSL/SASL_SSL: CA of the peers (default: ssl_certfile)
    inter_broker_ssl_check_hostname: bool = True
    # Kafka delegation tokens (KIP-48; gateway/security/delegation_tokens.py): the cluster's
    # HMAC key (Kafka's delegation.token.secret.key, >= 16 bytes, the same on every broker),
    # or the first line of a file holding it.  Neither set: tokens are disabled.
    delegation_token_secret_key: str = field(default="", repr=False)
    delegation_token_secret_key_file: str = ""
    delegation_token_max_lifetime_ms: int = 7 * 24 * 3600 * 1000
    delegation_token_expiry_time_ms: int = 24 * 3600 * 1000  # the default renew period
    delegation_token_expiry_check_interval_ms: int = 3600 * 1000  # purge of expired tokens

    def authorization_enabled(self, security_protocol: str) -> bool:
        """"auto": on wherever clients can be told apart (SASL, or TLS with client
        certificates; an SSL client without one is User:ANONYMOUS and, as in Kafka, refused
        unless an ACL or allow_everyone_if_no_acl_found lets it in)."""
        if self.authorization == "auto":
            return security_protocol != "PLAINTEXT"
        return self.authorization == "on"


@dataclass
class ClusterConfig:
    # The ZooKeeper session a cluster broker asks for (`--zk-session-timeout`): how long a
    # dead broker keeps its bundles before another takes over, and the base of its ownership
    # lease.  A `?session_timeout_s=N` in the --metadata URL wins over it.
    zk_session_timeout_s: float = 10.0
    # How long a broker that joined or came back must be live before owners hand it bundles
    # (one per round, gracefully); 0 hands them over at once (`--handback-delay`).
    handback_delay_s: float = 15.0
    # Take a dead broker's bundles over before its session ends when its advertised Kafka port
    # refuses connections (3 probes in a row; a stopped or unreachable broker still waits for
    # its session): gateway/cluster/peer_liveness.py.
    expel_refusing_brokers: bool = True


def metadata_url_with_session_timeout(url: str, session_timeout_s: float | None) -> str:
    """`url` with `session_timeout_s` as its ZooKeeper session timeout, unless the URL names
    one already (or is not a ZooKeeper URL, or no timeout is given)."""
    if session_timeout_s is None or not url.startswith("zk://") or "session_timeout_s=" in url:
        return url
    if session_timeout_s <= 0:
        raise ConfigError("the ZooKeeper session timeout must be > 0 seconds")
    return f"{url}{'&' if '?' in url else '?'}session_timeout_s={session_timeout_s:g}"


@dataclass
class ReplicationConfig:
    """Geo-replication (gateway/replication/): this cluster's name among the clusters that
    replicate namespaces to each other, and how often the replicators checkpoint."""

    cluster_name: str = "standalone"
    checkpoint_interval_s: float = 1.0  # a replicator's durable position and offset sync
    retry_backoff_s: float = 1.0  # after a remote cluster failed to answer
    forward_min_bytes: int = 16384  # a stored batch this big is sent whole, records untouched


@dataclass
class Config:
    data_dir: Path = Path("./data")
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    log: LogConfig = field(default_factory=LogConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    rocketmq: RocketMQConfig = field(default_factory=RocketMQConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    replication: ReplicationConfig = field(default_factory=ReplicationConfig)
    # `standalone` broker worker processes: "1" = all in one process (as before), N > 1 = a
    # supervisor with N workers (gateway/process/supervisor.py), "auto" = one per core
    workers: str = "1"

    def worker_count(self) -> int:
        """How many broker worker processes `standalone` runs (see `workers`)."""
        if self.workers.strip().lower() == "auto":
            return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                       else (os.cpu_count() or 1))
        return int(self.workers)

    def validate(self) -> None:
        if self.workers.strip().lower() != "auto" and (
                not self.workers.strip().isdigit() or int(self.workers) < 1):
            raise ConfigError(f"workers must be a number >= 1 or 'auto', not {self.workers!r}")
        o = self.offload
        if o.driver not in ("", "filesystem", "s3"):
            raise ConfigError(f"offload.driver must be filesystem or s3, not {o.driver!r}")
        if o.driver == "s3" and not o.bucket:
            raise ConfigError("offload.driver = s3 needs offload.bucket")
        if o.deletion_lag_s < 0 or o.interval_s <= 0 or o.cache_mb < 0:
            raise ConfigError("offload.deletion_lag_s, interval_s and cache_mb must be >= 0")
        s = self.storage
        if s.bookies < 1:
            raise ConfigError("storage.bookies must be at least 1")
        if s.max_open_partitions < 0:
            raise ConfigError("storage.max_open_partitions must be >= 0 (0: no bound)")
        if s.journal_preallocate_mb < 0:
            raise ConfigError("storage.journal_preallocate_mb must be at least 0")
        if s.journal_writes_in_flight < 1:
            raise ConfigError("storage.journal_writes_in_flight must be at least 1")
        if not s.bookies >= s.ensemble_size >= s.write_quorum >= s.ack_quorum >= 1:
            raise ConfigError(
                "need bookies >= ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                f"{s.bookies}/{s.ensemble_size}/{s.write_quorum}/{s.ack_quorum}"
            )
        if s.bookie_secret and s.bookie_secret_file:
            raise ConfigError("set storage.bookie_secret or storage.bookie_secret_file, not both")
        if s.bookie_secret and len(s.bookie_secret.encode()) < 16:
            raise ConfigError("storage.bookie_secret needs at least 16 bytes")
        if bool(s.bookie_tls_certfile) != bool(s.bookie_tls_keyfile):
            raise ConfigError("storage.bookie_tls_certfile and bookie_tls_keyfile go together")
        if s.entry_mac and not s.ledger_password_file:
            raise ConfigError("storage.entry_mac needs storage.ledger_password_file (the MAC "
                              "key comes from the ledger password)")
        sec = self.security
        if sec.delegation_token_secret_key and sec.delegation_token_secret_key_file:
            raise ConfigError("set security.delegation_token_secret_key or "
                              "delegation_token_secret_key_file, not both")
        if sec.delegation_token_secret_key and len(sec.delegation_token_secret_key.encode()) < 16:
            raise ConfigError("security.delegation_token_secret_key needs at least 16 bytes")
        if min(sec.delegation_token_max_lifetime_ms, sec.delegation_token_expiry_time_ms,
               sec.delegation_token_expiry_check_interval_ms) < 1:
            raise ConfigError("security.delegation_token_*_ms must be at least 1")
        if self.kafka.max_partitions_per_request < 1:
            raise ConfigError("kafka.max_partitions_per_request must be at least 1")
        if self.kafka.default_partitions < 1:
            raise ConfigError("kafka.default_partitions must be at least 1")
        parse_host_port(self.kafka.listener)
        parse_host_port(self.rocketmq.name_server_listener)
        parse_host_port(self.rocketmq.broker_listener)
        if self.rocketmq.grpc_listener:
            parse_host_port(self.rocketmq.grpc_listener)
        if self.log.format not in ("json", "text"):
            raise ConfigError("log.format must be 'json' or 'text'")
        self._validate_security()
        self._validate_rocketmq_acl()
        self._validate_admin()

    def admin_authentication(self) -> bool:
        """Is the admin surface authenticated? (See AdminConfig.authentication.)"""
        if self.admin.authentication == "auto":
            return (self.kafka.security_protocol != "PLAINTEXT" or bool(self.security.users)
                    or bool(self.security.users_file))
        return self.admin.authentication == "on"

    def admin_listener(self) -> str:
        """The admin listener to bind ("" = none), with "auto" resolved."""
        if self.admin.listener == "auto":
            return "0.0.0.0:8080" if self.admin_authentication() else "127.0.0.1:8080"
        return self.admin.listener

    def admin_tls(self) -> bool:
        if self.admin.tls == "auto":
            return self.kafka.security_protocol in ("SSL", "SASL_SSL")
        return self.admin.tls == "on"

    def _validate_admin(self) -> None:
        admin = self.admin
        if admin.authentication not in ("auto", "on", "off"):
            raise ConfigError("admin.authentication must be auto, on or off")
        if admin.tls not in ("auto", "on", "off"):
            raise ConfigError("admin.tls must be auto, on or off")
        if self.admin_tls() and not (self.kafka.ssl_certfile and self.kafka.ssl_keyfile):
            raise ConfigError("admin.tls needs kafka.ssl_certfile and kafka.ssl_keyfile")
        listener = self.admin_listener()
        if not listener:
            return
        host, _ = parse_host_port(listener)
        if (not self.admin_authentication() and self.kafka.security_protocol != "PLAINTEXT"
                and not is_loopback(host)):
            raise ConfigError(
                f"admin.authentication is off on a {self.kafka.security_protocol} broker: the "
                f"admin listener {listener} would let anyone who reaches it change the cluster; "
                "bind it to 127.0.0.1 or turn admin.authentication on")

    def _validate_security(self) -> None:
        k = self.kafka
        if k.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"kafka.security_protocol must be one of {SECURITY_PROTOCOLS}")
        if k.security_protocol in ("SSL", "SASL_SSL") and not (k.ssl_certfile and k.ssl_keyfile):
            raise ConfigError(f"kafka.security_protocol={k.security_protocol} needs "
                              "kafka.ssl_certfile and kafka.ssl_keyfile")
        if k.ssl_client_auth not in ("none", "requested", "required"):
            raise ConfigError("kafka.ssl_client_auth must be none, requested or required")
        if k.ssl_client_auth != "none" and not k.ssl_cafile:
            raise ConfigError("kafka.ssl_client_auth needs kafka.ssl_cafile (the CA that "
                              "signs client certificates)")
        try:
            parse_rules(k.ssl_principal_mapping_rules)
        except BadMappingRuleError as exc:
            raise ConfigError(f"kafka.ssl_principal_mapping_rules: {exc}") from exc
        unknown = set(k.sasl_mechanisms) - {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        if unknown or not k.sasl_mechanisms:
            raise ConfigError(f"kafka.sasl_mechanisms: unknown {sorted(unknown)} (PLAIN, "
                              "SCRAM-SHA-256, SCRAM-SHA-512)")
        if self.security.authorization not in ("auto", "on", "off"):
            raise ConfigError("security.authorization must be auto, on or off")
        for user in self.security.users:
            if not isinstance(user, dict) or not user.get("name") or "password" not in user:
                raise ConfigError("security.users entries need a name and a password")
        mechanism = self.security.inter_broker_mechanism
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ConfigError("security.inter_broker_mechanism must be PLAIN, SCRAM-SHA-256 "
                              "or SCRAM-SHA-512")
        if (self.security.inter_broker_user and k.security_protocol.startswith("SASL_")
                and mechanism not in k.sasl_mechanisms):
            raise ConfigError(f"security.inter_broker_mechanism {mechanism} is not one of "
                              "kafka.sasl_mechanisms: peers could not log in")

    def _validate_rocketmq_acl(self) -> None:
        from protocols.rocketmq.acl import AclConfigError, PlainAclValidator

        acl = self.rocketmq.acl
        try:
            PlainAclValidator.from_config(acl.accounts, acl.global_white_remote_addresses)
        except (AclConfigError, AttributeError, TypeError) as exc:
            raise ConfigError(f"rocketmq.acl: {exc}") from exc
        if acl.enabled and not acl.accounts and not acl.global_white_remote_addresses:
            raise ConfigError("rocketmq.acl.enabled needs accounts or "
                              "global_white_remote_addresses")

    @property
    def secured(self) -> bool:
        """Kafka authenticates (SASL) or authorizes: every other door must too."""
        protocol = self.kafka.security_protocol
        return protocol.startswith("SASL_") or self.security.authorization_enabled(protocol)

    @property
    def kafka_bind(self) -> tuple[str, int]:
        return parse_host_port(self.kafka.listener)

    @property
    def kafka_advertised(self) -> tuple[str, int]:
        host, port = self.kafka_bind
        adv_host = self.kafka.advertised_host or (
            "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        )
        return adv_host, self.kafka.advertised_port or port


def is_loopback(host: str) -> bool:
    """Does `host` name only this machine (127.0.0.0/8, ::1, localhost)?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
