"""Shared helpers for ledgerwire tests: real external parts (a ZooKeeper server, ...).

Helpers here start and stop real processes for integration tests; they must never mock a part
that the test claims to exercise.
"""
