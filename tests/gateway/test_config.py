"""Configuration precedence and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli.commands.standalone import config_from_args
from gateway.cli.main import build_parser
from gateway.config.loading import load_config
from gateway.config.settings import ConfigError, parse_host_port


def test_defaults_are_the_documented_ones() -> None:
    config = load_config(None)
    assert config.kafka_bind == ("0.0.0.0", 9092)
    assert config.kafka_advertised == ("127.0.0.1", 9092)
    assert (
        config.storage.ensemble_size,
        config.storage.write_quorum,
        config.storage.ack_quorum,
    ) == (1, 1, 1)
    assert config.storage.fsync is True


def test_flags_override_file_which_overrides_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "lw.toml"
    toml.write_text(
        'data_dir = "/srv/lw"\n[kafka]\nlistener = "127.0.0.1:19092"\ndefault_partitions = 4\n'
        "[storage]\nbookies = 3\nensemble_size = 3\nwrite_quorum = 2\nack_quorum = 2\n"
    )
    args = build_parser().parse_args(
        ["standalone", "--config", str(toml), "--default-partitions", "8", "--no-fsync"]
    )
    config = config_from_args(args)
    assert config.data_dir == Path("/srv/lw")
    assert config.kafka_bind == ("127.0.0.1", 19092)
    assert config.kafka.default_partitions == 8
    assert config.storage.bookies == 3 and config.storage.write_quorum == 2
    assert config.storage.fsync is False


def test_share_group_session_flags() -> None:
    """KIP-932's group.share.session.timeout.ms and heartbeat interval (default 45 s / 5 s)."""
    assert (load_config(None).kafka.group_share_session_timeout_ms,
            load_config(None).kafka.group_share_heartbeat_interval_ms) == (45000, 5000)
    args = build_parser().parse_args(["standalone", "--group-share-session-timeout-ms", "15000",
                                      "--group-share-heartbeat-interval-ms", "1000"])
    config = config_from_args(args)
    assert (config.kafka.group_share_session_timeout_ms,
            config.kafka.group_share_heartbeat_interval_ms) == (15000, 1000)


@pytest.mark.parametrize(
    "text",
    [
        "[storage]\nbookies = 1\nensemble_size = 2\n",  # E larger than the bookies available
        "[storage]\nwrite_quorum = 1\nack_quorum = 2\n",  # Qa > Qw
        "[kafka]\nunknown_setting = 1\n",
        '[kafka]\nauto_create_topics = "yes"\n',
        '[kafka]\nlistener = "nowhere"\n',
        '[kafka]\nssl_client_auth = "sometimes"\n',
        '[kafka]\nssl_client_auth = "required"\n',  # without ssl_cafile
        '[kafka]\nssl_principal_mapping_rules = ["RULE:no-slashes"]\n',
        "[storage]\njournal_preallocate_mb = -1\n",
    ],
)
def test_bad_configuration_is_refused(tmp_path: Path, text: str) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError):
        load_config(toml)


def test_parse_host_port_forms() -> None:
    assert parse_host_port("9092") == ("0.0.0.0", 9092)
    assert parse_host_port(":9093") == ("0.0.0.0", 9093)
    assert parse_host_port("[::1]:9094") == ("::1", 9094)
    with pytest.raises(ConfigError):
        parse_host_port("host:99999")


def test_secured_means_sasl_or_authorization(tmp_path: Path) -> None:
    """What makes RocketMQ demand signatures: Kafka SASL, or ACLs on (auto: any listener but
    PLAINTEXT)."""
    assert not load_config(None).secured
    for text, secured in [('[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\n', True),
                          ('[security]\nauthorization = "on"\n', True),
                          ('[security]\nauthorization = "off"\n', False)]:
        toml = tmp_path / "s.toml"
        toml.write_text(text)
        assert load_config(toml).secured is secured, text
    assert load_config(None).security.authorization_enabled("SSL")


def test_a_named_command_imports_only_its_own_module() -> None:
    """`ledgerwire standalone` does not import the Spark commands (a second of CPU at every
    start); with no command named, every command is offered."""
    import subprocess
    import sys

    probe = ("import sys; from gateway.cli.main import build_parser; "
             "build_parser(['standalone', '--help']); "
             "print(sorted(m for m in sys.modules if m.startswith('gateway.cli.commands.')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "['gateway.cli.commands.standalone']"
    offered = build_parser([]).format_help()
    assert all(name in offered for name in ("standalone", "backfill", "replay", "broker"))


def test_journal_preallocation_reaches_the_bookies(tmp_path: Path) -> None:
    """storage.journal_preallocate_mb (default 4, 0 = off) becomes each local bookie's
    journal_preallocate_bytes."""
    from gateway.process.local_bookies import bookie_storage_config

    assert bookie_storage_config(load_config(None), 0).journal_preallocate_bytes == 4 << 20
    toml = tmp_path / "lw.toml"
    toml.write_text("[storage]\njournal_preallocate_mb = 0\n")
    assert bookie_storage_config(load_config(toml), 0).journal_preallocate_bytes == 0
