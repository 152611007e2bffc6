"""`ledgerwire standalone`: broker, bookies and the embedded metadata store in one process."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import trio

from gateway.config.listen_errors import config_error_of
from gateway.config.loading import exposed_secrets_warning, load_config
from gateway.process.logging_setup import setup_logging

NAME = "standalone"
HELP = "broker, bookies and embedded metadata in one process"


def bool_flag(parser: argparse.ArgumentParser, name: str, dest: str, help_text: str) -> None:
    parser.add_argument(f"--{name}", dest=dest, action="store_true", default=None, help=help_text)
    parser.add_argument(f"--no-{name}", dest=dest, action="store_false", default=None)


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """Flags that override the TOML configuration (dest = the dotted setting name)."""
    p.add_argument("--config", type=Path, help="TOML configuration file")
    p.add_argument("--data-dir", dest="data_dir", help="data directory (default ./data)")
    p.add_argument("--cluster-name", dest="replication.cluster_name", metavar="NAME",
                   help="this cluster's name for geo-replication (default standalone)")
    p.add_argument(
        "--kafka-listener",
        dest="kafka.listener",
        metavar="HOST:PORT",
        help="Kafka listener (default 0.0.0.0:9092)",
    )
    p.add_argument("--advertised-host", dest="kafka.advertised_host", metavar="HOST")
    p.add_argument("--advertised-port", dest="kafka.advertised_port", type=int, metavar="N")
    p.add_argument(
        "--bookies", dest="storage.bookies", type=int, metavar="N", help="in-process bookies"
    )
    p.add_argument(
        "--bookie-port",
        dest="storage.bookie_port",
        type=int,
        metavar="N",
        help="first bookie's port (the others follow)",
    )
    p.add_argument(
        "--bookie-advertised-host",
        dest="storage.bookie_advertised_host",
        metavar="HOST",
        help="host the bookies register for readers on other hosts (default: the bind host)",
    )
    p.add_argument("--ensemble-size", dest="storage.ensemble_size", type=int, metavar="N")
    p.add_argument("--write-quorum", dest="storage.write_quorum", type=int, metavar="N")
    p.add_argument("--ack-quorum", dest="storage.ack_quorum", type=int, metavar="N")
    bool_flag(p, "fsync", "storage.fsync", "fsync the journal before acknowledging (default)")
    bool_flag(p, "auto-create-topics", "kafka.auto_create_topics", "create topics on first use")
    p.add_argument("--default-partitions", dest="kafka.default_partitions", type=int, metavar="N")
    p.add_argument("--retention-ms", dest="retention.retention_ms", type=int, metavar="N")
    p.add_argument("--retention-bytes", dest="retention.retention_bytes", type=int, metavar="N")
    p.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int,
        metavar="N",
        dest="kafka.group_initial_rebalance_delay_ms",
        help="wait for more members before a new group's first rebalance",
    )
    p.add_argument(
        "--group-consumer-session-timeout-ms",
        type=int,
        metavar="N",
        dest="kafka.group_consumer_session_timeout_ms",
        help="KIP-848 consumer groups: session timeout the server gives members",
    )
    p.add_argument(
        "--group-consumer-heartbeat-interval-ms",
        type=int,
        metavar="N",
        dest="kafka.group_consumer_heartbeat_interval_ms",
        help="KIP-848 consumer groups: heartbeat interval the server gives members",
    )
    p.add_argument(
        "--group-share-session-timeout-ms",
        type=int,
        metavar="N",
        dest="kafka.group_share_session_timeout_ms",
        help="KIP-932 share groups: a member silent this long is removed",
    )
    p.add_argument(
        "--group-share-heartbeat-interval-ms",
        type=int,
        metavar="N",
        dest="kafka.group_share_heartbeat_interval_ms",
        help="KIP-932 share groups: heartbeat interval the server gives members",
    )
    p.add_argument(
        "--offsets-retention-minutes",
        dest="kafka.offsets_retention_minutes",
        type=int,
        metavar="N",
        help="expire committed offsets of groups empty this long",
    )
    bool_flag(p, "rocketmq", "rocketmq.enabled", "serve the RocketMQ protocol (default)")
    p.add_argument(
        "--rocketmq-name-server-listener",
        dest="rocketmq.name_server_listener",
        metavar="HOST:PORT",
        help="RocketMQ name server (default 0.0.0.0:9876)",
    )
    p.add_argument(
        "--rocketmq-broker-listener",
        dest="rocketmq.broker_listener",
        metavar="HOST:PORT",
        help="RocketMQ broker (default 0.0.0.0:10911)",
    )
    p.add_argument(
        "--rocketmq-grpc-listener",
        dest="rocketmq.grpc_listener",
        metavar="HOST:PORT",
        help="RocketMQ 5 gRPC endpoint (default 0.0.0.0:8081; '' = off)",
    )
    p.add_argument(
        "--admin-listener",
        dest="admin.listener",
        metavar="HOST:PORT",
        help="admin API, console and /metrics (default 'auto': 0.0.0.0:8080 when "
             "authenticated, else 127.0.0.1:8080; '' = off)",
    )
    p.add_argument("--log-level", dest="log.level", metavar="LEVEL")
    p.add_argument("--log-format", dest="log.format", choices=["json", "text"])
    p.add_argument(
        "--security-protocol",
        dest="kafka.security_protocol",
        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
    )
    p.add_argument("--ssl-certfile", dest="kafka.ssl_certfile", metavar="PEM")
    p.add_argument("--ssl-keyfile", dest="kafka.ssl_keyfile", metavar="PEM")
    p.add_argument(
        "--bookie-secret-file",
        dest="storage.bookie_secret_file",
        metavar="PATH",
        help="the cluster's bookie secret (first line, >= 16 bytes, mode 0600): bookies "
             "authenticate every connection with it",
    )
    p.add_argument("--bookie-tls-certfile", dest="storage.bookie_tls_certfile", metavar="PEM",
                   help="TLS certificate bookies serve with and clients present")
    p.add_argument("--bookie-tls-keyfile", dest="storage.bookie_tls_keyfile", metavar="PEM")
    p.add_argument("--bookie-tls-cafile", dest="storage.bookie_tls_cafile", metavar="PEM",
                   help="CA that bookie (and client) certificates must be signed by")
    p.add_argument("--ledger-password-file", dest="storage.ledger_password_file", metavar="PATH",
                   help="password of the ledgers this broker creates (bookies check it)")
    bool_flag(p, "entry-mac", "storage.entry_mac", "new ledgers' entries carry an HMAC-SHA256 "
              "keyed from the ledger password, not a CRC (needs --ledger-password-file)")
    p.add_argument(
        "--users-file",
        dest="security.users_file",
        metavar="TOML",
        help="SASL users ([[users]] name, password, mechanisms) set at start",
    )


def config_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    overrides = {key: value for key, value in vars(args).items()
                 if "." in key or key in ("data_dir", "workers")}
    return load_config(args.config, overrides)


def warn_about_exposed_secrets(config, path: Path | None) -> None:  # type: ignore[no-untyped-def]
    """After logging is set up: one WARNING if the config file leaks secrets to other users."""
    warning = exposed_secrets_warning(config, path)
    if warning:
        logging.getLogger("ledgerwire").warning("%s", warning)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--workers", dest="workers", metavar="N|auto",
                        help="broker worker processes (default 1 = all in one process; "
                             "auto = one per core; gateway/process/supervisor.py)")


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    setup_logging(config.log.level, config.log.format)
    warn_about_exposed_secrets(config, args.config)
    from gateway.process.standalone import run_standalone

    if config.worker_count() > 1:
        from gateway.process.supervisor import run_supervisor

        return run_supervisor(config)
    try:
        trio.run(run_standalone, config)
    except KeyboardInterrupt:
        pass
    # also unreadable secrets or TLS files (ValueError)
    except (OSError, ValueError, BaseExceptionGroup) as exc:
        named = config_error_of(exc)  # a listener that could not bind says what to change
        if named is not None:
            logging.getLogger("ledgerwire").error("cannot start: %s", named)
            return 1
        if isinstance(exc, BaseExceptionGroup):
            raise
        logging.getLogger("ledgerwire").error("cannot start: %s", exc)
        return 1
    return 0
