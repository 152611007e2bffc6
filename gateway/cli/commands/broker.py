"""`ledgerwire broker`: a cluster broker on a shared ZooKeeper
(gateway/process/cluster_broker.py)."""

from __future__ import annotations

import argparse
import logging

import trio

from gateway.cli.commands.standalone import (
    add_config_arguments,
    config_from_args,
    warn_about_exposed_secrets,
)
from gateway.config.settings import metadata_url_with_session_timeout
from gateway.process.logging_setup import setup_logging

NAME = "broker"
HELP = "one cluster broker: registers in ZooKeeper and serves the partitions it owns"


def add_cluster_layout_arguments(p: argparse.ArgumentParser) -> None:
    """What `cluster init` writes once (ignored when the cluster already exists)."""
    p.add_argument("--bundles", type=int, default=16, help="ownership bundles (default 16)")
    p.add_argument("--group-partitions", type=int, default=8,
                   help="group-coordinator partitions (default 8)")
    p.add_argument("--txn-partitions", type=int, default=8,
                   help="transaction-coordinator partitions (default 8)")
    p.add_argument("--cluster-id", default="ledgerwire-cluster")


def layout_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from gateway.cluster.broker_registry import ClusterLayout

    return ClusterLayout(args.cluster_id, args.bundles, args.group_partitions,
                         args.txn_partitions)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--metadata", required=True,
                        help="zk://host:port[,host:port]/chroot[?session_timeout_s=N]")
    parser.add_argument("--zk-session-timeout", dest="cluster.zk_session_timeout_s",
                        type=float, metavar="S",
                        help="ZooKeeper session timeout: how soon a dead broker's bundles move "
                             "(config [cluster] zk_session_timeout_s; default 10)")
    parser.add_argument("--handback-delay", dest="cluster.handback_delay_s", type=float,
                        metavar="S", help="seconds a (re)joined broker must be live before it "
                        "is handed its bundles (config [cluster] handback_delay_s; default 15)")
    parser.add_argument("--broker-id", dest="kafka.broker_id", type=int, required=True,
                        metavar="N", help="this broker's node id (unique in the cluster)")
    add_cluster_layout_arguments(parser)


CLUSTER_DEFAULT_QUORUMS = {"storage.ensemble_size": 3, "storage.write_quorum": 2,
                           "storage.ack_quorum": 2}


def run(args: argparse.Namespace) -> int:
    # Without a TOML file or quorum flags a cluster replicates 3/2/2 (standalone keeps 1/1/1).
    if args.config is None and all(getattr(args, k, None) is None
                                   for k in CLUSTER_DEFAULT_QUORUMS):
        for key, value in CLUSTER_DEFAULT_QUORUMS.items():
            setattr(args, key, value)
    # A broker runs no bookie of its own: storage.bookies only has to admit the quorums.
    ensemble = getattr(args, "storage.ensemble_size", None) or 1
    setattr(args, "storage.bookies", max(ensemble, 1) if getattr(args, "storage.bookies", None)
            is None else getattr(args, "storage.bookies"))
    config = config_from_args(args)
    setup_logging(config.log.level, config.log.format)
    warn_about_exposed_secrets(config, args.config)
    from gateway.process.cluster_broker import run_broker

    try:
        metadata = metadata_url_with_session_timeout(args.metadata,
                                                     config.cluster.zk_session_timeout_s)
        trio.run(run_broker, config, metadata, layout_from_args(args))
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError) as exc:  # also unreadable secrets or TLS files
        logging.getLogger("ledgerwire").error("cannot start: %s", exc)
        return 1
    return 0
