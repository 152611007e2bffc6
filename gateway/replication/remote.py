"""A small Kafka client to another cluster: what a replicator asks of its remote.

Built on gateway/cluster/peer_client.py (the project's own codec, connection pool, TLS and SASL
login), not on confluent-kafka: that is a test dependency only, and its producer hides what a
replicator must control itself (which produce is acknowledged, the exact remote offset of each
batch for the offset syncs, a new producer id after any doubt).  Requests go to the registered
bootstrap broker (of those registered, the first that answers: one that does not is passed over
until the others fail too); a remote that answers NOT_LEADER_OR_FOLLOWER for a partition is
asked for its metadata and the partition's leader gets the next request.

Produce goes through a `ProducePipeline`: one connection of its own to the partition's leader
with up to `MAX_IN_FLIGHT` requests and `MAX_IN_FLIGHT_BYTES` on it (the idempotent sequence
numbers let the remote apply them in order and refuse a gap); the answers come back in request
order and are matched by correlation id.  Kafka's producers keep at most 5 in flight because a
broker remembers only a producer's last 5 batches to recognise a *retry*; a replicator never
retries a batch in a session (any failed answer ends it, and the next session finds what landed
by scanning the remote), so that cache does not bound it, and a late batch of an earlier session
is refused by its sequence number whatever the count.

Each call raises `RemoteError` (retriable: the caller backs off and starts a new session) or
returns the decoded answer.  This module must never retry on its own, nor log a password.
"""

from __future__ import annotations

from typing import Any

import trio

from gateway.cluster.peer_client import PeerClient, PeerConnection, PeerSecurity
from gateway.replication.clusters import RemoteCluster
from protocols.kafka.errors import ErrorCode, KafkaProtocolError

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, CREATE_TOPICS, INIT_PRODUCER_ID = (
    0, 1, 2, 3, 8, 19, 22)
DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 37, 44
RESOURCE_TOPIC = 2
SOURCE_DYNAMIC_TOPIC = 1  # a config set on the topic itself (not a default)
CONFIG_SET, CONFIG_DELETE = 0, 1
REMOTE_TIMEOUT_S = 30.0
EARLIEST, LATEST = -2, -1
PUSHED_METADATA = "lw.replication"  # the metadata of group offsets a replicator committed
# produce requests in flight per partition, and their bytes (at least one request): each
# answer waits a journal fsync and both processes' turns on the CPU, so 5 stored 128 KiB batches
# a round trip bound a partition's rate on a loaded machine (see the module doc for why more
# than Kafka's 5 is safe here)
MAX_IN_FLIGHT = 16
MAX_IN_FLIGHT_BYTES = 4 << 20
PROBE_INTERVAL_S = 0.1  # how often a remote that takes no connection is tried meanwhile
PROBE_TIMEOUT_S = 1.0
PRODUCE_VERSION = 7


