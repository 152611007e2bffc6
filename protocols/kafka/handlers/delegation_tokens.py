"""CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40) and
DescribeDelegationToken (41): Kafka's delegation tokens (KIP-48, KIP-373 owners).

The tokens live in `broker.delegation_tokens` (gateway/security/delegation_tokens.py); a
broker without a secret key has None there and answers all four DELEGATION_TOKEN_AUTH_DISABLED.
Kafka's rules, as its KafkaApis and DelegationTokenManager apply them:

- only a connection that logged in with SASL, and not with a token, may use these APIs
  (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED otherwise: a token cannot make or renew tokens, and
  an unauthenticated or TLS-only client has no principal worth a token);
- anyone may create a token for itself; a token for another owner (v3's OwnerPrincipalName)
  needs CREATE_TOKENS on that User resource (else DELEGATION_TOKEN_AUTHORIZATION_FAILED);
- renew and expire name the token by its HMAC and are allowed to its owner, requester and
  renewers (DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_OWNER_MISMATCH,
  DELEGATION_TOKEN_EXPIRED);
- describe lists the tokens the caller owns, requested or may renew, and those it has
  DESCRIBE on (the DelegationToken resource) or DESCRIBE_TOKENS on (the owner's User
  resource); Owners null means all such tokens, an empty list none.

This module must never log an HMAC.
"""

from __future__ import annotations

from typing import Any, Protocol

