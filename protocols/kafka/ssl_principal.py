"""The principal of a TLS client certificate, as Kafka's `ssl.principal.mapping.rules` gives it.

The certificate's subject becomes a distinguished name in RFC 2253 form, as Java's
`X500Principal.getName()` writes it (the most specific RDN first, "CN=alice,OU=eng,O=acme,C=DE",
short names for the usual attributes, special characters escaped with a backslash); the rules
then turn it into a user name, and the principal is "User:<name>":

- `DEFAULT`: the DN unchanged;
- `RULE:pattern/replacement/` with an optional `L` or `U` (lower or upper case the result):
  when the pattern matches the whole DN the replacement is applied (Java syntax: `$1` for a
  group, `\\` escapes), e.g. `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/`.

The first rule that matches decides; when none does the client is refused, as Kafka fails the
authentication.  A rule list is given as a list of rule strings, or as Kafka's single
comma-separated string.

This module must never do I/O: the listener hands it the parsed subject of a verified
certificate (`ssl.SSLSocket.getpeercert()["subject"]`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# OpenSSL's long attribute names (Python's getpeercert) -> the short names Java writes.
_SHORT_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_ESCAPED = set(',+"\\<>;')
_RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class NoMatchingRuleError(ValueError):
    """No mapping rule matches the certificate's DN (the client is refused)."""


class BadMappingRuleError(ValueError):
    """A rule that Kafka's syntax does not allow (a configuration error)."""


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _ESCAPED else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """RFC 2253 DN of a getpeercert() subject (its RDNs come least specific first)."""
    rdns = []
    for rdn in subject:
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}"
                             for name, value in rdn))
    return ",".join(reversed(rdns))


def _java_replacement(template: str) -> str:
    """Java's Matcher replacement syntax ($n, \\x) -> Python's re template."""
    out = []
    i = 0
    while i < len(template):
        c = template[i]
        if c == "\\" and i + 1 < len(template):
            out.append(template[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(template) and template[i + 1].isdigit():
            j = i + 1
            while j < len(template) and template[j].isdigit():
                j += 1
            out.append(f"\\g<{template[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(rules: str | Sequence[str]) -> list[MappingRule]:
    """Kafka's rule syntax, as one string or a list of rules."""
    text = rules if isinstance(rules, str) else ",".join(rules)
    parsed: list[MappingRule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise BadMappingRuleError(f"invalid ssl principal mapping rule at {text[pos:]!r}")
        if match.group(1) == "DEFAULT":
            parsed.append(MappingRule(None))
        else:
            try:
                pattern = re.compile(match.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise BadMappingRuleError(f"bad pattern in {match.group(1)!r}: {exc}") from exc
            parsed.append(MappingRule(pattern, _java_replacement(
                match.group(3).replace("\\/", "/")), match.group(4)))
        pos = match.end()
    return parsed or [MappingRule(None)]


@dataclass(frozen=True)
class CertificateIdentity:
    """A TLS connection's identity, in `RequestContext.session` (only `.principal` is read)."""

    principal: str


class SslPrincipalMapper:
    """DN -> "User:<name>" by the first matching rule."""

    def __init__(self, rules: str | Sequence[str] = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def name_of(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"no ssl principal mapping rule matches {dn!r}")

    def principal(self, subject: Iterable[Iterable[tuple[str, str]]]) -> str:
        return "User:" + self.name_of(distinguished_name(subject))
