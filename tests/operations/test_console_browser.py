"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium), against a real secured `ledgerwire standalone` that a confluent-kafka producer and
consumer use: log in, find the topic the producer wrote, open its partitions and ledgers,
browse its messages and find one by key, watch a group's lag fall as its consumer catches up,
create and delete a topic.  Every page is saved as a screenshot (pytest's tmp dir, and a copy
under /tmp/team/screens when that folder exists) and page load times are printed."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.secured_standalone import PASSWORDS, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
TEAM_SCREENS = Path("/tmp/team/screens")
TOPIC, GROUP, MESSAGES = "orders", "billing", 60


def kafka_config(server: Standalone, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": PASSWORDS["admin"], **extra}


class Browser:
    """A headless Chromium page with screenshots and load timings."""

    def __init__(self, base: str, shots: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
            pytest.fail("Debian's chromium and chromium-driver are missing: run "
                        "scripts/ensure-env test (apt-get install chromium chromium-driver)")
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-dev-shm-usage",
                    "--disable-extensions", "--disable-sync", "--disable-default-apps",
                    "--disable-component-update", "--no-first-run", "--mute-audio",
                    "--window-size=1360,1000", "--force-device-scale-factor=1"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        self.driver.set_page_load_timeout(60)
        self.base = base
        self.shots = shots
        self.timings: dict[str, float] = {}

    def get(self, path: str) -> None:
        self.driver.get(self.base + path)

    def loaded(self, name: str) -> None:
        """Record how long the page now shown took to load (navigation timing)."""
        ms = self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "return n ? n.loadEventEnd - n.startTime : -1;")
        self.timings[name] = round(float(ms), 1)

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self) -> str:
        return str(self.find("body").text)

    def wait_for(self, what: str, check: Any, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                self.shot(f"timeout-{what.replace(' ', '-')}")
                raise AssertionError(f"timed out waiting for {what}:\n{self.text()[:2000]}")
            time.sleep(0.2)

    def submit(self, css: str) -> None:
        self.find(css).click()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Standalone]:
    server = secured_standalone(tmp_path / "broker")
    server.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{server.admin_port}/health", timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield server
    server.stop()


@pytest.fixture
def browser(server: Standalone, tmp_path: Path) -> Iterator[Browser]:
    shots = tmp_path / "screens"
    shots.mkdir()
    b = Browser(f"http://127.0.0.1:{server.admin_port}", shots)
    try:
        yield b
    finally:
        b.driver.quit()
        print("page load times (ms):", json.dumps(b.timings, sort_keys=True))
        (shots / "timings.json").write_text(json.dumps(b.timings, indent=1, sort_keys=True))
        if TEAM_SCREENS.parent.exists():
            TEAM_SCREENS.mkdir(exist_ok=True)
            for png in shots.iterdir():
                shutil.copy(png, TEAM_SCREENS / png.name)


def produce_orders(server: Standalone) -> None:
    admin = AdminClient(kafka_config(server))
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(30)
    producer = Producer(kafka_config(server, acks="all", **{"linger.ms": 5}))
    for i in range(MESSAGES):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=json.dumps({"n": i}).encode(),
                         partition=i % 2, headers=[("source", b"browser-test")])
    assert producer.flush(30) == 0


def produce_for(server: Standalone, seconds: float) -> None:
    """Background traffic for the overview's charts, to a topic of its own."""
    producer = Producer(kafka_config(server, acks="all", **{"linger.ms": 5}))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(50):
            producer.produce("chart-traffic", value=b"x" * 100)
        producer.flush(10)
        time.sleep(0.05)


def consume(server: Standalone, count: int) -> None:
    """Read `count` more records as group GROUP and commit where it got to on both partitions
    (a partition it did not reach yet: where it stands, so lag counts it), then leave."""
    consumer = Consumer(kafka_config(server, **{"group.id": GROUP, "enable.auto.commit": False,
                                                "auto.offset.reset": "earliest"}))
    consumer.subscribe([TOPIC])
    got = 0
    deadline = time.monotonic() + 60
    reached: dict[int, int] = {}
    while got < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        got += 1
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None  # a consumed record has both
        reached[partition] = offset + 1
    assert got == count
    committed = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=30)}
    offsets = [TopicPartition(TOPIC, p, reached.get(p, max(committed.get(p, 0), 0)))
               for p in (0, 1)]
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()


