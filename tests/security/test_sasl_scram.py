"""The SASL state machine and SCRAM maths (protocols/kafka/sasl.py), with plain bytes."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from protocols.kafka import sasl
from protocols.kafka.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from protocols.kafka.sasl import SaslSession, SaslState, make_credential

# RFC 7677 section 3 test vector (SCRAM-SHA-256)
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda _n: RFC_SERVER_NONCE)
    credential = make_credential(sasl.SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    session = SaslSession()
    assert session.allows(sasl.API_VERSIONS) and not session.allows(3)
    session.handshake(sasl.SCRAM_SHA_256, 1)
    assert session.username_in(RFC_CLIENT_FIRST) == "user"
    assert session.authenticate(RFC_CLIENT_FIRST, credential) == RFC_SERVER_FIRST
    assert session.state is SaslState.AWAIT_SCRAM_FINAL
    assert session.username_in(RFC_CLIENT_FINAL) is None
    assert session.authenticate(RFC_CLIENT_FINAL, None) == RFC_SERVER_FINAL
    assert session.authenticated and session.principal == "User:user"
    assert session.allows(0) and not session.allows(sasl.SASL_HANDSHAKE)


def _client_final(mech: str, password: str, client_first_bare: str, server_first: str) -> str:
    name = sasl.SCRAM_HASHES[mech]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(name, password.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    sig = hmac.new(stored, auth, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mech", [sasl.SCRAM_SHA_256, sasl.SCRAM_SHA_512])
def test_scram_wrong_password_fails(mech: str) -> None:
    credential = make_credential(mech, "right")
    session = SaslSession()
    session.handshake(mech, 1)
    server_first = session.authenticate(b"n,,n=al=2Cice,r=abc", credential).decode()
    final = _client_final(mech, "wrong", "n=al=2Cice,r=abc", server_first)
    with pytest.raises(SaslAuthenticationFailedError):
        session.authenticate(final.encode(), None)
    assert session.failed and not session.allows(sasl.SASL_AUTHENTICATE)


def test_scram_right_password_and_escaped_name() -> None:
    mech = sasl.SCRAM_SHA_512
    credential = make_credential(mech, "right")
    session = SaslSession()
    session.handshake(mech, 1)
    assert session.username_in(b"n,,n=al=2Cice,r=abc") == "al,ice"
    server_first = session.authenticate(b"n,,n=al=2Cice,r=abc", credential).decode()
    final = _client_final(mech, "right", "n=al=2Cice,r=abc", server_first)
    assert session.authenticate(final.encode(), None).startswith(b"v=")
    assert session.principal == "User:al,ice"


def test_unknown_user_and_mechanism_mismatch_fail() -> None:
    session = SaslSession()
    session.handshake(sasl.SCRAM_SHA_512, 1)
    with pytest.raises(SaslAuthenticationFailedError):
        session.authenticate(b"n,,n=nobody,r=abc", None)
    session = SaslSession()
    session.handshake(sasl.SCRAM_SHA_512, 1)
    with pytest.raises(SaslAuthenticationFailedError):
        session.authenticate(b"n,,n=u,r=abc", make_credential(sasl.SCRAM_SHA_256, "p"))


def test_plain_checks_against_scram_credential() -> None:
    credential = make_credential(sasl.SCRAM_SHA_512, "secret")
    ok = SaslSession()
    ok.handshake(sasl.PLAIN, 1)
    assert ok.username_in(b"\0bob\0secret") == "bob"
    assert ok.authenticate(b"\0bob\0secret", credential) == b""
    assert ok.principal == "User:bob"
    bad = SaslSession()
    bad.handshake(sasl.PLAIN, 0)
    assert bad.raw_tokens
    with pytest.raises(SaslAuthenticationFailedError):
        bad.authenticate(b"\0bob\0nope", credential)
    other = SaslSession()
    other.handshake(sasl.PLAIN, 1)
    with pytest.raises(SaslAuthenticationFailedError):
        other.authenticate(b"mallory\0bob\0secret", credential)  # authzid must be the user


def test_transition_table_refuses_out_of_order_input() -> None:
    session = SaslSession((sasl.SCRAM_SHA_512,))
    with pytest.raises(IllegalSaslStateError):
        session.authenticate(b"n,,n=u,r=a", None)  # token before the handshake
    assert session.failed
    session = SaslSession((sasl.SCRAM_SHA_512,))
    with pytest.raises(UnsupportedSaslMechanismError):
        session.handshake(sasl.PLAIN, 1)
    assert session.failed
    session = SaslSession()
    session.handshake(sasl.PLAIN, 1)
    with pytest.raises(IllegalSaslStateError):
        session.handshake(sasl.PLAIN, 1)  # a second handshake


def test_malformed_scram_tokens_fail_cleanly() -> None:
    for token in (b"p=tls-unique,,n=u,r=a", b"n,,r=a", b"garbage", b"\xff\xfe"):
        session = SaslSession()
        session.handshake(sasl.SCRAM_SHA_256, 1)
        with pytest.raises(SaslAuthenticationFailedError):
            session.authenticate(token, make_credential(sasl.SCRAM_SHA_256, "p"))
        assert session.failed


def test_credential_round_trip_and_minimum_iterations() -> None:
    # A password no base64 salt or key can contain by chance ("pw" once appeared in one).
    secret = "correct horse battery staple"
    credential = make_credential(sasl.SCRAM_SHA_256, secret)
    assert sasl.ScramCredential.from_json(credential.to_json()) == credential
    assert secret not in str(credential.to_json())
    with pytest.raises(ValueError):
        make_credential(sasl.SCRAM_SHA_256, "pw", iterations=1000)
