"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standalone import Standalone


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A running `ledgerwire standalone` subprocess with its own data dir and ports."""
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def module_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One `ledgerwire standalone` shared by the tests of a module (they use distinct topics)."""
    server = Standalone(tmp_path_factory.mktemp("standalone") / "data")
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
