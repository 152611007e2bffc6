"""TLS on bookie connections (bookie/tls.py): ledger clients write and read through TLS-only
bookies; plaintext clients, clients that do not trust the bookie's certificate and, with a CA
file on the bookie, clients without a certificate get nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import assert_refused, running_bookies

SECRET = BookieSecret(b"tls-cluster-secret-0123456")


def _self_signed(directory: Path) -> BookieTls:
    """A certificate for localhost/127.0.0.1 that is its own CA."""
    directory.mkdir()
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return BookieTls(str(cert), str(key), str(cert))


async def _write_then_read(writer_tls: BookieTls, reader_tls: BookieTls | None,
                           bookie_tls: BookieTls, *, mutual: bool) -> list[bytes]:  # fmt: skip
    served = bookie_tls if mutual else BookieTls(bookie_tls.certfile, bookie_tls.keyfile)
    store = await open_store("memory:")
    async with running_bookies(store, 3, secret=SECRET,
                               ssl_context=served.server_context()) as _cluster, \
            BookKeeper(store, timeout_s=3, bookie_secret=SECRET,
                       bookie_tls=writer_tls) as bk:  # fmt: skip
        writer = await bk.create_ledger(3, 2, 2)
        for i in range(5):
            await writer.append(b"over tls %d" % i)
        async with BookKeeper(store, timeout_s=3, bookie_secret=SECRET,
                              bookie_tls=reader_tls) as reader_bk:  # fmt: skip
            reader = await reader_bk.open_ledger(writer.ledger_id, recovery=False)
            return await reader.read(0, reader.last_add_confirmed)


async def test_ledgers_work_over_tls_and_plaintext_clients_get_nothing(tmp_path: Path) -> None:
    tls = _self_signed(tmp_path / "pki")
    client = BookieTls(cafile=tls.cafile)  # trusts the bookies, presents no certificate
    got = await _write_then_read(client, client, tls, mutual=False)
    assert got[:4] == [b"over tls %d" % i for i in range(4)]
    await assert_refused(_write_then_read(client, None, tls, mutual=False))  # plaintext reader


async def test_a_client_that_does_not_trust_the_bookie_gets_nothing(tmp_path: Path) -> None:
    tls = _self_signed(tmp_path / "pki")
    stranger = _self_signed(tmp_path / "other")
    trusting, distrusting = BookieTls(cafile=tls.cafile), BookieTls(cafile=stranger.cafile)
    await assert_refused(_write_then_read(trusting, distrusting, tls, mutual=False))


async def test_mutual_tls_requires_a_client_certificate(tmp_path: Path) -> None:
    tls = _self_signed(tmp_path / "pki")
    got = await _write_then_read(tls, tls, tls, mutual=True)  # presents the CA's own cert
    assert got[0] == b"over tls 0"
    await assert_refused(_write_then_read(tls, BookieTls(cafile=tls.cafile), tls, mutual=True))


def test_tls_files_are_checked_up_front(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="both"):
        BookieTls(certfile=str(tmp_path / "c.pem"))
    with pytest.raises(ValueError, match="does not exist"):
        BookieTls(cafile=str(tmp_path / "missing.pem"))
    assert BookieTls().server_context() is None and BookieTls().client_context() is None
