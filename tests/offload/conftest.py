"""Fixtures shared by the offload tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.offload.test_offload_clients import start_server
from tests.support.standalone import Standalone


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Standalone]:
    """A standalone offloading to a directory, its passes an hour apart (tests run them)."""
    sa = start_server(tmp_path, 3600)
    try:
        yield sa
    finally:
        sa.stop()
