"""The delegation token store (gateway/security/delegation_tokens.py), the SCRAM token login
(protocols/kafka/sasl.py) and the token request handlers, without a broker process.

Two store sessions on one real ZooKeeper play two brokers of a cluster: a token created on one
is seen, checked, renewed and expired on the other at once.  The SCRAM session takes Kafka's
tokenauth extension and logs the token in as its owner.  Hypothesis: mutated token requests
are a protocol error or an answer with an error code, never an exception; malformed SCRAM
first messages are a failed login, never another exception.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.security.delegation_tokens import DelegationTokenStore
from ledger_backend.metadata import open_store
from protocols.kafka import sasl
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader, decode_request, encode_request, encode_response
from protocols.kafka.errors import (
    ErrorCode,
    MalformedRequestError,
    SaslAuthenticationFailedError,
    UnsupportedVersionError,
)
from protocols.kafka.handlers import HANDLERS
from protocols.kafka.sasl_client import SaslClient
from tests.support.zookeeper import ZooKeeperServer

KEY = "0123456789abcdef-test-key"
TOKEN_APIS = {38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3)}


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk-tokens")) as server:
        yield server


@pytest.mark.integration
async def test_two_brokers_on_zookeeper_share_tokens(zk: ZooKeeperServer) -> None:
    url = zk.store_url(f"/tokens-{uuid.uuid4().hex[:8]}")
    async with await open_store(url) as one, await open_store(url) as two:
        a, b = DelegationTokenStore(one, KEY), DelegationTokenStore(two, KEY)
        info = await a.create("User:alice", "User:alice", ("User:bob",), 60_000)
        assert a.hmac_of(info.token_id) == b.hmac_of(info.token_id)
        assert DelegationTokenStore(one, KEY + "x").hmac_of(info.token_id) != a.hmac_of(
            info.token_id)
        found = await b.scram_credential(info.token_id, sasl.SCRAM_SHA_512)
        assert found is not None and found[1].owner == "User:alice"
        password = base64.b64encode(b.hmac_of(info.token_id)).decode()
        assert found[0].check_password(password) and not found[0].check_password("nope")
        expiry = await b.renew(a.hmac_of(info.token_id), "User:bob", 30_000)
        assert (await a.get(info.token_id)).expiry_ms == expiry  # type: ignore[union-attr]
        await b.expire(a.hmac_of(info.token_id), "User:alice", -1)
        assert await a.get(info.token_id) is None
        assert await a.scram_credential(info.token_id, sasl.SCRAM_SHA_512) is None


async def test_expired_tokens_are_refused_and_purged() -> None:
    now = [1_000_000]
    async with await open_store(f"memory:tokens-{uuid.uuid4().hex}") as store:
        tokens = DelegationTokenStore(store, KEY, max_lifetime_ms=10_000, renew_ms=4_000,
                                      clock_ms=lambda: now[0])
        info = await tokens.create("User:alice", "User:alice", (), -1)
        assert (info.expiry_ms, info.max_ms) == (now[0] + 4_000, now[0] + 10_000)
        capped = await tokens.create("User:alice", "User:alice", (), 99_000_000)
        assert capped.max_ms == now[0] + 10_000
        hmac_ = tokens.hmac_of(info.token_id)
        now[0] += 3_000
        assert await tokens.renew(hmac_, "User:alice", 100_000) == info.max_ms  # capped
        with pytest.raises(Exception) as mismatch:
            await tokens.renew(hmac_, "User:mallory", 1)
        assert mismatch.value.code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH  # type: ignore
        now[0] = info.max_ms  # past the max lifetime: refused, then gone
        with pytest.raises(Exception) as expired:
            await tokens.renew(hmac_, "User:alice", 1)
        assert expired.value.code == ErrorCode.DELEGATION_TOKEN_EXPIRED  # type: ignore
        assert await tokens.scram_credential(info.token_id, sasl.SCRAM_SHA_256) is None
        assert await tokens.purge() == 1  # the other token, past its max too, not met yet
        assert await tokens.live_tokens() == []
        assert await store.children("/ledgerwire/delegation_tokens") == []


def test_short_secret_key_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        DelegationTokenStore(None, "short")  # type: ignore[arg-type]


def _scram_login(session: sasl.SaslSession, client: SaslClient, credential: Any,
                 owner: str | None) -> None:
    first = client.first_token()
    server_first = session.authenticate(first, credential, owner)
    client.finish(session.authenticate(client.next_token(server_first), None))


def test_scram_token_login_is_the_owner() -> None:
    password = base64.b64encode(b"h" * 64).decode()
    credential = sasl.make_credential(sasl.SCRAM_SHA_512, password)
    session = sasl.SaslSession()
    session.handshake(sasl.SCRAM_SHA_512, 1)
    client = SaslClient(sasl.SCRAM_SHA_512, "tokenid", password, extensions={"tokenauth": "true"})
    first = client.first_token()
    assert first.endswith(b",tokenauth=true")
    assert session.username_in(first) == "tokenid" and session.token_auth_in(first)
    _scram_login(session, client, credential, "User:alice")
    assert session.principal == "User:alice" and session.token_authenticated

    plain = sasl.SaslSession()  # a user's login: no extension, its own principal
    plain.handshake(sasl.SCRAM_SHA_512, 1)
    user = SaslClient(sasl.SCRAM_SHA_512, "alice", password)
    assert not plain.token_auth_in(user.first_token())
    _scram_login(plain, user, credential, None)
    assert plain.principal == "User:alice" and not plain.token_authenticated


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80), st.lists(st.text(max_size=12), max_size=4))
def test_malformed_scram_first_is_a_failed_login(bare: str, extensions: list[str]) -> None:
    token = ("n,," + ",".join([bare, *extensions])).encode("utf-8", "surrogatepass")
    credential = sasl.make_credential(sasl.SCRAM_SHA_256, "pw", salt=b"s" * 16)
    session = sasl.SaslSession()
    session.handshake(sasl.SCRAM_SHA_256, 1)
    session.username_in(token)
    session.token_auth_in(token)
    try:
        session.authenticate(token, credential, "User:x")
    except SaslAuthenticationFailedError:
        assert session.failed


# -- the handlers, fed mutated requests ---------------------------------------------------

def _samples() -> list[bytes]:
    bodies: dict[int, dict[str, Any]] = {
        38: {"owner_principal_type": "User", "owner_principal_name": "bob",
             "renewers": [{"principal_type": "User", "principal_name": "c"}],
             "max_lifetime_ms": 1000},
        39: {"hmac": b"\1" * 64, "renew_period_ms": 5},
        40: {"hmac": b"\2" * 64, "expiry_time_period_ms": -1},
        41: {"owners": [{"principal_type": "User", "principal_name": "alice"}]}}
    frames = []
    for api, (low, high) in TOKEN_APIS.items():
        for version in range(low, high + 1):
            header = RequestHeader(api, version, 7, "fuzz")
            frames.append(bytes(encode_request(header, bodies[api]))[4:])  # no size prefix
    return frames


SAMPLES = _samples()


class _Session:
    authenticated = True
    token_authenticated = False
    principal = "User:alice"


async def _serve(frame: bytes, tokens: DelegationTokenStore | None) -> dict[str, Any] | None:
    """The handler's answer to a request frame (None: refused by the decoder, or not a token
    API); the answer must encode."""
    try:
        header, body = decode_request(frame)
    except (MalformedRequestError, UnsupportedVersionError):
        return None
    if header.api_key not in TOKEN_APIS:
        return None
    ctx = RequestContext(broker=SimpleNamespace(delegation_tokens=tokens, authorizer=None),
                         session=_Session())
    answer = await HANDLERS[header.api_key].handle(ctx, header, body)
    assert isinstance(answer["error_code"], int)
    encode_response(header, answer)
    return answer


async def test_every_sample_is_served() -> None:
    """The fuzzed samples decode and reach the handlers unmutated (else the fuzzing below
    would only exercise the decoder)."""
    async with await open_store(f"memory:samples-{uuid.uuid4().hex}") as store:
        tokens = DelegationTokenStore(store, KEY)
        codes = [await _serve(frame, tokens) for frame in SAMPLES]
        assert all(answer is not None for answer in codes)
        disabled = [await _serve(frame, None) for frame in SAMPLES]
        assert {a["error_code"] for a in disabled if a is not None} == {
            ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(SAMPLES))), st.lists(st.tuples(st.integers(0, 400),
                                                              st.integers(0, 255)), max_size=6),
       st.integers(0, 400), st.booleans())
def test_mutated_token_requests_never_crash(index: int, flips: list[tuple[int, int]],
                                            cut: int, enabled: bool) -> None:
    frame = bytearray(SAMPLES[index])
    for at, value in flips:
        if at < len(frame):
            frame[at] = value
    frame = frame[:max(cut, 10)] if cut < len(frame) else frame

    async def main() -> None:
        async with await open_store(f"memory:fuzz-{uuid.uuid4().hex}") as store:
            await _serve(bytes(frame), DelegationTokenStore(store, KEY) if enabled else None)
    trio.run(main)
