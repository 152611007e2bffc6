"""Kafka's ssl.principal.mapping.rules on certificate subjects (protocols/kafka/ssl_principal)."""

from __future__ import annotations

import pytest

from protocols.kafka.ssl_principal import (
    BadMappingRuleError,
    NoMatchingRuleError,
    SslPrincipalMapper,
    distinguished_name,
)

ALICE = ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
         (("organizationalUnitName", "eng"),), (("commonName", "Alice"),))


def test_subject_becomes_an_rfc2253_dn_most_specific_first() -> None:
    assert distinguished_name(ALICE) == "CN=Alice,OU=eng,O=Acme\\, Inc,C=DE"
    multi = ((("commonName", "x"), ("userId", "7")),)
    assert distinguished_name(multi) == "CN=x+UID=7"


def test_rules_as_kafka_applies_them() -> None:
    mapper = SslPrincipalMapper(["RULE:^CN=([^,]+),OU=eng,.*$/$1/L", "DEFAULT"])
    assert mapper.principal(ALICE) == "User:alice"
    bob = ((("organizationName", "lw"),), (("commonName", "bob"),))
    assert mapper.principal(bob) == "User:CN=bob,O=lw"  # DEFAULT: the DN itself
    kafka_string = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U, DEFAULT")
    assert kafka_string.principal(ALICE) == "User:ALICE@ENG"
    escaped = SslPrincipalMapper(r"RULE:^CN=(.*?),.*$/svc\/$1/")
    assert escaped.principal(ALICE) == "User:svc/Alice"
    with pytest.raises(NoMatchingRuleError):
        SslPrincipalMapper("RULE:^CN=nobody,.*$/x/").principal(ALICE)
    with pytest.raises(BadMappingRuleError):
        SslPrincipalMapper("RULE:no-slashes")
