"""The Kafka listener's security, assembled from configuration: TLS, SASL, credentials, ACLs.

`setup_kafka_security(config, store)` builds what the broker and listener need:

- a server-side `ssl.SSLContext` from kafka.ssl_certfile / ssl_keyfile for SSL and SASL_SSL
  (TLS 1.2 or newer);
- the SASL mechanisms for SASL_PLAINTEXT and SASL_SSL (None otherwise: no authentication,
  every client is User:ANONYMOUS);
- the credential store (gateway/security/credentials.py), after applying the users listed in the
  configuration ([security] users, and the [[users]] tables of security.users_file): each is
  created, or its password reset, at start -- the way to add users to a standalone whose data
  directory the running process locks;
- the ACL store and authorizer (gateway/security/acl_store.py) with super users and
  allow_everyone_if_no_acl_found; authorisation is enforced when security.authorization says
  so ("auto": on every listener but PLAINTEXT);
- on an SSL listener, the mapper from a client certificate to its principal
  (kafka.ssl_client_auth, kafka.ssl_principal_mapping_rules);
- the delegation token store (gateway/security/delegation_tokens.py) when
  security.delegation_token_secret_key(_file) is set, else None (tokens disabled).

This module must never log passwords or keep them after the credentials are written.
"""

from __future__ import annotations

import logging
import ssl
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.settings import Config, ConfigError
from gateway.security.acl_store import AclStore, Authorizer
from gateway.security.credentials import CredentialStore
from gateway.security.delegation_tokens import DelegationTokenStore
from ledger_backend.metadata.store import MetadataStore
from ledger_backend.secret_files import read_secret_file
from protocols.kafka.sasl import SCRAM_SHA_256, SCRAM_SHA_512
from protocols.kafka.ssl_principal import SslPrincipalMapper

log = logging.getLogger("ledgerwire.security")


@dataclass
class KafkaSecurity:
    ssl_context: ssl.SSLContext | None
    sasl_mechanisms: tuple[str, ...] | None
    credentials: CredentialStore
    acls: AclStore
    authorizer: Authorizer
    # SSL listeners: the client certificate's principal (None: SASL decides, or no TLS)
    ssl_principal: SslPrincipalMapper | None = None
    # Kafka delegation tokens (None: disabled, no secret key configured)
    delegation_tokens: DelegationTokenStore | None = None


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}


def server_ssl_context(certfile: str, keyfile: str, *, client_auth: str = "none",
                       cafile: str = "") -> ssl.SSLContext:
    """TLS 1.2+; with client_auth requested/required, client certificates signed by the CA
    of `cafile` are asked for (Kafka's ssl.client.auth)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # no client-initiated TLS 1.2 renegotiation (a CPU sink; gateway/security/tls_receive.py)
    context.options |= ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS certificate {certfile} / key {keyfile}: {exc}") from exc
    if client_auth != "none":
        try:
            context.load_verify_locations(cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the client CA {cafile}: {exc}") from exc
        context.verify_mode = _CLIENT_AUTH[client_auth]
    return context


def delegation_tokens_of(config: Config, store: MetadataStore) -> DelegationTokenStore | None:
    """The token store when a secret key is configured (security.delegation_token_*)."""
    s = config.security
    key = s.delegation_token_secret_key
    if s.delegation_token_secret_key_file:
        try:
            key = read_secret_file(s.delegation_token_secret_key_file,
                                   "delegation token secret key")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read security.delegation_token_secret_key_file: "
                              f"{exc}") from None
    if not key:
        return None
    try:
        return DelegationTokenStore(store, key, max_lifetime_ms=s.delegation_token_max_lifetime_ms,
                                    renew_ms=s.delegation_token_expiry_time_ms)
    except ValueError as exc:
        raise ConfigError(f"security.delegation_token_secret_key: {exc}") from None


def configured_users(config: Config) -> list[dict[str, Any]]:
    """The [security] users plus those of security.users_file."""
    users = list(config.security.users)
    if config.security.users_file:
        path = Path(config.security.users_file)
        try:
            table = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read users file {path}: {exc}") from exc
        extra = table.get("users", [])
        if not isinstance(extra, list) or not all(
                isinstance(u, dict) and u.get("name") and "password" in u for u in extra):
            raise ConfigError(f"{path}: [[users]] tables need a name and a password")
        users.extend(extra)
    return users


async def setup_kafka_security(config: Config, store: MetadataStore) -> KafkaSecurity:
    k = config.kafka
    protocol = k.security_protocol
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        ssl_context = server_ssl_context(k.ssl_certfile, k.ssl_keyfile,
                                         client_auth=k.ssl_client_auth, cafile=k.ssl_cafile)
    ssl_principal = (SslPrincipalMapper(k.ssl_principal_mapping_rules) if protocol == "SSL"
                     else None)
    mechanisms = tuple(k.sasl_mechanisms) if protocol.startswith("SASL_") else None
    credentials = CredentialStore(store)
    for user in configured_users(config):
        wanted = tuple(user.get("mechanisms") or (SCRAM_SHA_256, SCRAM_SHA_512))
        changed = await credentials.ensure_user(str(user["name"]), str(user["password"]),
                                                wanted)
        if changed:
            log.info("SASL user set from configuration", extra={"user": user["name"]})
    acls = AclStore(store)
    await acls.load()
    authorizer = Authorizer(
        acls,
        enabled=config.security.authorization_enabled(protocol),
        super_users=config.security.super_users,
        allow_if_no_acl=config.security.allow_everyone_if_no_acl_found,
    )
    log.info("kafka security", extra={"protocol": protocol, "sasl": mechanisms,
                                      "authorization": authorizer.enabled})
    return KafkaSecurity(ssl_context, mechanisms, credentials, acls, authorizer, ssl_principal,
                         delegation_tokens_of(config, store))
