"""Reading a ledgerwire configuration: the defaults (settings.py), then a TOML file, then
command-line flags, validated once all are in; and a warning when that file holds secrets
others may read.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

from gateway.config.settings import Config, ConfigError


def _apply_table(target: Any, table: dict[str, Any], where: str) -> None:
    names = {f.name: f for f in dataclasses.fields(target)}
    for key, value in table.items():
        attr = key.replace("-", "_")
        if attr not in names:
            raise ConfigError(f"unknown setting {where}{key}")
        current = getattr(target, attr)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}{key} must be a table")
            _apply_table(current, value, f"{where}{key}.")
        elif isinstance(current, Path):
            setattr(target, attr, Path(value))
        elif isinstance(current, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}{key} must be true or false")
            setattr(target, attr, value)
        elif isinstance(current, int | float) and not isinstance(value, int | float):
            raise ConfigError(f"{where}{key} must be a number")
        else:
            setattr(target, attr, type(current)(value))


def exposed_secrets_warning(config: Config, path: Path | None) -> str | None:
    """A warning when the TOML file holds secrets (a bookie secret, user passwords) and users
    other than its owner may read it; None when it holds none or is owner-only."""
    if path is None:
        return None
    holds = [name for name, present in (
        ("storage.bookie_secret", bool(config.storage.bookie_secret)),
        ("security.delegation_token_secret_key",
         bool(config.security.delegation_token_secret_key)),
        ("security.users passwords", bool(config.security.users)),
        ("rocketmq.acl accounts", bool(config.rocketmq.acl.accounts)),
        ("offload.secret_access_key", bool(config.offload.secret_access_key)),
    ) if present]  # fmt: skip
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return None
    if holds and mode & 0o044:
        return (f"config file {path} holds secrets ({', '.join(holds)}) and other users can "
                f"read it (mode {mode & 0o777:03o}); run: chmod 600 {path}")
    return None


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Build the configuration: defaults, then the TOML file, then flag overrides.

    `overrides` maps dotted names ("kafka.listener") to values; None values are skipped.
    """
    config = Config()
    if path is not None:
        try:
            table = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        _apply_table(config, table, "")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        nested: dict[str, Any] = {leaf: value}
        for parent in reversed(parents):
            nested = {parent: nested}
        _apply_table(config, nested, "")
    config.validate()
    return config
