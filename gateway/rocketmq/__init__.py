"""Serving RocketMQ 4.x: the listeners (name server and broker), the RocketMQ topic service
(delays, retries, transactions, subscription groups) and, in a cluster, one RocketMQ broker per
ownership bundle.
"""
