"""Geo-replication: namespaces replicated between ledgerwire clusters (issue 19).

clusters.py (the other clusters, in the metadata store), batches.py (what crosses, sans-IO),
remote.py (a small Kafka client to a remote cluster), checkpoints.py (durable positions and
offset syncs), replicator.py (one partition to one remote, exactly once), offset_translation.py
(group offsets that follow), service.py (which replicators run, their status).

This room sits beside delivery: it uses topics, coordinator-free services and the cluster's
peer client; the Kafka and admin rooms above it call it, never the other way.
"""
