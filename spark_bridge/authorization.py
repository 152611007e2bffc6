"""Authorized reads and writes: a job that names a Kafka principal may read only the topics
that principal may READ, and a backfill write only a topic it may WRITE, decided by the
brokers' own authorizer (the cluster's users and ACLs), before Spark plans anything.

The options are those of Spark's Kafka source:
  kafka.bootstrap.servers                 the brokers to ask
  kafka.security.protocol                 SASL_PLAINTEXT or SASL_SSL turns the check on
  kafka.sasl.mechanism                    PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
  kafka.sasl.jaas.config                  `... required username="u" password="p";` (Java's
                                          form), or kafka.sasl.username / kafka.sasl.password
  other kafka.* options                   passed to the client (librdkafka names: ssl.*, ...)
The check logs in as the principal (a wrong password is refused there) and fetches at the end
of one partition of every topic the read resolved: the broker answers a principal without
READ (or DESCRIBE) on the topic with TOPIC_AUTHORIZATION_FAILED, exactly as it answers a Kafka
consumer, and the job ends with an AuthorizationError naming the principal and the topic.

Below the driver: with `ledgerwire.adminUrl` the executors read with a read ticket that a
broker issues for the principal's topics (read_tickets.py), never with the password (the data
source drops it before Spark ships it) nor the bookie secret; without it they read with
ledgerwire.bookieSecretFile, which reaches every topic. Streaming reads keep the principal.
Backfill writes: the executors' producers log in with a delegation token the driver obtains
for the principal (job_tokens.py, writer.py), never with the password.

This module must never log or put a password into an error message, and never consume records
(it asks for the end of a partition and stops at the first answer).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("spark_bridge.authorization")

_JAAS_FIELD = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class AuthorizationError(PermissionError):
    """The principal may not read a topic, or its login was refused; the message says which."""


@dataclass(frozen=True)
class ReadPrincipal:
    """Who the job reads as, and the client settings to log in with."""

    user: str
    client_config: tuple[tuple[str, str], ...]  # librdkafka settings, password included

    def __repr__(self) -> str:  # plans and logs may show this: never the password
        return f"ReadPrincipal(user={self.user!r})"


def read_principal(options: Mapping[str, str]) -> ReadPrincipal | None:
    """The principal the options name (None when kafka.security.protocol is not SASL);
    ValueError names a missing or malformed option."""
    lowered = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    protocol = lowered.get("kafka.security.protocol", "").strip().upper()
    if protocol not in _SASL_PROTOCOLS:
        return None
    bootstrap = lowered.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise ValueError("option 'kafka.bootstrap.servers' is required with "
                         f"kafka.security.protocol={protocol} (the brokers check the principal)")
    user = lowered.get("kafka.sasl.username")
    password = lowered.get("kafka.sasl.password")
    jaas = lowered.get("kafka.sasl.jaas.config")
    if jaas is not None:
        fields = {k: v.replace('\\"', '"') for k, v in _JAAS_FIELD.findall(jaas)}
        user = fields.get("username", user)
        password = fields.get("password", password)
    if not user or password is None:
        raise ValueError("options 'kafka.sasl.jaas.config' (username=\"...\" password=\"...\") "
                         "or 'kafka.sasl.username'/'kafka.sasl.password' are required with "
                         f"kafka.security.protocol={protocol}")
    config = {"bootstrap.servers": bootstrap, "security.protocol": protocol,
              "sasl.mechanism": lowered.get("kafka.sasl.mechanism", "PLAIN").upper(),
              "sasl.username": user, "sasl.password": password}  # fmt: skip
    skip = {"kafka.bootstrap.servers", "kafka.security.protocol", "kafka.sasl.mechanism",
            "kafka.sasl.jaas.config", "kafka.sasl.username", "kafka.sasl.password",
            "kafka.isolation.level"}  # fmt: skip
    for key, value in options.items():
        low = str(key).lower()
        if low.startswith("kafka.") and low not in skip:
            config[str(key)[len("kafka."):]] = str(value)
    return ReadPrincipal(user, tuple(sorted(config.items())))


def check_read_access(principal: ReadPrincipal, topics: list[str],
                      timeout_s: float = 30.0) -> None:  # fmt: skip
    """AuthorizationError unless `principal` logs in and may READ every topic (a Fetch at the
    end of partition 0 of each, answered by the brokers' authorizer); RuntimeError if the
    brokers do not answer within timeout_s."""
    from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

    refused: list[str] = []
    problems: list[str] = []  # the client's other errors, for the message if nothing answers

    def on_error(err: Any) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            refused.append(err.str())
        else:
            problems[:] = [err.str()]

    consumer = Consumer({**dict(principal.client_config),
                         "group.id": f"ledgerwire-authorize-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "error_cb": on_error, "logger": log,
                         "log_level": 0})  # failures come back through error_cb; fmt: skip
    who = f"User:{principal.user}"
    try:
        deadline = time.monotonic() + timeout_s
        metadata = None
        while metadata is None:
            consumer.poll(0.1)  # serves error_cb: a refused login is reported there
            if refused:
                raise AuthorizationError(f"the brokers refused the login of {who}: "
                                         f"{refused[0]}")
            try:
                metadata = consumer.list_topics(timeout=min(3.0, timeout_s))
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the brokers did not answer the authorization check "
                                       f"of {who} within {timeout_s:.0f} s: {exc}"
                                       + (f" ({problems[0]})" if problems else "")) from None
        for topic in topics:
            info = consumer.list_topics(topic, timeout=max(deadline - time.monotonic(), 0.1)
                                        ).topics.get(topic)  # fmt: skip
            if info is not None and info.error is not None and \
                    info.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:  # fmt: skip
                raise AuthorizationError(f"{who} may not read topic {topic!r} (no DESCRIBE "
                                         "or READ in the cluster's ACLs)")
            consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
            while True:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the brokers did not answer the authorization check "
                                       f"of {who} on {topic!r} within {timeout_s:.0f} s")
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                err = msg.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    break  # the broker served a fetch: READ is allowed
                if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise AuthorizationError(f"{who} may not read topic {topic!r} (no READ "
                                             "in the cluster's ACLs)")
            consumer.unassign()
    finally:
        consumer.close()


def check_write_access(principal: ReadPrincipal, topic: str, timeout_s: float = 30.0) -> None:
    """AuthorizationError unless `principal` logs in and may WRITE `topic`: the brokers list
    the principal's operations on the topic (Metadata's topic_authorized_operations, computed
    from their ACLs), so nothing is written to find out; RuntimeError if they do not answer."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    who = f"User:{principal.user}"
    settings: dict[str, Any] = {**dict(principal.client_config), "logger": log, "log_level": 0}
    admin = AdminClient(settings)
    future = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                   request_timeout=timeout_s)[topic]  # fmt: skip
    try:
        description = future.result(timeout=timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise AuthorizationError(f"{who} may not write topic {topic!r} (no DESCRIBE or "
                                     "WRITE in the cluster's ACLs)") from None
        if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            raise AuthorizationError(f"the brokers refused the login of {who}: "
                                     f"{err.str() if err else exc}") from None  # fmt: skip
        raise RuntimeError(f"the brokers did not answer the authorization check of {who} "
                           f"on {topic!r}: {err.str() if err else exc}") from None
    allowed = set(description.authorized_operations or ())
    if not allowed & {AclOperation.WRITE, AclOperation.ALL}:
        raise AuthorizationError(f"{who} may not write topic {topic!r} (no WRITE in the "
                                 "cluster's ACLs)")


__all__ = ["AuthorizationError", "ReadPrincipal", "check_read_access", "check_write_access",
           "read_principal"]
