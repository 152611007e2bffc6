"""Two standalones on one host: the second cannot bind a port the first holds, and says which
address, which configuration setting and which flag to change (one line, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize(("clash", "setting", "flag"), [
    ("bookie_port", "[storage] bookie_port", "--bookie-port"),
    ("kafka_port", "[kafka] listener", "--kafka-listener"),
])
def test_second_standalone_names_the_busy_address(tmp_path: Path, clash: str, setting: str,
                                                  flag: str) -> None:
    first = Standalone(tmp_path / "first")
    first.start()
    try:
        second = Standalone(tmp_path / "second")
        setattr(second, clash, getattr(first, clash))
        try:
            second.start()  # may return early: the busy port does accept (the first's)
        except RuntimeError as exc:
            assert "standalone exited with 1" in str(exc)
        assert second.proc is not None
        assert second.proc.wait(timeout=120) == 1
        log = second.log()
        port = getattr(first, clash)
        assert f"127.0.0.1:{port}" in log
        assert "address already in use" in log
        assert setting in log and flag in log
        assert "Traceback" not in log
    finally:
        first.stop()