class RemoteError(Exception):
    """The remote cluster did not do what was asked (unreachable, refused, an error code)."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


def _check(code: int, what: str) -> None:
    if code:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = str(code)
        raise RemoteError(f"{what}: {name}", code)


class RemoteKafka:
    """Requests to one remote cluster (see the module docstring)."""

    def __init__(self, cluster: RemoteCluster, client_id: str) -> None:
        self.cluster = cluster
        security = PeerSecurity(cluster.ssl_context(), cluster.sasl_mechanism or None,
                                cluster.sasl_user, cluster.sasl_password)
        self._peers = PeerClient(client_id, REMOTE_TIMEOUT_S, security, max_connections=8)
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}
        self._bootstrap = 0  # index of the bootstrap broker that answered last
        self._back = trio.Event()  # set when a probe finds the remote accepting again
        self._probing = False  # one replicator probes for all

    async def aclose(self) -> None:
        await self._peers.aclose()

    def _bootstraps(self) -> list[tuple[str, int]]:
        """The bootstrap brokers, the one that answered last first."""
        listed = self.cluster.bootstraps
        start = self._bootstrap % len(listed)
        return listed[start:] + listed[:start]

    async def _call(self, api_key: int, version: int, body: dict[str, Any],
                    to: tuple[str, int] | None = None) -> dict[str, Any]:
        if to is not None:
            return await self._call_one(to, api_key, version, body)
        listed = self._bootstraps()
        for i, address in enumerate(listed):
            try:
                answer = await self._call_one(address, api_key, version, body)
            except RemoteError:
                if i == len(listed) - 1:
                    raise
                continue
            self._bootstrap = self.cluster.bootstraps.index(address)
            return answer
        raise AssertionError("unreachable")

    async def _call_one(self, address: tuple[str, int], api_key: int, version: int,
                        body: dict[str, Any]) -> dict[str, Any]:
        host, port = address
        try:
            return await self._peers.request(host, port, api_key, version, body)
        except (KafkaProtocolError, OSError) as exc:
            raise RemoteError(f"cluster {self.cluster.name} ({host}:{port}): {exc}") from None

    async def _accepts(self) -> bool:
        """Whether a bootstrap broker takes a TCP connection (nothing is sent on it)."""
        for host, port in self._bootstraps():
            with trio.move_on_after(PROBE_TIMEOUT_S):
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError:
                    continue
                await stream.aclose()
                return True
        return False

    async def pause_after_failure(self, delay_s: float) -> None:
        """A replicator's back-off after a failed session: `delay_s`, or less once a remote
        that took no connection takes one again (one replicator probes every
        `PROBE_INTERVAL_S` for all of this remote's replicators), so a remote that comes back
        is used at once, not after each replicator's back-off."""
        with trio.move_on_after(delay_s):
            if await self._accepts():  # it is there: the failure was another one
                await trio.sleep_forever()
            if self._back.is_set():
                self._back = trio.Event()
            back = self._back
            if self._probing:
                await back.wait()
                return
            self._probing = True
            try:
                while True:
                    if await self._accepts():
                        back.set()
                        return
                    await trio.sleep(PROBE_INTERVAL_S)
            finally:
                self._probing = False

    def _leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        return self._leaders.get((topic, partition))

    def forget_topic(self, topic: str) -> None:
        """Drop the leaders known for a topic no longer replicated from here."""
        for key in [k for k in self._leaders if k[0] == topic]:
            del self._leaders[key]

    async def metadata(self, topic: str) -> dict[str, Any] | None:
        """The topic's metadata (None: it does not exist there); remembers the leaders."""
        answer = await self._call(METADATA, 8, {
            "topics": [{"name": topic}], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        for t in answer["topics"]:
            if t["name"] != topic:
                continue
            if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return None
            _check(t["error_code"], f"metadata of {topic}")
            for p in t["partitions"]:
                if p["leader_id"] in brokers:
                    self._leaders[(topic, p["partition_index"])] = brokers[p["leader_id"]]
            return dict(t)
        return None

    async def ensure_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> int:
        """Create the topic there with this partition count and configs unless it exists;
        return its partition count there."""
        meta = await self.metadata(topic)
        if meta is None:
            answer = await self._call(CREATE_TOPICS, 4, {
                "topics": [{"name": topic, "num_partitions": partitions,
                            "replication_factor": -1, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": 30000, "validate_only": False})
            for t in answer["topics"]:
                if t["error_code"] != ErrorCode.TOPIC_ALREADY_EXISTS:
                    _check(t["error_code"], f"creating {topic} ({t.get('error_message')})")
            meta = await self.metadata(topic)
            if meta is None:
                raise RemoteError(f"cluster {self.cluster.name}: topic {topic} not created")
        count = len(meta["partitions"])
        if count < partitions:  # partitions were added here: add them there too
            answer = await self._call(CREATE_PARTITIONS, 1, {
                "topics": [{"name": topic, "count": partitions, "assignments": None}],
                "timeout_ms": 30000, "validate_only": False})
            for t in answer["results"]:
                if t["error_code"] != ErrorCode.INVALID_PARTITIONS:  # another one was first
                    _check(t["error_code"], f"adding partitions to {topic} "
                           f"({t.get('error_message')})")
            meta = await self.metadata(topic)
            count = len(meta["partitions"]) if meta is not None else count
        return count

    async def topic_configs(self, topic: str) -> dict[str, str]:
        """The configs set on the topic there (defaults left out)."""
        answer = await self._call(DESCRIBE_CONFIGS, 1, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic,
                           "configuration_keys": None}], "include_synonyms": False})
        result = answer["results"][0]
        _check(result["error_code"], f"configs of {topic}")
        return {c["name"]: c["value"] for c in result["configs"]
                if c.get("config_source") == SOURCE_DYNAMIC_TOPIC and c["value"] is not None}

    async def alter_topic_configs(self, topic: str, changes: dict[str, str | None]) -> None:
        """Set (a value) or remove (None) these configs of the topic there."""
        answer = await self._call(INCREMENTAL_ALTER_CONFIGS, 0, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic,
                           "configs": [{"name": k, "value": v,
                                        "config_operation": CONFIG_DELETE if v is None
                                        else CONFIG_SET} for k, v in sorted(changes.items())]}],
            "validate_only": False})
        result = answer["responses"][0]
        _check(result["error_code"], f"altering configs of {topic} "
               f"({result.get('error_message')})")

    async def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch."""
        answer = await self._call(INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                         "transaction_timeout_ms": 60000})
        _check(answer["error_code"], "InitProducerId")
        return int(answer["producer_id"]), int(answer["producer_epoch"])

    async def produce(self, topic: str, partition: int, batch: bytes) -> int:
        """Append one batch with acks=all; its base offset there."""
        answer = await self._call(PRODUCE, PRODUCE_VERSION, _produce_body(topic, partition, batch),
                                  self._leader(topic, partition))
        return self.base_offset_of(topic, partition, answer)

    def base_offset_of(self, topic: str, partition: int, answer: dict[str, Any]) -> int:
        """The base offset a Produce answer gives the batch (its error raised; a partition that
        moved is looked up again before the next request)."""
        part = answer["responses"][0]["partition_responses"][0]
        if part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            self._leaders.pop((topic, partition), None)
        _check(part["error_code"], f"produce to {topic}-{partition}")
        return int(part["base_offset"])

    async def open_pipeline(self, topic: str, partition: int) -> ProducePipeline:
        """A produce pipeline to the partition's leader (the bootstrap broker if not known)."""
        host, port = self._leader(topic, partition) or self._bootstraps()[0]
        try:
            connection = await self._peers.open_connection(host, port)
        except (KafkaProtocolError, OSError, trio.TooSlowError) as exc:
            raise RemoteError(f"cluster {self.cluster.name} ({host}:{port}): "
                              f"{exc or type(exc).__name__}") from None
        return ProducePipeline(self, connection, topic, partition)

    async def fetch(self, topic: str, partition: int, offset: int,
                    max_bytes: int = 4 << 20) -> tuple[bytes, int]:
        """(records blob from `offset`, high watermark); OFFSET_OUT_OF_RANGE raises."""
        answer = await self._call(FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}, self._leader(topic, partition))
        part = answer["responses"][0]["partitions"][0]
        _check(part["error_code"], f"fetch of {topic}-{partition} at {offset}")
        return bytes(part["records"] or b""), int(part["high_watermark"])

    async def list_offset(self, topic: str, partition: int, timestamp: int = EARLIEST) -> int:
        answer = await self._call(LIST_OFFSETS, 4, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1,
                 "timestamp": timestamp}]}]}, self._leader(topic, partition))
        part = answer["topics"][0]["partitions"][0]
        _check(part["error_code"], f"list offsets of {topic}-{partition}")
        return int(part["offset"])

    async def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> dict[
            int, int]:
        """Commit a group's offsets there as an admin commit (generation -1: only a group with no
        live members takes it); partition -> error code."""
        answer = await self._call(OFFSET_COMMIT, 7, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                 "committed_metadata": PUSHED_METADATA} for p, o in sorted(offsets.items())]}]})
        return {int(p["partition_index"]): int(p["error_code"])
                for t in answer["topics"] for p in t["partitions"]}