from protocols.kafka.acl_model import (
    OP_CREATE_TOKENS,
    OP_DESCRIBE,
    OP_DESCRIBE_TOKENS,
    RES_DELEGATION_TOKEN,
    RES_USER,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.handlers.error_responses import error_code_of

USER_TYPE = "User"


class TokenInfoApi(Protocol):
    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int


class DelegationTokensApi(Protocol):
    """gateway.security.delegation_tokens.DelegationTokenStore, as these handlers use it."""

    def hmac_of(self, token_id: str) -> bytes: ...

    async def create(self, owner: str, requester: str, renewers: tuple[str, ...],
                     max_lifetime_ms: int) -> Any: ...

    async def renew(self, token_hmac: bytes, principal: str, renew_period_ms: int) -> int: ...

    async def expire(self, token_hmac: bytes, principal: str, period_ms: int) -> int: ...

    async def live_tokens(self) -> list[Any]: ...


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _refusal(ctx: RequestContext) -> tuple[DelegationTokensApi | None, ErrorCode]:
    """The token store, or the code refusing any token request on this connection."""
    tokens: DelegationTokensApi | None = getattr(ctx.broker, "delegation_tokens", None)
    if tokens is None:
        return None, ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    session = ctx.session
    if (session is None or not getattr(session, "authenticated", False)
            or getattr(session, "token_authenticated", False)):
        return None, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return tokens, ErrorCode.NONE


def _principal_of(kind: Any, name: Any) -> str | None:
    """A "Type:name" principal from a request's pair, None when the pair is unusable."""
    kind, name = str(kind or ""), str(name or "")
    if not kind or not name or ":" in kind:
        return None
    return f"{kind}:{name}"


async def handle_create_delegation_token(ctx: RequestContext, header: RequestHeader,
                                         body: dict) -> dict:
    requester = ctx.principal
    answer: dict[str, Any] = {
        "error_code": 0, "principal_type": "", "principal_name": "",
        "token_requester_principal_type": "", "token_requester_principal_name": "",
        "issue_timestamp_ms": -1, "expiry_timestamp_ms": -1, "max_timestamp_ms": -1,
        "token_id": "", "hmac": b"", "throttle_time_ms": 0}
    tokens, code = _refusal(ctx)
    if tokens is None:
        return {**answer, "error_code": int(code)}
    renewers = []
    for item in body.get("renewers") or []:
        renewer = _principal_of(item.get("principal_type"), item.get("principal_name"))
        if renewer is None or not renewer.startswith(f"{USER_TYPE}:"):
            return {**answer, "error_code": int(ErrorCode.INVALID_PRINCIPAL_TYPE)}
        renewers.append(renewer)
    owner = requester
    if body.get("owner_principal_name"):
        named = _principal_of(body.get("owner_principal_type") or USER_TYPE,
                              body.get("owner_principal_name"))
        if named is None or not named.startswith(f"{USER_TYPE}:"):
            return {**answer, "error_code": int(ErrorCode.INVALID_PRINCIPAL_TYPE)}
        if named != requester and not ctx.authorize(OP_CREATE_TOKENS, RES_USER, named):
            return {**answer, "error_code": int(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)}
        owner = named
    try:
        info = await tokens.create(owner, requester, tuple(dict.fromkeys(renewers)),
                                   int(body.get("max_lifetime_ms", -1)))
    except Exception as exc:  # noqa: BLE001 - the store failed: the answer says so
        return {**answer, "error_code": int(error_code_of(exc))}
    owner_type, owner_name = _split(info.owner)
    requester_type, requester_name = _split(info.requester)
    return {**answer, "principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name,
            "issue_timestamp_ms": info.issue_ms, "expiry_timestamp_ms": info.expiry_ms,
            "max_timestamp_ms": info.max_ms, "token_id": info.token_id,
            "hmac": tokens.hmac_of(info.token_id)}


async def _change(ctx: RequestContext, body: dict, period_key: str, renew: bool) -> dict:
    tokens, code = _refusal(ctx)
    if tokens is None:
        return {"error_code": int(code), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}
    token_hmac = bytes(body.get("hmac") or b"")
    period = int(body.get(period_key, -1))
    try:
        if renew:
            expiry = await tokens.renew(token_hmac, ctx.principal, period)
        else:
            expiry = await tokens.expire(token_hmac, ctx.principal, period)
    except KafkaProtocolError as exc:
        return {"error_code": int(exc.code), "expiry_timestamp_ms": -1, "throttle_time_ms": 0}
    except Exception as exc:  # noqa: BLE001 - the store failed: the answer says so
        return {"error_code": int(error_code_of(exc)), "expiry_timestamp_ms": -1,
                "throttle_time_ms": 0}
    return {"error_code": 0, "expiry_timestamp_ms": expiry, "throttle_time_ms": 0}


async def handle_renew_delegation_token(ctx: RequestContext, header: RequestHeader,
                                        body: dict) -> dict:
    return await _change(ctx, body, "renew_period_ms", renew=True)


async def handle_expire_delegation_token(ctx: RequestContext, header: RequestHeader,
                                         body: dict) -> dict:
    return await _change(ctx, body, "expiry_time_period_ms", renew=False)


def _may_describe(ctx: RequestContext, info: TokenInfoApi) -> bool:
    principal = ctx.principal
    if principal in (info.owner, info.requester) or principal in info.renewers:
        return True
    return (ctx.authorize(OP_DESCRIBE, RES_DELEGATION_TOKEN, info.token_id)
            or ctx.authorize(OP_DESCRIBE_TOKENS, RES_USER, info.owner))


async def handle_describe_delegation_token(ctx: RequestContext, header: RequestHeader,
                                           body: dict) -> dict:
    tokens, code = _refusal(ctx)
    if tokens is None:
        return {"error_code": int(code), "tokens": [], "throttle_time_ms": 0}
    owners_field = body.get("owners")
    if owners_field is not None and not owners_field:
        return {"error_code": 0, "tokens": [], "throttle_time_ms": 0}
    owners = None if owners_field is None else {
        _principal_of(o.get("principal_type"), o.get("principal_name")) for o in owners_field}
    try:
        found = await tokens.live_tokens()
    except Exception as exc:  # noqa: BLE001 - the store failed: the answer says so
        return {"error_code": int(error_code_of(exc)), "tokens": [], "throttle_time_ms": 0}
    described = []
    for info in found:
        if owners is not None and info.owner not in owners and not owners & set(info.renewers):
            continue
        if not _may_describe(ctx, info):
            continue
        owner_type, owner_name = _split(info.owner)
        requester_type, requester_name = _split(info.requester)
        described.append({
            "principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name,
            "issue_timestamp": info.issue_ms, "expiry_timestamp": info.expiry_ms,
            "max_timestamp": info.max_ms, "token_id": info.token_id,
            "hmac": tokens.hmac_of(info.token_id),
            "renewers": [dict(zip(("principal_type", "principal_name"), _split(r),
                                  strict=True)) for r in info.renewers]})
    return {"error_code": 0, "tokens": described, "throttle_time_ms": 0}
