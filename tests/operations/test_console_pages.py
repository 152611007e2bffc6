"""Console pages in-process (open mode, as a PLAINTEXT broker serves them on loopback): the
message browser shows RocketMQ fields, finds by key and by time, and refuses bad parameters
with a 400 page; a partition owned elsewhere is never opened."""

from __future__ import annotations

from protocols.kafka import record_batch as rb
from protocols.rocketmq.message_encoding import MessageMeta, to_record
from tests.operations.http_support import request
from tests.operations.ops_stack import OpsStack


async def test_message_browser_shows_rocketmq_fields_and_finds_keys(
        ops: OpsStack, admin_port: int) -> None:
    await ops.topics.create_topic("mixed", 1, {})
    plog = await ops.topics.partition("mixed", 0)
    rmq = to_record(b"rocket body", {"TAGS": "tagA", "KEYS": "order-7", "color": "red"},
                    MessageMeta(), 5_000)
    await plog.append(rb.build_batch([rmq], timestamp_ms=5_000))
    await plog.append(rb.build_batch([(b"k1", b'{"x": 1}'), (b"k2", b"\xff\xfe")],
                                     timestamp_ms=9_000))
    status, page = await request(admin_port, "GET", "/console/topics/mixed/messages?limit=10")
    assert status == 200
    assert "tagA" in page and "order-7" in page and "color" in page and "rocket body" in page
    assert "__rmq" not in page
    status, page = await request(admin_port, "GET",
                                 "/console/topics/mixed/messages?key=k2&format=hex")
    assert status == 200 and "ff fe" in page and 'data-offset="2"' in page
    assert 'data-offset="1"' not in page
    status, page = await request(admin_port, "GET", "/console/topics/mixed/messages?time=8000")
    assert status == 200 and 'data-offset="1"' in page and 'data-offset="0"' not in page
    for bad in ("partition=3", "offset=-1", "limit=0", "limit=abc", "format=xml",
                "time=yesterday"):
        status, page = await request(admin_port, "GET", f"/console/topics/mixed/messages?{bad}")
        assert status == 400 and "Traceback" not in page, bad
    status, page = await request(admin_port, "GET", "/console/topics/bad%20name/messages")
    assert status == 400


async def test_a_partition_owned_elsewhere_is_not_opened(ops: OpsStack, admin_port: int) -> None:
    await ops.topics.create_topic("remote", 1, {})
    ops.admin.owner_of = lambda topic, partition: 7
    opened = []
    original = ops.topics.partition

    async def spy(topic: str, partition: int) -> object:
        opened.append((topic, partition))
        return await original(topic, partition)

    ops.topics.partition = spy  # type: ignore[method-assign]
    status, page = await request(admin_port, "GET", "/console/topics/remote/messages")
    assert status == 200 and "owned by broker 7" in page and opened == []


async def test_overview_topics_groups_and_namespaces_render(
        ops: OpsStack, admin_port: int) -> None:
    await ops.topics.create_topic("shown", 2, {})
    for path, expected in [("/", "Under-replicated"), ("/console/topics?q=sho", "shown"),
                           ("/console/topics/shown", "ledger-strip"),
                           ("/console/groups", "Consumer groups"),
                           ("/console/namespaces", "public/default"),
                           ("/console/data/traffic", "produce_messages")]:
        status, page = await request(admin_port, "GET", path)
        assert status == 200 and expected in str(page), path
    assert (await request(admin_port, "GET", "/console/topics/nope"))[0] == 404
    status, css = await request(admin_port, "GET", "/console/static/console.css")
    assert status == 200 and ".ledger-strip" in css
    assert (await request(admin_port, "GET", "/console/static/../../api.py"))[0] == 404
