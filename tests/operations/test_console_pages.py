"""Console pages in-process (open mode, as a PLAINTEXT broker serves them on loopback): the
message browser shows RocketMQ fields, finds by key and by time, and refuses bad parameters
with a 400 page; a partition owned elsewhere is never opened."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from gateway.topics.partition_log import PartitionLog
from protocols.kafka import record_batch as rb
from protocols.kafka.group_model import CommittedOffset
from protocols.rocketmq.message_encoding import MessageMeta, to_record
from tests.operations.http_support import exchange, found, request
from tests.operations.ops_stack import OpsStack, batch


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

    async def spy(topic: str, partition: int) -> PartitionLog:
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


async def console_session(port: int) -> tuple[str, str]:
    """(cookie, csrf token) of a console session (open mode: the first page makes one)."""
    raw = b"GET /console/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = (await exchange(port, raw)).decode()
    cookie = found(r"set-cookie: (lw_session=[^;]+)", answer, re.I)
    csrf = found(r'name="csrf" value="([^"]+)"', answer)
    return cookie, csrf


async def post_form(port: int, path: str, cookie: str, fields: dict[str, str]) -> tuple[int, str]:
    body = urlencode(fields)
    raw = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCookie: {cookie}\r\n"
           f"Content-Type: application/x-www-form-urlencoded\r\n"
           f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
    answer = (await exchange(port, raw)).decode()
    head, _, content = answer.partition("\r\n\r\n")
    location = re.search(r"location: (\S+)", head, re.I)
    return int(head.split(" ")[1]), location.group(1) if location else content


async def test_console_actions_confirm_then_act(ops: OpsStack, admin_port: int) -> None:
    cookie, csrf = await console_session(admin_port)
    status, page = await post_form(admin_port, "/console/topics", cookie,
                                   {"csrf": csrf, "topic": "act", "partitions": "2"})
    assert status == 200 and "Create topic act with 2 partition(s)?" in page
    assert "act" not in ops.topics.topics()  # nothing happens before the confirmation
    status, where = await post_form(admin_port, "/console/topics", cookie, {
        "csrf": csrf, "topic": "act", "partitions": "2", "namespace": "", "confirm": "yes"})
    assert (status, where) == (303, "/console/topics/act?done=created")
    assert ops.topics.topics()["act"].partitions == 2
    status, page = await post_form(admin_port, "/console/topics", cookie, {
        "csrf": csrf, "topic": "act", "partitions": "2", "confirm": "yes"})
    assert status == 409 and "exists" in page.lower()

    plog = await ops.topics.partition("act", 0)
    await plog.append(batch(4))
    await ops.coordinator.commit_offsets(group_id="g", member_id="", generation_id=-1,
                                         offsets={("act", 0): CommittedOffset(1, -1, "", 0)})
    status, page = await post_form(admin_port, "/console/groups/g/reset", cookie,
                                   {"csrf": csrf, "topic": "act", "to": "latest"})
    assert status == 200 and "to latest?" in page
    status, where = await post_form(admin_port, "/console/groups/g/reset", cookie, {
        "csrf": csrf, "topic": "act", "to": "latest", "value": "", "confirm": "yes"})
    assert (status, where) == (303, "/console/groups/g?done=reset")
    assert ops.coordinator.offsets["g"][("act", 0)].offset == 4
    status, _ = await post_form(admin_port, "/console/groups/g/reset", cookie, {
        "csrf": csrf, "topic": "act", "to": "offset", "value": "", "confirm": "yes"})
    assert status == 400

    status, page = await post_form(admin_port, "/console/maintenance/retention", cookie,
                                   {"csrf": csrf})
    assert status == 200 and "Run now" in page
    status, where = await post_form(admin_port, "/console/maintenance/retention", cookie,
                                    {"csrf": csrf, "confirm": "yes"})
    assert (status, where) == (303, "/?done=retention")
    assert (await post_form(admin_port, "/console/maintenance/format", cookie,
                            {"csrf": csrf, "confirm": "yes"}))[0] == 400

    status, where = await post_form(admin_port, "/console/topics/act/delete", cookie,
                                    {"csrf": csrf, "confirm": "yes"})
    assert (status, where) == (303, "/console/topics?done=deleted")
    assert "act" not in ops.topics.topics()
    status, _ = await post_form(admin_port, "/console/topics/act/delete", cookie,
                                {"csrf": "forged", "confirm": "yes"})
    assert status == 403
