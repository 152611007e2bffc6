"""Topics and their partitions on managed ledgers: the topic service, one partition's log (reads,
timestamps, producer state, offset index, tail cache), namespaces and their policies, retention,
backlog quotas and per-topic quorums. Never imports the serving rooms (kafka/, rocketmq/,
admin/).
"""
