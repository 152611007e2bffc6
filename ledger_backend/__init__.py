"""ledger_backend."""
