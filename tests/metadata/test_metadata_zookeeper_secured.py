"""ZooKeeper reached over TLS and logged in to with SASL DIGEST-MD5 (issue 26 part 5), against
a real ZooKeeper server whose JAAS Server section holds the cluster's user and whose secure
port requires client certificates from the test CA.

The store's nodes belong to sasl:<user>: an anonymous client, a client with the same password
in the digest scheme and a client with a wrong SASL password get nothing; a client without a
certificate, or one that does not trust the server's, does not get a session at all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

from ledger_backend.metadata import MetadataError, MetadataUnavailableError, open_store
from ledger_backend.metadata.zk_url import ZkTransport, parse_zk_url, zk_transport
from tests.metadata.test_metadata_zookeeper_acl import (
    ACLS,
    CREDENTIALS,
    OWNER,
    _assert_locked,
    _make_cluster_nodes,
)
from tests.support.pki import issue, make_ca
from tests.support.zookeeper import ServerTls, ZooKeeperServer


def test_transport_options_parse_and_contradictions_are_refused() -> None:
    url = ("zk://lw:pw@h:2182/c?sasl=digest-md5&tls=true&tls_cafile=/ca.pem"
           "&tls_certfile=/c.pem&tls_keyfile=/k.pem&op_timeout_s=2")
    assert parse_zk_url(url) == ("h:2182", "/c", {"op_timeout_s": 2.0})
    assert zk_transport(url) == ZkTransport("DIGEST-MD5", True, "/ca.pem", "/c.pem", "/k.pem")
    assert zk_transport("zk://h:2181/c") == ZkTransport()
    assert not zk_transport("zk://h:2181/c?tls=1&tls_check_hostname=false").check_hostname
    for bad, why in (("zk://h:2181/c?sasl=DIGEST-MD5", "needs an identity"),
                     ("zk://a:b@h:2181/c?sasl=GSSAPI", "not offered"),
                     ("zk://h:2181/c?tls_cafile=/ca.pem", "need tls=true"),
                     ("zk://h:2181/c?tls=maybe", "true or false"),
                     ("zk://h:2181/c?tls=true&tls_certfile=/c.pem", "go together"),
                     ("zk://h:2181/c?tls=true&tls=false", "once")):
        with pytest.raises(ValueError, match=why):
            zk_transport(bad)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("zk-pki")
    ca = make_ca(directory)
    other = tmp_path_factory.mktemp("other-pki")
    return {"ca": ca[0],
            "server": issue(directory, ca, "zk", "/CN=localhost", "DNS:localhost,IP:127.0.0.1"),
            "client": issue(directory, ca, "lw", "/CN=lw"),
            "other_ca": make_ca(other)[0]}


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Any]) -> Iterator[ZooKeeperServer]:
    tls = ServerTls(pki["server"][0], pki["server"][1], pki["ca"])
    with ZooKeeperServer(tmp_path_factory.mktemp("zk-sasl-tls"), sasl_users={"lw": "pw"},
                         tls=tls) as server:
        yield server


def _url(zk: ZooKeeperServer, pki: dict[str, Any], chroot: str, *, password: str = "pw",
         ca: Path | None = None, certificate: bool = True, op_timeout_s: float = 10) -> str:
    url = (f"zk://lw:{password}@{zk.secure_connect_string}{chroot}?sasl=DIGEST-MD5&tls=true"
           f"&op_timeout_s={op_timeout_s}")
    url += f"&tls_cafile={ca or pki['ca']}"
    if certificate:
        url += f"&tls_certfile={pki['client'][0]}&tls_keyfile={pki['client'][1]}"
    return url


@pytest.fixture
def anonymous(zk: ZooKeeperServer) -> Iterator[KazooClient]:
    """An anonymous kazoo client on the plain port (no chroot)."""
    client = KazooClient(hosts=zk.connect_string, timeout=10)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.mark.integration
async def test_sasl_identity_over_tls_owns_every_node(zk: ZooKeeperServer, pki: dict[str, Any],
                                                      anonymous: KazooClient) -> None:
    chroot = f"/sasl-{uuid.uuid4().hex[:8]}"
    await _make_cluster_nodes(_url(zk, pki, chroot))
    _assert_locked(anonymous, chroot)
    anonymous.add_auth("digest", "lw:pw")  # the same password, another scheme: no better
    _assert_locked(anonymous, chroot)
    store = await open_store(_url(zk, pki, chroot))  # the cluster itself works on
    try:
        for path in ("/", CREDENTIALS, ACLS, OWNER):  # the chroot node and the project's
            acl, _ = store.client.get_acls(path)  # type: ignore[attr-defined]
            assert acl == [ACL(Permissions.ALL, Id("sasl", "lw"))], path
        data, stat = await store.get(OWNER)
        await store.set(OWNER, b'{"broker": 2}', stat.version)
        assert sorted(await store.children("/ledgerwire/users")) == ["alice"]
    finally:
        await store.close()


@pytest.mark.integration
async def test_a_wrong_sasl_password_is_refused(zk: ZooKeeperServer, pki: dict[str, Any]) -> None:
    with pytest.raises(MetadataError, match="refused access"):
        await open_store(_url(zk, pki, "/refused", password="not-pw"))


@pytest.mark.integration
async def test_tls_lets_in_no_client_without_certificate_or_trust(
    zk: ZooKeeperServer, pki: dict[str, Any]
) -> None:
    # the server asks for a client certificate; a client that has none gets no session
    with pytest.raises(MetadataUnavailableError):
        await open_store(_url(zk, pki, "/no-cert", certificate=False, op_timeout_s=1))
    # a client that does not trust the server's CA does not talk to it
    with pytest.raises(MetadataUnavailableError):
        await open_store(_url(zk, pki, "/no-trust", ca=pki["other_ca"], op_timeout_s=1))
