"""ledger_backend/client: the BookKeeper-style ledger client.

`bookkeeper.BookKeeper` (create/open/recover/delete ledgers) with `write_handle.WriteHandle`
and `read_handle.ReadHandle`; `memory.MemoryBookKeeper` is the in-memory twin for tests.
Underneath: `ledger_metadata` (the versioned JSON record and its paths), `entry_format` (the
per-entry header and CRC-32C digest), `bookie_client` (pipelined connections), `placement`
(ensemble choice), `recovery` (fence, recover, close) and `errors` (one LedgerError root).
This package must never import gateway/ or protocols/.
"""
