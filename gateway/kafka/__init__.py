"""Serving Kafka: the listener (one task per connection), the broker (request dispatch over
protocols/kafka's handlers) and the cluster's transaction-marker plumbing.
"""
