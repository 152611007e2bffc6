"""protocols/rocketmq."""
