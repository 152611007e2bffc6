"""Secrets at rest: reading secret files with a permission check, owner-only data directories.

A secret file (a bookie secret, ZooKeeper credentials) that its group or other users can read
is still used, but logged as one WARNING at start-up, as ssh does for keys. Directories the
project creates for data (bookie data dirs, the embedded metadata store, a standalone's data
dir) are made owner-only (0700): the files in them (journals, entry logs, the embedded
metadata database with its SCRAM credentials) are then out of other users' reach whatever their
own mode.

This module must never log or return a secret in a message, and never loosen a permission.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_ONLY_DIR = 0o700


def is_exposed(path: Path) -> bool:
    """True when users other than the owner may read `path` (group or other read bits)."""
    return bool(path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))


def read_secret_file(path: Path | str, what: str) -> str:
    """The first line of a secret file, stripped. Warns (once per call) if it is readable by
    others; OSError if it cannot be read, ValueError if it is empty."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if is_exposed(path):
        log.warning("%s file %s is readable by other users (mode %03o); run: chmod 600 %s",
                    what, path, stat.S_IMODE(path.stat().st_mode), path)  # fmt: skip
    lines = text.splitlines()
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ValueError(f"{what} file {path} is empty")
    return secret


def make_private_dir(path: Path | str) -> Path:
    """Create `path` (and parents) if missing and make `path` itself owner-only (0700).

    An existing directory with wider permissions is tightened (the project's own data dir
    holds journals, ledgers and credentials); parents are left as they are.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=OWNER_ONLY_DIR)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, mode & ~0o077)
    return path

