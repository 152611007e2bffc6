"""Disk usage checks that turn the bookie read-only above a threshold, and back.

Above disk_usage_threshold the bookie becomes read-only (writes fail with BookieReadOnlyError,
reads keep working); above disk_usage_warn_threshold a warning is logged; the bookie becomes
writable again once usage falls below the warn threshold (hysteresis, so it does not flap).
The usage function is injectable for tests.  This module must never raise out of a check:
a failing usage probe is logged and leaves the state unchanged.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from .storage_api import DiskUsageFunction

log = logging.getLogger(__name__)


def filesystem_usage(path: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(path)
    return usage.used, usage.total


class DiskMonitor:
    def __init__(
        self,
        path: Path,
        *,
        threshold: float,
        warn_threshold: float,
        usage_function: DiskUsageFunction | None = None,
    ) -> None:
        self.path = path
        self.threshold = threshold
        self.warn_threshold = min(warn_threshold, threshold)
        self.usage_function = usage_function or filesystem_usage
        self.read_only = False

    def usage(self) -> tuple[int, int]:
        return self.usage_function(self.path)

    def check(self) -> bool:
        """Probe the disk once (blocking); return whether the bookie is now read-only."""
        try:
            used, total = self.usage()
        except OSError as exc:
            log.error("disk usage check of %s failed: %r", self.path, exc)
            return self.read_only
        fraction = used / total if total else 1.0
        if not self.read_only and fraction >= self.threshold:
            self.read_only = True
            log.error(
                "disk usage %.1f%% of %s is over the %.1f%% threshold: bookie is now read-only",
                fraction * 100,
                self.path,
                self.threshold * 100,
            )
        elif self.read_only and fraction < self.warn_threshold:
            self.read_only = False
            log.warning(
                "disk usage %.1f%% of %s is below %.1f%%: bookie is writable again",
                fraction * 100,
                self.path,
                self.warn_threshold * 100,
            )
        elif fraction >= self.warn_threshold:
            log.warning(
                "disk usage %.1f%% of %s is over the warn threshold %.1f%%",
                fraction * 100,
                self.path,
                self.warn_threshold * 100,
            )
        return self.read_only
