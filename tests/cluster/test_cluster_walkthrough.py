"""The cluster walkthrough of docs/cluster.md works as written (issue 24).

The ```bash block under "A cluster on one machine, step by step" is run verbatim with bash -e
(ZooKeeper, `cluster init`, three bookies, two brokers, a client producing and consuming): it
must finish with status 0 and print the consumed count, and `cluster status` must report the
missing spare bookie. It uses the walkthrough's fixed ports, so it runs in a private network
namespace (`unshare -rn`) when the machine allows one; $LW points it at a temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
HEADING = "## A cluster on one machine, step by step"


def walkthrough() -> str:
    guide = (REPO / "docs" / "cluster.md").read_text()
    section = guide.split(HEADING, 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match is not None, "no bash block under the walkthrough heading"
    return match.group(1)


def private_network() -> list[str]:
    """A prefix running a command in its own network namespace (loopback up), or [] if the
    machine does not allow one (the fixed ports may then clash with other processes)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"],
                           capture_output=True, timeout=30)
    return ["unshare", "-rn"] if probe.returncode == 0 else []


def test_cluster_walkthrough_runs_verbatim(tmp_path: Path) -> None:
    script = tmp_path / "walkthrough.sh"
    script.write_text(walkthrough())
    prefix = private_network()
    inner = f"ip link set lo up && exec bash -e {script}" if prefix else f"exec bash -e {script}"
    env = {**os.environ, "LW": str(tmp_path / "lw")}
    proc = subprocess.Popen([*prefix, "bash", "-c", inner], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=500)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the walkthrough did not finish:\n{out[-4000:]}\n{_logs(tmp_path)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the script left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"{out[-4000:]}\n{_logs(tmp_path)}"
    assert "consumed 10 messages" in out, out[-4000:]
    assert '"bookie_capacity"' in out and "no spare bookie" in out, out[-4000:]


def _logs(tmp_path: Path) -> str:
    parts = []
    for log in sorted((tmp_path / "lw").glob("*.log")):
        parts.append(f"===== {log.name}\n{log.read_text(errors='replace')[-2000:]}")
    return "\n".join(parts)
