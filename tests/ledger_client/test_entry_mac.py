"""MAC digests on entries (BookKeeper's MAC digest type, client/entry_format.py version 2): a
ledger created with a password and entry_mac signs each entry with an HMAC-SHA256 under a key
that bookies never see, so whoever holds a bookie (its master key, its disk) cannot forge an
entry a reader or a recovery accepts; readers without the password are told why they cannot
read; CRC ledgers are unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_backend.bookie.master_key import derive_mac_key, derive_master_key
from ledger_backend.bookie.protocol import AddEntryRequest, Status
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.entry_format import decode_entry, encode_entry
from ledger_backend.client.errors import DigestMismatchError, LedgerRecoveryError
from ledger_backend.client.ledger_metadata import DIGEST_TYPE_HMAC_SHA256
from tests.ledger_client.test_ledger_passwords import PASSWORD, _status, password_ledger

KEY = derive_mac_key(PASSWORD, "00" * 16)


def test_a_mac_entry_reads_only_with_its_key() -> None:
    body = encode_entry(7, 3, 2, 100, b"payload", mac_key=KEY)
    entry = decode_entry(body, ledger_id=7, entry_id=3, mac_key=KEY)
    assert (entry.payload, entry.lac, entry.ledger_length) == (b"payload", 2, 100)
    with pytest.raises(DigestMismatchError, match="MAC mismatch"):
        decode_entry(body, ledger_id=7, entry_id=3, mac_key=derive_mac_key(b"guess", "00" * 16))
    with pytest.raises(DigestMismatchError, match="no ledger password"):
        decode_entry(body, ledger_id=7, entry_id=3)
    crc = encode_entry(7, 3, 2, 100, b"payload")
    with pytest.raises(DigestMismatchError, match="requires a MAC"):  # no downgrade to a CRC
        decode_entry(crc, ledger_id=7, entry_id=3, mac_key=KEY)
    with pytest.raises(DigestMismatchError, match="got ledger 7 entry 3"):
        decode_entry(body, ledger_id=7, entry_id=4, mac_key=KEY)
    # the MAC key is not the master key a bookie sees with every add
    assert KEY != derive_master_key(PASSWORD, "00" * 16)


@given(payload=st.binary(max_size=200), data=st.data())
def test_any_changed_byte_is_caught(payload: bytes, data: st.DataObject) -> None:
    body = bytearray(encode_entry(5, 9, 8, 77, payload, mac_key=KEY))
    index = data.draw(st.integers(0, len(body) - 1))
    body[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(DigestMismatchError):
        decode_entry(bytes(body), ledger_id=5, entry_id=9, mac_key=KEY)
    with pytest.raises(DigestMismatchError):
        decode_entry(bytes(body[:-1]), ledger_id=5, entry_id=9, mac_key=KEY)


async def test_a_bookie_cannot_forge_an_entry_into_a_mac_ledger() -> None:
    async with password_ledger(3, (3, 3, 2), 5, entry_mac=True) as (store, cluster, _, writer):
        lid = writer.ledger_id
        assert writer.metadata.digest_type == DIGEST_TYPE_HMAC_SHA256
        salt = writer.metadata.password_salt
        master = derive_master_key(PASSWORD, salt)  # what every bookie of the ledger sees
        # whoever holds the bookies appends entry 5 everywhere, as a CRC entry and as one
        # "signed" with the master key: both well-formed, both taken by the bookies
        for number, bookie in enumerate(sorted(cluster.bookies)):
            forged = (encode_entry(lid, 5, 4, 999, b"forged") if number % 2 else
                      encode_entry(lid, 5, 4, 999, b"forged", mac_key=master))
            assert await _status(bookie, AddEntryRequest(1, lid, 5, 4, True, forged,
                                                         master)) is Status.OK  # fmt: skip
        async with BookKeeper(store, timeout_s=2, ledger_password=PASSWORD) as recoverer:
            # recovery does not adopt the forged entry (it did with CRCs): entry 5 has no
            # valid copy and no bookie says it is absent, so the ledger is not closed at all
            with pytest.raises(LedgerRecoveryError, match="entry 5") as refused:
                await recoverer.open_ledger(lid, recovery=True)
            assert "MAC mismatch" in str(refused.value)
            assert "carries a CRC where the ledger's metadata requires a MAC" in str(refused.value)
            reader = await recoverer.open_ledger(lid, recovery=False)
            assert await reader.read(0, reader.last_add_confirmed) == [
                b"entry-%d" % i for i in range(reader.last_add_confirmed + 1)]


async def test_readers_without_the_password_are_told_why() -> None:
    async with password_ledger(1, (1, 1, 1), 3, entry_mac=True) as (store, _, bk, writer):
        await writer.close()
        async with BookKeeper(store, timeout_s=2) as keyless:
            reader = await keyless.open_ledger(writer.ledger_id, recovery=False)
            with pytest.raises(DigestMismatchError, match="needs the ledger password"):
                await reader.read(0, 2)
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(0, 2) == [b"entry-0", b"entry-1", b"entry-2"]


async def test_re_replication_keeps_the_macs() -> None:
    from ledger_backend.autorecovery.fragment_copy import replicate_ledger

    async with password_ledger(4, (3, 2, 2), 20, entry_mac=True) as (store, cluster, bk, writer):
        await writer.close()
        lost = writer.metadata.current_ensemble[0]
        await cluster.stop_bookie(lost)
        outcome = await replicate_ledger(bk, writer.ledger_id, {lost}, fence_open=True)
        assert outcome.complete and outcome.entries_copied > 0
        reader = await bk.open_ledger(writer.ledger_id, recovery=False)
        assert await reader.read(0, 19) == [b"entry-%d" % i for i in range(20)]


def test_entry_mac_needs_a_password() -> None:
    with pytest.raises(ValueError, match="ledger password"):
        BookKeeper(None, entry_mac=True)  # type: ignore[arg-type]
