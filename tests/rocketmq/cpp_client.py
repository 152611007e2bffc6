"""Blocking helpers around rocketmq-client-python (the official C++ client): run them in a
thread (trio.to_thread.run_sync) while the in-process broker serves."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
from rocketmq.client import (
    ConsumeStatus,
    Message,
    Producer,
    PushConsumer,
    RecvMessage,
    SendStatus,
    TransactionMQProducer,
    TransactionStatus,
)
from rocketmq.ffi import SEND_EXCEPTION_CALLBACK, SEND_SUCCESS_CALLBACK, dll

T = TypeVar("T")


def message(topic: str, body: bytes, tags: str | None = None, keys: str | None = None,
            props: dict[str, str] | None = None, delay_level: int = 0) -> Message:
    m = Message(topic)
    m.set_body(body)
    if tags:
        m.set_tags(tags)
    if keys:
        m.set_keys(keys)
    for k, v in (props or {}).items():
        m.set_property(k, v)
    if delay_level:
        m.set_delay_time_level(delay_level)
    return m


def producer(ns: str, group: str, *, orderly: bool = False) -> Producer:
    p = Producer(group, orderly=orderly, timeout=10_000)
    p.set_namesrv_addr(ns)
    p.start()
    return p


def patiently(send: Callable[[], T], *, attempts: int = 3, pause_s: float = 1.0) -> T:
    """`send()`, tried again after a pause when the client gives up before asking the broker.

    Under a loaded machine the C++ client's transport lock can time out during its heartbeat
    round; it then reports "No route info" without sending (its route lookup comes before any
    request, a transactional send's half message included). Its own retry comes at once and
    meets the same lock, so pause first."""
    for attempt in range(attempts):
        try:
            return send()
        except Exception as exc:  # noqa: BLE001 - the client raises one exception type per call
            if "No route info" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(pause_s)
    raise AssertionError("unreachable")


def send_sync_patiently(p: Producer, m: Message, *, attempts: int = 3,
                        pause_s: float = 1.0) -> SendStatus:
    """send_sync, patiently (above). A 4.x send is at least once: a retried send may be
    stored twice, so callers compare sets of bodies, not lists."""
    return patiently(lambda: p.send_sync(m).status, attempts=attempts, pause_s=pause_s)


def send_in_transaction_patiently(p: TransactionMQProducer, m: Message, body: bytes,
                                  local: Callable[[Message, object], TransactionStatus],
                                  retried: set[bytes]) -> None:
    """send_message_in_transaction, patiently (above). `body` (m's) is added to `retried` when
    sent more than once: a timed-out attempt's half message may still be stored, then
    committed or checked back beside the retried one."""
    tries = 0

    def once() -> None:
        nonlocal tries
        tries += 1
        if tries > 1:
            retried.add(body)
        p.send_message_in_transaction(m, local)

    patiently(once)


def refused_patiently(send: Callable[[], object], match: str, refused: Callable[[], bool], *,
                      attempts: int = 5, pause_s: float = 1.0) -> None:
    """`send()` must raise (matching `match`) every time; tried again until `refused()` says
    the broker itself refused one. The C++ client reports a refusal and its own giving up
    before asking the broker (see `patiently`) alike, as "No route info", so only the broker's
    log tells them apart; callers assert `refused()` afterwards."""
    for _ in range(attempts):
        with pytest.raises(Exception, match=match):
            send()
        if refused():
            return
        time.sleep(pause_s)


def send_async(p: Producer, m: Message, timeout: float = 10.0) -> str:
    """SendMessageAsync through the C API (the Python wrapper has no send_async)."""
    done = threading.Event()
    outcome: list[str] = []

    @SEND_SUCCESS_CALLBACK
    def on_success(result):  # type: ignore[no-untyped-def]
        outcome.append("ok:" + result.contents.msgId.decode())
        done.set()

    @SEND_EXCEPTION_CALLBACK
    def on_error(exc):  # type: ignore[no-untyped-def]
        outcome.append(f"error:{exc.error}")
        done.set()

    dll.SendMessageAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, SEND_SUCCESS_CALLBACK,
                                     SEND_EXCEPTION_CALLBACK]
    rc = dll.SendMessageAsync(p._handle, m._handle, on_success, on_error)
    assert rc == 0, rc
    assert done.wait(timeout), "async send never completed"
    return outcome[0]


def send_async_patiently(p: Producer, m: Message) -> str:
    """send_async, patiently (above): an outcome the client gave up on before asking the
    broker ("No route info") is sent again; any other outcome is returned as it is."""
    def once() -> str:
        outcome = send_async(p, m)
        if "No route info" in outcome:
            raise RuntimeError(outcome)
        return outcome

    return patiently(once)


@dataclass
class Received:
    topic: str
    tags: str
    keys: str
    body: bytes
    queue_id: int
    queue_offset: int
    reconsume_times: int
    props: dict[str, str] = field(default_factory=dict)
    at: float = 0.0


def _received(m: RecvMessage, props: tuple[str, ...]) -> Received:
    return Received(m.topic.decode() if isinstance(m.topic, bytes) else m.topic,
                    (m.tags or b"").decode(), (m.keys or b"").decode(), m.body, m.queue_id,
                    m.queue_offset, m.reconsume_times,
                    {p: (m.get_property(p) or b"").decode() for p in props}, time.time())


class Consumer:
    """A push consumer collecting what it receives; `reply` decides the consume status."""

    def __init__(self, ns: str, group: str, topic: str, expression: str = "*", *,
                 orderly: bool = False, props: tuple[str, ...] = (),
                 reply: Callable[[Received], bool] | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.consumer = PushConsumer(group, orderly=orderly)
        self.consumer.set_namesrv_addr(ns)
        if credentials is not None:  # access key, secret key: signed requests
            self.consumer.set_session_credentials(credentials[0], credentials[1], "ALIYUN")
        self.consumer.set_thread_count(2)

        def callback(m: RecvMessage) -> ConsumeStatus:
            got = _received(m, props)
            with self.lock:
                self.received.append(got)
            if reply is not None and not reply(got):
                return ConsumeStatus.RECONSUME_LATER
            return ConsumeStatus.CONSUME_SUCCESS

        self.consumer.subscribe(topic, callback, expression)
        self.consumer.start()

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if predicate(self.received):
                    return True
            time.sleep(0.05)
        return False

    def shutdown(self) -> None:
        self.consumer.shutdown()


__all__ = ["Consumer", "SendStatus", "message", "producer", "send_async"]