def _produce_body(topic: str, partition: int, batch: bytes) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": int(REMOTE_TIMEOUT_S * 1000),
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": batch}]}]}


class ProducePipeline:
    """Produce requests to one remote partition, up to `MAX_IN_FLIGHT` on one connection.

    `send` writes a batch (the caller keeps at most MAX_IN_FLIGHT unanswered); `receive` waits
    for the answer to the oldest one and returns its base offset there.  Each has the remote
    timeout; any failure raises `RemoteError` and leaves the pipeline unusable (close it: the
    batches still in flight are in doubt, which the replicator's next session settles).
    """

    def __init__(self, remote: RemoteKafka, connection: PeerConnection, topic: str,
                 partition: int) -> None:
        self._remote = remote
        self._connection = connection
        self.topic = topic
        self.partition = partition

    @property
    def in_flight(self) -> int:
        return self._connection.in_flight

    def _failed(self, exc: BaseException) -> RemoteError:
        host, port = self._connection.address
        return RemoteError(f"cluster {self._remote.cluster.name} ({host}:{port}): produce to "
                           f"{self.topic}-{self.partition}: {exc!r}")

    async def send(self, batch: bytes) -> None:
        try:
            with trio.fail_after(REMOTE_TIMEOUT_S):
                await self._connection.send(PRODUCE, PRODUCE_VERSION,
                                            _produce_body(self.topic, self.partition, batch))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio.TooSlowError) as exc:
            raise self._failed(exc) from None

    async def receive(self) -> int:
        try:
            with trio.fail_after(REMOTE_TIMEOUT_S):
                _, answer = await self._connection.receive()
        except (OSError, EOFError, KafkaProtocolError, trio.BrokenResourceError,
                trio.ClosedResourceError, trio.TooSlowError) as exc:
            raise self._failed(exc) from None
        return self._remote.base_offset_of(self.topic, self.partition, answer)

    async def aclose(self) -> None:
        await self._connection.aclose()


class InFlightWindow:
    """Room for produce requests in flight: at most `MAX_IN_FLIGHT` requests and
    `MAX_IN_FLIGHT_BYTES` of batches, but always one (a batch larger than the byte budget goes
    alone).  One task reserves before each send, the one taking the answers releases."""

    def __init__(self, max_requests: int = MAX_IN_FLIGHT,
                 max_bytes: int = MAX_IN_FLIGHT_BYTES) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self._room = trio.lowlevel.ParkingLot()

    async def reserve(self, size: int) -> None:
        while self.requests and (self.requests >= self.max_requests
                                 or self.bytes + size > self.max_bytes):
            await self._room.park()
        self.requests += 1
        self.bytes += size

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._room.unpark_all()
