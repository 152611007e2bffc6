"""TLS on bookie connections (BookKeeper's TLS option), beside or instead of the shared secret.

One set of files per process, as BookKeeper configures it: a certificate and key (a bookie
presents them as a server, a ledger client as its client certificate) and a CA file (a bookie
then requires client certificates signed by it; a ledger client verifies the bookie's
certificate and host name against it). TLS 1.2 is the minimum. A bookie with TLS accepts no
plaintext connection; a client with a CA file connects to bookies over TLS only.

With TLS the bookie secret's handshake (auth.py) runs inside the tunnel, and entries cannot be
read or injected on the wire. This module must never build a context that skips verification.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BookieTls:
    """Certificate, key and CA files of one process (any may be empty)."""

    certfile: str = ""
    keyfile: str = ""
    cafile: str = ""

    def __post_init__(self) -> None:
        if bool(self.certfile) != bool(self.keyfile):
            raise ValueError("bookie TLS needs both a certificate file and a key file")
        for name in (self.certfile, self.keyfile, self.cafile):
            if name and not Path(name).is_file():
                raise ValueError(f"bookie TLS file {name} does not exist")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BookieTls | None:
        tls = cls(args.bookie_tls_certfile or "", args.bookie_tls_keyfile or "",
                  args.bookie_tls_cafile or "")  # fmt: skip
        return tls if tls.certfile or tls.cafile else None

    def server_context(self) -> ssl.SSLContext | None:
        """What a bookie serves with (None without a certificate: plaintext)."""
        if not self.certfile:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certfile, self.keyfile)
        if self.cafile:
            context.load_verify_locations(self.cafile)
            context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
        return context

    def client_context(self) -> ssl.SSLContext | None:
        """What a ledger client connects with (None without a CA file: plaintext)."""
        if not self.cafile:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        return context


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """--bookie-tls-certfile/keyfile/cafile (dest bookie_tls_*)."""
    parser.add_argument("--bookie-tls-certfile", metavar="PEM",
                        help="certificate a bookie serves with / a client presents")
    parser.add_argument("--bookie-tls-keyfile", metavar="PEM")
    parser.add_argument("--bookie-tls-cafile", metavar="PEM",
                        help="CA that bookie certificates (and client certificates, on a "
                             "bookie) must be signed by")
