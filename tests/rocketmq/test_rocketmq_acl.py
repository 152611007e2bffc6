"""RocketMQ plain ACL, sans-IO: signing (vectors computed with `openssl dgst -sha1 -hmac`),
permissions, addresses, account parsing, resources per request code, tenants, and a Hypothesis
check that arbitrary extFields never crash the verifier."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.loading import load_config
from gateway.config.settings import ConfigError
from protocols.rocketmq.acl import (
    PERM_ANY,
    PERM_DENY,
    PERM_PUB,
    PERM_SUB,
    AclAccount,
    AclConfigError,
    AclRefusedError,
    AddressPattern,
    PlainAclValidator,
    parse_perm,
    perm_allows,
    required_resources,
    sign,
    sign_request,
    signing_content,
)
from protocols.rocketmq.codec import RemotingCommand, decode_command, encode_command
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode

AK, SK = "RocketMQ", "12345678"


class Conn:
    def __init__(self, host: str = "10.0.0.5") -> None:
        self.peer = (host, 40000)
        self.connection_id = 1


def command(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=dict(ext), body=body)


def signed(code: int, ext: dict[str, str], body: bytes = b"", ak: str = AK,
           sk: str = SK) -> RemotingCommand:
    return command(code, sign_request(dict(ext), body, ak, sk), body)


def validator(*accounts: dict[str, Any], white: tuple[str, ...] = (),
              namespaces: Any = None) -> PlainAclValidator:
    return PlainAclValidator.from_config(list(accounts) or [
        {"access_key": AK, "secret_key": SK, "default_topic_perm": "PUB|SUB",
         "default_group_perm": "SUB", "topic_perms": ["denied=DENY", "readonly=SUB"],
         "group_perms": ["blocked=DENY"]}], white, namespaces)


def refusal(v: PlainAclValidator, request: RemotingCommand, conn: Conn | None = None) -> str:
    with pytest.raises(AclRefusedError) as refused:
        v.check(conn or Conn(), request)
    assert refused.value.code == ResponseCode.NO_PERMISSION == 16
    return str(refused.value)


# --- signing ----------------------------------------------------------------------------------


def test_signature_matches_an_openssl_vector() -> None:
    ext = {"topic": "TopicTest", "producerGroup": "PG", "AccessKey": "RocketMQ"}
    assert signing_content(ext, b"hello") == b"RocketMQPGTopicTesthello"
    assert sign(b"RocketMQPGTopicTesthello", "12345678") == "O8UxYrKZ95W0cZTACyBxJ0IZ1kA="
    # the C++ client / ali-ons shape: AccessKey and OnsChannel signed with the header fields
    cpp = {"AccessKey": "akeyvalue", "OnsChannel": "ALIYUN", "topic": "orders"}
    assert sign(signing_content(cpp, b""), "secretkey1") == "116Q7COpdiK1faaYxp16lLZsxzY="


def test_content_uses_java_key_order_and_leaves_signature_and_unique_key_query_out() -> None:
    ext = {"a": "x", "B": "y", "Signature": "zzz", "_UNIQUE_KEY_QUERY": "q"}
    assert signing_content(ext, b"\x00\x01body") == b"yx\x00\x01body"
    assert sign(signing_content(ext, b"\x00\x01body"), "secretkey1") == \
        "ogg9LXI0pYVlegbUuVFPt83kb0w="
    # UTF-16 code unit order, not code point order: U+FF5E sorts after a surrogate pair
    assert signing_content({"\uff5e": "1", "\U0001f600": "2"}, b"") == b"21"


def test_sign_request_adds_access_key_token_and_signature() -> None:
    ext = sign_request({"topic": "t"}, b"body", AK, SK, security_token="tok")
    assert ext["AccessKey"] == AK and ext["SecurityToken"] == "tok"
    assert ext["Signature"] == sign(b"RocketMQtoktbody", SK)


def test_signed_request_survives_both_header_encodings() -> None:
    v = validator()
    for serialize_type in (0, 1):
        req = signed(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "orders", "e": "0"}, b"msg")
        req.serialize_type = serialize_type
        wire = decode_command(encode_command(req)[4:])
        assert v.check(Conn(), wire) is not None


# --- permissions, addresses, accounts ---------------------------------------------------------


def test_permission_strings_and_checks_follow_apache() -> None:
    assert [parse_perm(p) for p in ("PUB", " SUB ", "PUB|SUB", "SUB|PUB", "DENY", "ALL", None)] \
        == [PERM_PUB, PERM_SUB, PERM_PUB | PERM_SUB, PERM_PUB | PERM_SUB, PERM_DENY, PERM_DENY,
            PERM_DENY]
    assert perm_allows(PERM_PUB, PERM_PUB | PERM_SUB)
    assert not perm_allows(PERM_PUB, PERM_SUB)
    assert not perm_allows(PERM_SUB, PERM_SUB | PERM_DENY)
    assert perm_allows(PERM_ANY, PERM_SUB) and not perm_allows(PERM_ANY, PERM_DENY)


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.0.1", ["192.168.0.1"], ["192.168.0.10"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
    ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1", "::1"]),
    ("10.1-10.*.5", ["10.3.200.5"], ["10.11.0.5", "10.3.0.6"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
])
def test_remote_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    p = AddressPattern(pattern)
    assert all(p.matches(h) for h in yes) and not any(p.matches(h) for h in no)


@pytest.mark.parametrize("account", [
    {"access_key": "short", "secret_key": "12345678"},
    {"access_key": "longenough", "secret_key": "123456"},
    {"access_key": "longenough", "secret_key": "12345678", "topic_perms": ["noequals"]},
    {"access_key": "longenough", "secret_key": "12345678", "surprise": 1},
    {"access_key": "longenough", "secret_key": "12345678", "admin": "yes"},
    {"access_key": "longenough", "secret_key": "12345678", "white_remote_address": "1.2.x.4"},
])
def test_bad_accounts_are_refused(account: dict[str, Any]) -> None:
    with pytest.raises(AclConfigError):
        AclAccount.from_config(account)


def test_apache_camel_case_keys_are_accepted() -> None:
    account = AclAccount.from_config({"accessKey": "RocketMQ", "secretKey": "12345678",
                                      "whiteRemoteAddress": "192.168.0.*", "admin": True,
                                      "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
                                      "topicPerms": ["topicB=PUB|SUB"], "groupPerms": ["g=DENY"]})
    assert account.admin and account.topic_perms == {"topicB": PERM_PUB | PERM_SUB}
    assert account.group_perms == {"%RETRY%g": PERM_DENY}
    assert account.perm_for("other") == (PERM_DENY, False)
    assert account.perm_for("%RETRY%other") == (PERM_SUB, True)


def test_config_section_is_parsed_and_validated(tmp_path: Any) -> None:
    path = tmp_path / "lw.toml"
    path.write_text('[rocketmq.acl]\nenabled = true\nglobal_white_remote_addresses = ["10.*.*.*"]'
                    '\n[[rocketmq.acl.accounts]]\naccess_key = "RocketMQ"\nsecret_key = "12345678"'
                    '\ntopic_perms = ["a=PUB"]\ntenant = "acme"\n')
    acl = load_config(path).rocketmq.acl
    assert acl.enabled and acl.accounts[0]["tenant"] == "acme"
    assert load_config(None).rocketmq.acl.enabled is False
    path.write_text('[rocketmq.acl]\nenabled = true\n[[rocketmq.acl.accounts]]\n'
                    'access_key = "ak"\nsecret_key = "sk"\n')
    with pytest.raises(ConfigError, match="longer than 6"):
        load_config(path)


# --- the validator ----------------------------------------------------------------------------


def test_wrong_or_missing_credentials_are_refused() -> None:
    v = validator()
    ext = {"a": "PG", "b": "orders"}
    assert v.check(Conn(), signed(RequestCode.SEND_MESSAGE_V2, ext, b"x")) is not None
    assert "No accessKey" in refusal(v, command(RequestCode.SEND_MESSAGE_V2, ext, b"x"))
    assert "No acl config for Nobody12" in refusal(
        v, signed(RequestCode.SEND_MESSAGE_V2, ext, b"x", ak="Nobody12"))
    assert "Check signature failed" in refusal(
        v, signed(RequestCode.SEND_MESSAGE_V2, ext, b"x", sk="wrong-secret"))
    tampered = signed(RequestCode.SEND_MESSAGE_V2, ext, b"x")
    tampered.body = b"y"  # the body is signed too
    assert "Check signature failed" in refusal(v, tampered)
    moved = signed(RequestCode.SEND_MESSAGE_V2, ext, b"x")
    moved.ext_fields["b"] = "other"
    assert "Check signature failed" in refusal(v, moved)


def test_topic_and_group_permissions_per_request_code() -> None:
    v = validator()
    assert "topic=denied" in refusal(
        v, signed(RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "topic": "denied"}))
    assert "topic=readonly" in refusal(
        v, signed(RequestCode.SEND_BATCH_MESSAGE, {"a": "PG", "b": "readonly"}))
    v.check(Conn(), signed(RequestCode.PULL_MESSAGE, {"topic": "readonly",
                                                       "consumerGroup": "CG"}))
    assert "group=blocked" in refusal(
        v, signed(RequestCode.PULL_MESSAGE, {"topic": "readonly", "consumerGroup": "blocked"}))
    assert "group=blocked" in refusal(
        v, signed(RequestCode.QUERY_CONSUMER_OFFSET, {"topic": "t", "consumerGroup": "blocked"}))
    # a retry topic is its group: SUB is enough to re-send to it
    v.check(Conn(), signed(RequestCode.SEND_MESSAGE_V2, {"a": "CG", "b": "%RETRY%CG"}))
    assert "topic=denied" in refusal(
        v, signed(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "CG", "originTopic": "denied"}))
    heartbeat = json.dumps({"clientID": "c", "consumerDataSet": [
        {"groupName": "CG", "subscriptionDataSet": [{"topic": "ok"}, {"topic": "denied"}]}],
        "producerDataSet": []}).encode()
    assert "topic=denied" in refusal(v, signed(RequestCode.HEART_BEAT, {}, heartbeat))
    assert "not JSON" in refusal(v, signed(RequestCode.HEART_BEAT, {}, b"{nope"))
    assert required_resources(command(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "topic": "t", "consumerGroup": "g"})) == {"t": PERM_SUB, "%RETRY%g": PERM_SUB}
    # resetting a group's offsets (222) needs what committing them needs
    assert "group=blocked" in refusal(v, signed(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
        "topic": "t", "group": "blocked", "timestamp": "-1", "isForce": "true"}))
    assert "topic=denied" in refusal(v, signed(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
        "topic": "denied", "group": "CG", "timestamp": "-1", "isForce": "true"}))


def test_admin_codes_need_an_admin_account() -> None:
    v = validator({"access_key": AK, "secret_key": SK, "default_topic_perm": "PUB|SUB"},
                  {"access_key": "AdminKey", "secret_key": SK, "admin": True})
    create = {"topic": "new", "readQueueNums": "4", "writeQueueNums": "4"}
    assert "Need admin permission for request code=17" in refusal(
        v, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    assert v.check(Conn(), signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create,
                                  ak="AdminKey")) is not None


def test_white_listed_addresses_pass_without_a_signature() -> None:
    v = validator({"access_key": AK, "secret_key": SK, "white_remote_address": "192.168.0.*"},
                  white=("10.1.*.*",))
    unsigned = command(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "denied"})
    assert v.check(Conn("10.1.2.3"), unsigned) is None  # global: no checks at all
    unsigned.ext_fields["AccessKey"] = AK
    assert v.check(Conn("192.168.0.7"), unsigned) is not None  # the account's own white list
    assert "Check signature failed" in refusal(v, unsigned, Conn("192.168.1.7"))


def test_peer_results_are_cached_per_connection() -> None:
    v = validator(white=("10.1.*.*",))
    conn = Conn("10.1.2.3")
    v.check(conn, command(RequestCode.HEART_BEAT, {}))
    conn.peer = ("172.16.0.1", 1)  # cached: the connection's peer never changes
    v.check(conn, command(RequestCode.HEART_BEAT, {}))
    refusal(v, command(RequestCode.HEART_BEAT, {}), Conn("172.16.0.1"))


class FakeNamespaces:
    def namespace_of(self, topic: str) -> str:
        parts = topic.split(".", 2)
        return f"{parts[0]}/{parts[1]}" if len(parts) == 3 else "public/default"

    def principal_allowed(self, topic: str, principal: str) -> bool:
        return not topic.startswith("secret.") or principal == "User:AliceKey"


def test_tenant_accounts_only_reach_their_tenants_topics() -> None:
    acme = {"access_key": "AcmeKey1", "secret_key": SK, "tenant": "acme",
            "default_topic_perm": "PUB|SUB", "default_group_perm": "SUB"}
    plain = {"access_key": AK, "secret_key": SK, "default_topic_perm": "PUB|SUB",
             "default_group_perm": "SUB"}
    alice = {**plain, "access_key": "AliceKey"}
    v = validator(acme, plain, alice, namespaces=FakeNamespaces())
    send = RequestCode.SEND_MESSAGE_V2
    v.check(Conn(), signed(send, {"a": "PG", "b": "acme%sales%orders"}, ak="AcmeKey1"))
    assert "belongs to tenant other" in refusal(
        v, signed(send, {"a": "PG", "b": "other%ns%orders"}, ak="AcmeKey1"))
    assert "belongs to tenant public" in refusal(
        v, signed(send, {"a": "PG", "b": "orders"}, ak="AcmeKey1"))
    # without a tenant: the tenant's allowed principals decide (User:<access key>)
    v.check(Conn(), signed(send, {"a": "PG", "b": "orders"}))
    assert "belongs to tenant secret" in refusal(v, signed(send, {"a": "PG", "b": "secret%x%t"}))
    v.check(Conn(), signed(send, {"a": "PG", "b": "secret%x%t"}, ak="AliceKey"))
    # retry topics and groups belong to no tenant
    v.check(Conn(), signed(RequestCode.PULL_MESSAGE,
                           {"topic": "%RETRY%CG", "consumerGroup": "CG"}, ak="AcmeKey1"))


@settings(max_examples=300, deadline=None)
@given(ext=st.dictionaries(st.text(max_size=12), st.text(max_size=20), max_size=8),
       body=st.binary(max_size=64),
       code=st.sampled_from([int(c) for c in RequestCode] + [0, 9999]),
       with_key=st.booleans(), white=st.booleans())
def test_random_ext_fields_never_crash_the_verifier(ext: dict[str, str], body: bytes,
                                                    code: int, with_key: bool,
                                                    white: bool) -> None:
    v = validator(white=("10.9.*.*",) if white else ())
    if with_key:
        ext = sign_request(dict(ext), body, AK, SK) if code % 2 else {**ext, "AccessKey": AK}
    try:
        v.check(Conn(), command(code, ext, body))
    except AclRefusedError:
        pass
