"""ledger_backend/bookie."""
