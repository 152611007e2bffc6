"""ZooKeeper with ACLs (issue 26 part 5), against a real ZooKeeper server.

A store whose URL names a digest identity creates every znode for that identity only: an
anonymous kazoo client (or one with another identity) cannot read credentials or ACLs, nor
change ACLs, users or ownership. `secure_tree()` does the same to an existing open cluster."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo import exceptions as kz
from kazoo.client import KazooClient

from ledger_backend.metadata import MetadataError, open_store
from ledger_backend.metadata.zk_url import DigestIdentity, parse_zk_url, redact, zk_identity
from tests.support.zookeeper import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]
CREDENTIALS = "/ledgerwire/users/alice"  # what gateway/security stores: SCRAM salts and keys
ACLS = "/ledgerwire/acls"
OWNER = "/ledgerwire/ownership/bundle-0"


def test_the_identity_comes_from_the_url_or_a_file(tmp_path: Path) -> None:
    assert parse_zk_url("zk://lw:s3cret@h:2181/c?op_timeout_s=2") == ("h:2181", "/c",
                                                                    {"op_timeout_s": 2.0})
    assert zk_identity("zk://lw:s3cret@h:2181/c") == DigestIdentity("lw", "s3cret")
    assert zk_identity("zk://lw:p%40ss@h:2181/c") == DigestIdentity("lw", "p@ss")
    assert zk_identity("zk://h:2181/c") is None
    auth = tmp_path / "zk.auth"
    auth.write_text("lw:from-file\n")
    auth.chmod(0o600)
    assert zk_identity(f"zk://h:2181/c?auth_file={auth}") == DigestIdentity("lw", "from-file")
    with pytest.raises(ValueError, match="not both"):
        zk_identity(f"zk://a:b@h:2181/c?auth_file={auth}")
    with pytest.raises(ValueError, match="user:password"):
        zk_identity("zk://nopassword@h:2181/c")
    assert redact("zk://lw:s3cret@h:2181/c") == "zk://lw:***@h:2181/c"
    assert "s3cret" not in repr(DigestIdentity("lw", "s3cret"))


def test_a_readable_credentials_file_is_a_warning(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    auth = tmp_path / "zk.auth"
    auth.write_text("lw:from-file\n")
    auth.chmod(0o644)
    assert zk_identity(f"zk://h:2181/c?auth_file={auth}") == DigestIdentity("lw", "from-file")
    assert "readable by other users" in caplog.text
    assert "from-file" not in caplog.text


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk-acl")) as server:
        yield server


@pytest.fixture
def kazoo_client(zk: ZooKeeperServer) -> Iterator[KazooClient]:
    """An anonymous kazoo client on the whole server (no chroot)."""
    client = KazooClient(hosts=zk.connect_string, timeout=10)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _secured_url(zk: ZooKeeperServer, chroot: str, password: str = "cluster-pw") -> str:
    return f"zk://lw:{password}@{zk.connect_string}{chroot}"


async def _make_cluster_nodes(url: str) -> None:
    store = await open_store(url)
    try:
        await store.create(CREDENTIALS, b'{"salt": "...", "stored_key": "..."}',
                           make_parents=True)  # fmt: skip
        await store.create(ACLS, b'[{"principal": "User:alice", "op": "READ"}]')
        await store.create(OWNER, b'{"broker": 1}', make_parents=True)
        await store.create("/ledgerwire/brokers/1", b"{}", ephemeral=True, make_parents=True)
    finally:
        await store.close()


def _assert_locked(client: KazooClient, chroot: str) -> None:
    for path in (CREDENTIALS, ACLS, OWNER):
        full = chroot + path
        with pytest.raises(kz.NoAuthError):
            client.get(full)  # credentials and ACLs unreadable
        with pytest.raises(kz.NoAuthError):
            client.set(full, b"rewritten")  # no ACL, user or ownership change
        with pytest.raises(kz.NoAuthError):
            client.set_acls(full, [kz_open_acl()])  # nor taking the node over
        with pytest.raises(kz.NoAuthError):
            client.delete(full)
    with pytest.raises(kz.NoAuthError):
        client.create(chroot + "/ledgerwire/users/mallory", b"{}")  # no new SASL user
    with pytest.raises(kz.NoAuthError):
        client.get_children(chroot + "/ledgerwire/users")
    with pytest.raises(kz.NoAuthError):
        client.create(chroot + "/elsewhere", b"")  # the chroot itself is closed too


def kz_open_acl():  # type: ignore[no-untyped-def]
    from kazoo.security import OPEN_ACL_UNSAFE

    return OPEN_ACL_UNSAFE[0]


@pytest.mark.integration
async def test_nodes_of_an_identity_are_closed_to_everyone_else(
    zk: ZooKeeperServer, kazoo_client: KazooClient
) -> None:
    chroot = f"/acl-{uuid.uuid4().hex[:8]}"
    await _make_cluster_nodes(_secured_url(zk, chroot))
    _assert_locked(kazoo_client, chroot)
    kazoo_client.add_auth("digest", "lw:wrong-password")  # another identity: no better
    _assert_locked(kazoo_client, chroot)
    store = await open_store(_secured_url(zk, chroot))  # the cluster itself works on
    try:
        data, stat = await store.get(OWNER)
        await store.set(OWNER, b'{"broker": 2}', stat.version)
        assert sorted(await store.children("/ledgerwire/users")) == ["alice"]
    finally:
        await store.close()
    with pytest.raises(MetadataError, match="refused access"):  # a broker without the identity
        await open_store(f"zk://{zk.connect_string}{chroot}")


@pytest.mark.integration
async def test_secure_tree_closes_an_existing_open_cluster(
    zk: ZooKeeperServer, kazoo_client: KazooClient
) -> None:
    chroot = f"/open-{uuid.uuid4().hex[:8]}"
    await _make_cluster_nodes(f"zk://{zk.connect_string}{chroot}")
    assert kazoo_client.get(chroot + CREDENTIALS)[0]  # world-readable before
    kazoo_client.create(chroot + "/outside-the-project", b"")
    unsecured = await open_store(f"zk://{zk.connect_string}{chroot}")
    try:
        with pytest.raises(MetadataError, match="names no identity"):
            await unsecured.secure_tree()  # type: ignore[attr-defined]
    finally:
        await unsecured.close()
    store = await open_store(_secured_url(zk, chroot))
    try:
        changed = await store.secure_tree()  # type: ignore[attr-defined]
        assert changed >= 8  # chroot, /ledgerwire, users, alice, acls, ownership, bundle, ...
        assert await store.secure_tree() == 0  # type: ignore[attr-defined]
    finally:
        await store.close()
    _assert_locked(kazoo_client, chroot)
    assert kazoo_client.get(chroot + "/outside-the-project")  # not the project's: left alone


def _ledgerwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)  # fmt: skip


@pytest.mark.integration
def test_cluster_secure_command_closes_an_initialised_cluster(zk: ZooKeeperServer) -> None:
    chroot = f"/cli-{uuid.uuid4().hex[:8]}"
    open_url = f"zk://{zk.connect_string}{chroot}"
    assert _ledgerwire("cluster", "init", "--metadata", open_url).returncode == 0
    secured = _ledgerwire("cluster", "secure", "--metadata", _secured_url(zk, chroot))
    assert secured.returncode == 0, secured.stderr
    assert int(secured.stdout.split()[0]) > 5  # chroot, /ledgerwire, cluster layout, ...
    refused = _ledgerwire("cluster", "status", "--metadata", open_url)
    assert refused.returncode == 1
    assert "refused access" in refused.stderr and "Traceback" not in refused.stderr
    status = _ledgerwire("cluster", "status", "--metadata", _secured_url(zk, chroot))
    assert status.returncode == 0 and '"initialised": true' in status.stdout