def test_console_in_a_real_browser(server: Standalone, browser: Browser) -> None:
    produce_orders(server)
    b = browser

    # log in: any console page first shows the login form
    b.get("/")
    assert b.find("#password")
    b.shot("01-login")
    b.find("#user").send_keys("admin")
    b.find("#password").send_keys(PASSWORDS["admin"])
    b.submit("#login")
    b.wait_for("the overview", lambda: b.all("#under-replicated"))
    b.loaded("overview")
    assert "Bookies" in b.text() and "Live traffic" in b.text()
    traffic = threading.Thread(target=produce_for, args=(server, 7.0))
    traffic.start()  # the live charts draw it: a few samples of produce rate and latency
    time.sleep(7.5)
    traffic.join()
    b.shot("02-overview")

    # the topic the producer wrote, found by search
    b.get("/console/topics?q=ord")
    b.loaded("topics")
    links = [a.text for a in b.all("a.topic-link")]
    assert links == [TOPIC]
    b.shot("03-topics")
    b.find("a.topic-link").click()
    b.wait_for("the topic page", lambda: b.all("#partitions"))
    b.loaded("topic")
    assert len(b.all("tr.partition")) == 2
    assert b.all(".ledger-strip .ledger") and b.all("tr.ledger-row")
    ledger_rows = b.text()
    assert "OPEN" in ledger_rows.upper() and "1/1/1" in ledger_rows
    b.shot("04-topic-partitions-ledgers")

    # messages: the newest of partition 0, then one found by key, shown as JSON
    b.find("#browse").click()
    b.wait_for("the message browser", lambda: b.all("tr.message"))
    b.loaded("messages")
    assert len(b.all("tr.message")) == 20
    b.shot("05-messages")
    b.get(f"/console/topics/{TOPIC}/messages?partition=0&key=k10&format=json")
    b.wait_for("the key search", lambda: b.all("#browse-summary"))
    b.loaded("messages-by-key")
    found = b.all("tr.message")
    assert len(found) == 1 and found[0].get_attribute("data-offset") == "5"
    assert '"n": 10' in found[0].text and "browser-test" in found[0].text
    b.shot("06-message-by-key")

    # a consumer group's lag falls as its consumer catches up
    consume(server, 10)
    b.get(f"/console/groups/{GROUP}")
    b.wait_for("the group page", lambda: b.all("#total-lag"))
    b.loaded("group")
    assert b.find("#total-lag").text == str(MESSAGES - 10)
    b.shot("07-group-lagging")
    consume(server, MESSAGES - 10)
    b.wait_for("the lag to fall to 0 (auto-refresh)", lambda: b.find("#total-lag").text == "0")
    b.shot("08-group-caught-up")

    # a live member and its assignment
    member = Consumer(kafka_config(server, **{"group.id": GROUP, "client.id": "console-probe",
                                              "enable.auto.commit": False}))
    member.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + 60
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.5)
        b.get(f"/console/groups/{GROUP}")
        b.wait_for("the member", lambda: "console-probe" in b.find("#members").text)
        assert "orders [0, 1]" in b.find("#members").text
        b.shot("08b-group-member")
    finally:
        member.close()

    # create a topic through the form, with a confirmation, then delete it
    b.get("/console/topics")
    b.find("#new-topic").send_keys("console-made")
    partitions = b.find("#new-partitions")
    partitions.clear()
    partitions.send_keys("3")
    b.submit("#create")
    b.wait_for("the confirmation", lambda: b.all("#confirm"))
    assert "Create topic console-made with 3 partition(s)?" in b.text()
    b.shot("09-create-confirm")
    b.submit("#confirm")
    b.wait_for("the new topic", lambda: b.all("#topic-name"))
    assert b.find("#notice").text == "Topic created." and len(b.all("tr.partition")) == 3
    b.shot("10-created")
    b.submit("#delete-topic")
    b.wait_for("the delete confirmation", lambda: b.all("#confirm"))
    assert "cannot be undone" in b.text()
    b.shot("11-delete-confirm")
    b.submit("#confirm")
    b.wait_for("the topic list", lambda: b.all("#notice"))
    assert b.find("#notice").text == "Topic deleted."
    assert "console-made" not in [a.text for a in b.all("a.topic-link")]
    b.shot("12-deleted")

    # namespaces page, and a bad parameter gets a clear page, not a traceback
    b.get("/console/namespaces")
    b.loaded("namespaces")
    assert "public/default" in b.text()
    b.shot("13-namespaces")
    b.get(f"/console/topics/{TOPIC}/messages?partition=7&limit=x")
    assert "partition must be between 0 and 1" in b.text() and "Traceback" not in b.text()
    b.shot("14-bad-input")
    created = Consumer(kafka_config(server, **{"group.id": "probe"}))
    try:
        md = created.list_topics(timeout=10)
        assert "console-made" not in md.topics and TOPIC in md.topics
        assert created.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1] == 30
    finally:
        created.close()
