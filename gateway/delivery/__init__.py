"""The per-record delivery engine: Kafka share groups and RocketMQ 5 SimpleConsumer on one core.

`delivery_state` is the pure state machine of one (group, topic, partition); `state_log`
persists it in the ledger store as snapshots plus deltas; `delivery_service` puts the two
together under Trio (clock, locks, long-poll wake-ups, lock expiry) for the protocol fronts.

Nothing here knows a wire protocol; the fronts map their calls onto this room.
"""
