"""`ledgerwire bookie` reaches every storage setting a standalone's bookies take: from the
[storage] table of --config, each overridden by its flag, with the standalone's defaults when
neither is given.  Before, a separate bookie ran the engine's own defaults whatever it was told
(no flag for journal_preallocate_mb or the caches; its write cache 64 MiB, a standalone's 256)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from gateway.cli.commands.bookie import apply_storage_config
from gateway.cli.main import build_parser
from gateway.config.bookie_storage import ENGINE_SETTINGS, bookie_engine_config
from gateway.config.loading import load_config
from gateway.config.settings import ConfigError, StorageConfig
from gateway.process.local_bookies import bookie_storage_config

# [storage] settings that are not a bookie's storage engine's, and where they go instead
NOT_THE_ENGINE = {
    # the standalone's own bookies: how many, on which ports, where workers run them
    "bookies", "bookie_host", "bookie_port", "worker_bookies", "bookie_advertised_host",
    # a broker's: how it writes ledgers and keeps partitions open
    "ensemble_size", "write_quorum", "ack_quorum", "max_entries_per_ledger", "max_ledger_mb",
    "max_ledger_age_s", "partition_idle_unload_s", "max_open_partitions", "entry_mac",
    # fsync (--unsafe-no-fsync or [storage] fsync) and the security files: checked below
    "fsync", "bookie_secret", "bookie_secret_file", "bookie_tls_certfile", "bookie_tls_keyfile",
    "bookie_tls_cafile", "ledger_password_file",
}


def bookie_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    argv = ["bookie", "--metadata", "zk://127.0.0.1:2181/lw", "--data-dir",
            str(tmp_path / "bookie"), *extra]
    args = build_parser(argv).parse_args(argv)
    apply_storage_config(args)
    return args


def test_every_storage_setting_is_the_engines_or_placed_elsewhere() -> None:
    """A setting added to [storage] must be decided on here: the engine's (and so a flag of
    `ledgerwire bookie`), or one of the others."""
    fields = {f.name for f in dataclasses.fields(StorageConfig)}
    assert fields == set(ENGINE_SETTINGS) | NOT_THE_ENGINE
    assert not set(ENGINE_SETTINGS) & NOT_THE_ENGINE


def test_without_settings_a_bookie_runs_a_standalones_defaults(tmp_path: Path) -> None:
    args = bookie_args(tmp_path)
    expected = dataclasses.replace(bookie_storage_config(load_config(None), 0),
                                   data_dir=tmp_path / "bookie")
    assert args.storage_config == expected
    assert expected.write_cache_bytes == 256 << 20  # not the engine's own 64 MiB


def test_each_engine_setting_has_a_flag_that_wins_over_the_file(tmp_path: Path) -> None:
    defaults = StorageConfig()
    toml = tmp_path / "lw.toml"
    # the file sets every engine setting to one more than its default...
    toml.write_text("[storage]\n" + "".join(
        f"{name} = {getattr(defaults, name) + 1}\n" for name in ENGINE_SETTINGS))
    from_file = bookie_args(tmp_path, "--config", str(toml))
    want = dataclasses.replace(defaults, **{n: getattr(defaults, n) + 1 for n in ENGINE_SETTINGS})
    assert from_file.storage_config == bookie_engine_config(
        want, tmp_path / "bookie")
    # ...and each flag sets it to two more
    flags = [x for name in ENGINE_SETTINGS
             for x in (f"--{name.replace('_', '-')}", str(getattr(defaults, name) + 2))]
    from_flags = bookie_args(tmp_path, "--config", str(toml), *flags)
    want = dataclasses.replace(defaults, **{n: getattr(defaults, n) + 2 for n in ENGINE_SETTINGS})
    assert from_flags.storage_config == bookie_engine_config(
        want, tmp_path / "bookie")


def test_journal_preallocation_can_be_turned_off(tmp_path: Path) -> None:
    args = bookie_args(tmp_path, "--journal-preallocate-mb", "0")
    assert args.storage_config.journal_preallocate_bytes == 0


def test_fsync_and_the_security_files_come_from_the_file_unless_flagged(tmp_path: Path) -> None:
    toml = tmp_path / "lw.toml"
    toml.write_text('[storage]\nfsync = false\nbookie_secret_file = "/etc/lw/secret"\n'
                    'bookie_tls_certfile = "/etc/lw/cert.pem"\n'
                    'bookie_tls_keyfile = "/etc/lw/key.pem"\n'
                    'ledger_password_file = "/etc/lw/ledgers"\n')
    args = bookie_args(tmp_path, "--config", str(toml),
                       "--bookie-tls-certfile", "/flag/cert.pem")
    assert args.storage_config.fsync is False
    assert str(args.bookie_secret_file) == "/etc/lw/secret"
    assert args.bookie_tls_certfile == "/flag/cert.pem"
    assert args.bookie_tls_keyfile == "/etc/lw/key.pem"
    assert str(args.ledger_password_file) == "/etc/lw/ledgers"
    assert bookie_args(tmp_path, "--unsafe-no-fsync").storage_config.fsync is False


def test_a_bad_value_is_a_config_error(tmp_path: Path) -> None:
    toml = tmp_path / "lw.toml"
    toml.write_text('[storage]\nwrite_cache_mb = "lots"\n')
    with pytest.raises(ConfigError):
        bookie_args(tmp_path, "--config", str(toml))
