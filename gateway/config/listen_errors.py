"""A listener that cannot bind says which address, which setting and which flag to change.

`naming_listener(what, address, setting, flag)` wraps the start of one listener: an OSError
from binding (address in use, not available, no permission) becomes a `ListenAddressError`
(a ConfigError) whose message names them, e.g. for a second standalone on the same host:

    cannot listen on 0.0.0.0:3181 for the bookie: address already in use (another process,
    perhaps another ledgerwire standalone, has it); change [storage] bookie_port in the
    configuration file or pass --bookie-port

`config_error_of(exc)` finds such an error inside the exception groups Trio raises, so the
command can print that one line instead of a traceback.  This module must never bind or
retry anything itself.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.config.settings import ConfigError

_REASONS = {errno.EADDRINUSE: "address already in use (another process, perhaps another "
                              "ledgerwire standalone, has it)",
            errno.EADDRNOTAVAIL: "address not available on this host",
            errno.EACCES: "permission denied (ports below 1024 need privileges)"}


class ListenAddressError(ConfigError):
    """A listener's address cannot be bound; the message says what to change."""


@contextmanager
def naming_listener(what: str, address: str, setting: str, flag: str) -> Iterator[None]:
    """Turn a bind failure inside the block into a ListenAddressError naming `setting`
    ("section.key" of the configuration file) and the command-line `flag`."""
    try:
        yield
    except OSError as exc:
        reason = _REASONS.get(exc.errno or 0)
        if reason is None:
            raise
        section, _, key = setting.rpartition(".")
        where = f"[{section}] {key}" if section else key
        raise ListenAddressError(
            f"cannot listen on {address} for the {what}: {reason}; change {where} in the "
            f"configuration file or pass {flag}") from None


def config_error_of(exc: BaseException) -> ConfigError | None:
    """The first ConfigError in `exc` or its exception groups, if any."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = config_error_of(inner)
            if found is not None:
                return found
    return None
