"""Auto-recovery: an elected auditor finds ledgers with copies on lost bookies; replication
workers copy those fragments to healthy bookies and CAS the new ensembles into the metadata.

Modules: under_replication.py (the metadata layout and locks), fragment_copy.py (re-replicating
one ledger), auditor.py (election and audits), replication_worker.py (the workers' loop).
"""
