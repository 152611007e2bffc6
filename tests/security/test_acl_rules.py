"""ACL decisions (protocols/kafka/acl_model.py) and the ACL store
(gateway/security/acl_store.py)."""

from __future__ import annotations

import pytest
import trio

from gateway.security.acl_store import AclStore, Authorizer
from ledger_backend.metadata import open_store
from protocols.kafka import acl_model as m
from protocols.kafka.acl_model import AclBinding, AclError, AclFilter, decide


def acl(name: str, op: int, perm: int = m.PERM_ALLOW, principal: str = "User:alice",
        pattern: int = m.PAT_LITERAL, rtype: int = m.RES_TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(acls: list[AclBinding], op: int, name: str = "orders",
            principal: str = "User:alice", rtype: int = m.RES_TOPIC,
            allow_if_no_acl: bool = False) -> bool:
    return decide(acls, principal, "10.0.0.1", op, rtype, name, allow_if_no_acl=allow_if_no_acl)


def test_allow_deny_and_implications() -> None:
    acls = [acl("orders", m.OP_WRITE)]
    assert allowed(acls, m.OP_WRITE)
    assert allowed(acls, m.OP_DESCRIBE)  # WRITE implies DESCRIBE
    assert not allowed(acls, m.OP_READ)
    assert not allowed(acls, m.OP_WRITE, principal="User:bob")
    everyone = acls + [acl("orders", m.OP_ALL, principal="User:*")]
    assert allowed(everyone, m.OP_READ, principal="User:bob")
    denied = acls + [acl("orders", m.OP_WRITE, m.PERM_DENY)]
    assert not allowed(denied, m.OP_WRITE)
    assert allowed([acl("orders", m.OP_ALTER_CONFIGS)], m.OP_DESCRIBE_CONFIGS)


def test_patterns_and_no_acl_default() -> None:
    assert allowed([acl("ord", m.OP_READ, pattern=m.PAT_PREFIXED)], m.OP_READ, "orders")
    assert not allowed([acl("ord", m.OP_READ, pattern=m.PAT_PREFIXED)], m.OP_READ, "payments")
    assert allowed([acl("*", m.OP_READ)], m.OP_READ, "anything")
    assert not allowed([], m.OP_READ)
    assert allowed([], m.OP_READ, allow_if_no_acl=True)
    # an ACL for someone else on the resource means "not no-ACL" any more
    assert not allowed([acl("orders", m.OP_READ, principal="User:bob")], m.OP_READ,
                       allow_if_no_acl=True)
    host_bound = [acl("orders", m.OP_READ, host="10.9.9.9")]
    assert not allowed(host_bound, m.OP_READ)


def test_filters_and_validation() -> None:
    a = acl("orders", m.OP_READ)
    p = acl("ord", m.OP_WRITE, pattern=m.PAT_PREFIXED)
    assert AclFilter().matches(a) and AclFilter().matches(p)
    match = AclFilter(resource_type=m.RES_TOPIC, resource_name="orders", pattern_type=m.PAT_MATCH)
    assert match.matches(a) and match.matches(p)
    literal = AclFilter(resource_name="orders", pattern_type=m.PAT_LITERAL)
    assert literal.matches(a) and not literal.matches(p)
    assert not AclFilter(operation=m.OP_WRITE).matches(a)
    with pytest.raises(AclError):
        acl("orders", m.OP_ANY).validate()
    with pytest.raises(AclError):
        acl("x", m.OP_ALTER, rtype=m.RES_CLUSTER).validate()
    with pytest.raises(AclError):
        acl("orders", m.OP_READ, principal="alice").validate()


async def test_store_persists_and_other_instances_see_changes() -> None:
    store = await open_store("memory:")
    try:
        first, second = AclStore(store), AclStore(store)
        async with trio.open_nursery() as nursery:
            await nursery.start(second.run)
            await first.create([acl("orders", m.OP_WRITE), acl("orders", m.OP_WRITE)])
            assert first.acls == (acl("orders", m.OP_WRITE),)
            with trio.fail_after(5):
                while not second.acls:  # noqa: ASYNC110 - filled by second's watch
                    await trio.sleep(0.01)
            authorizer = Authorizer(second, enabled=True, super_users=["User:root"])
            assert authorizer.authorize("User:alice", "h", m.OP_WRITE, m.RES_TOPIC, "orders")
            assert not authorizer.authorize("User:bob", "h", m.OP_WRITE, m.RES_TOPIC, "orders")
            assert authorizer.authorize("User:root", "h", m.OP_DELETE, m.RES_CLUSTER, "x")
            matched = await first.delete([AclFilter(principal="User:alice")])
            assert matched == [[acl("orders", m.OP_WRITE)]]
            with trio.fail_after(5):
                while second.acls:  # noqa: ASYNC110 - emptied by second's watch
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        reloaded = AclStore(store)
        await reloaded.load()
        assert reloaded.acls == ()
    finally:
        await store.close()


def test_authorizer_index_finds_literal_wildcard_and_prefixed_bindings() -> None:
    store = AclStore(None)  # type: ignore[arg-type]  # only the in-memory index is used
    store.acls = (acl("orders", m.OP_READ), acl("*", m.OP_DESCRIBE),
                  acl("ord", m.OP_WRITE, pattern=m.PAT_PREFIXED),
                  acl("pay", m.OP_WRITE, m.PERM_DENY, pattern=m.PAT_PREFIXED))
    authorizer = Authorizer(store, enabled=True, allow_if_no_acl=True)
    assert authorizer.authorize("User:alice", "h", m.OP_READ, m.RES_TOPIC, "orders")
    assert authorizer.authorize("User:alice", "h", m.OP_WRITE, m.RES_TOPIC, "ordinal")
    assert authorizer.authorize("User:alice", "h", m.OP_DESCRIBE, m.RES_TOPIC, "zzz")
    assert not authorizer.authorize("User:alice", "h", m.OP_WRITE, m.RES_TOPIC, "payments")
    assert not authorizer.authorize("User:bob", "h", m.OP_READ, m.RES_TOPIC, "orders")
    assert authorizer.authorize("User:bob", "h", m.OP_READ, m.RES_GROUP, "orders")  # no ACL
    assert {a.resource_name for a in store.on_resource(m.RES_TOPIC, "ordinal")} == {"*", "ord"}
