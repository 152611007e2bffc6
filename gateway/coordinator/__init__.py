"""Coordinator state kept in the ledger store: committed offsets, transaction state, the compacted
JSON-record log under both, and the loading of coordinator partitions a broker owns. Serves
Kafka and RocketMQ alike; never imports their serving rooms.
"""
