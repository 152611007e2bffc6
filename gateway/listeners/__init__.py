"""What every TCP listener of the process shares (the Kafka and RocketMQ 4.x listeners): the
accept loop."""
