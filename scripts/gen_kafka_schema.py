"""Write protocols/kafka/schema/<family>.py from Apache Kafka's JSON message specs.

Usage:  python scripts/gen_kafka_schema.py [SPEC_DIR]
        (SPEC_DIR defaults to ../shared/reference/kafka-message-specs beside the repo; the
        share-group families come from kafka-share-specs beside it)

The committed table is plain Python data; this script only saves typing and keeps the table
faithful to the specs (tests/kafka_codec/test_schema_vs_spec.py checks it independently).
commonStructs are inlined where they are used.  Protocol quirks come from QUIRKS below.
Run `ruff format protocols/kafka/schema` afterwards.  It never touches any other file.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC_DIR = REPO.parent / "shared" / "reference" / "kafka-message-specs"
# KIP-932 share groups: the current specs live apart (the folder above has only the removed v0)
SHARE_SPEC_DIR = REPO.parent / "shared" / "reference" / "kafka-share-specs"
SCHEMA_DIR = REPO / "protocols" / "kafka" / "schema"

# module name -> [(API key, request spec stem without "Request")]
FAMILIES: dict[str, list[tuple[int, str]]] = {
    "produce": [(0, "Produce")],
    "fetch": [(1, "Fetch")],
    "list_offsets": [(2, "ListOffsets"), (23, "OffsetForLeaderEpoch")],
    "metadata": [(3, "Metadata"), (60, "DescribeCluster")],
    "api_versions": [(18, "ApiVersions")],
    "group_offsets": [(8, "OffsetCommit"), (9, "OffsetFetch"), (47, "OffsetDelete")],
    "groups": [
        (10, "FindCoordinator"),
        (11, "JoinGroup"),
        (12, "Heartbeat"),
        (13, "LeaveGroup"),
        (14, "SyncGroup"),
        (15, "DescribeGroups"),
        (16, "ListGroups"),
        (42, "DeleteGroups"),
    ],
    "consumer_groups": [(68, "ConsumerGroupHeartbeat"), (69, "ConsumerGroupDescribe")],
    "sasl": [(17, "SaslHandshake"), (36, "SaslAuthenticate")],
    "topics_admin": [
        (19, "CreateTopics"),
        (20, "DeleteTopics"),
        (21, "DeleteRecords"),
        (37, "CreatePartitions"),
    ],
    "transactions": [
        (22, "InitProducerId"),
        (24, "AddPartitionsToTxn"),
        (25, "AddOffsetsToTxn"),
        (26, "EndTxn"),
        (27, "WriteTxnMarkers"),
        (28, "TxnOffsetCommit"),
        (61, "DescribeProducers"),
    ],
    "acls": [(29, "DescribeAcls"), (30, "CreateAcls"), (31, "DeleteAcls")],
    "configs": [(32, "DescribeConfigs"), (33, "AlterConfigs"), (44, "IncrementalAlterConfigs")],
    "log_dirs": [(35, "DescribeLogDirs")],
    "leaders": [(43, "ElectLeaders")],
    "transactions_admin": [(65, "DescribeTransactions"), (66, "ListTransactions")],
    "scram_credentials": [
        (50, "DescribeUserScramCredentials"),
        (51, "AlterUserScramCredentials"),
    ],
    "client_quotas": [(48, "DescribeClientQuotas"), (49, "AlterClientQuotas")],
    "delegation_tokens": [
        (38, "CreateDelegationToken"),
        (39, "RenewDelegationToken"),
        (40, "ExpireDelegationToken"),
        (41, "DescribeDelegationToken"),
    ],
}

# Families generated from SHARE_SPEC_DIR (same layout).
SHARE_FAMILIES: dict[str, list[tuple[int, str]]] = {
    "share_groups": [
        (76, "ShareGroupHeartbeat"),
        (77, "ShareGroupDescribe"),
        (78, "ShareFetch"),
        (79, "ShareAcknowledge"),
        (90, "DescribeShareGroupOffsets"),
        (91, "AlterShareGroupOffsets"),
        (92, "DeleteShareGroupOffsets"),
    ],
}

# Fields real clients send that the stored specs lack: (stem, "request"/"response") -> [(the
# field it follows, the spec-style field)].  kafka-clients 4.3.0's ShareFetch v2 carries
# IsRenewAck (KIP-1222) after ShareAcquireMode (seen on the wire; the stored spec predates it);
# its AlterShareGroupOffsets response has a top-level ErrorCode and ErrorMessage (the client's
# AlterShareGroupOffsetsResponseData has them; without them its admin thread dies parsing).
EXTRA_FIELDS: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {
    ("ShareFetch", "request"): [
        ("ShareAcquireMode",
         {"name": "IsRenewAck", "type": "bool", "versions": "2+", "default": "false"}),
    ],
    ("AlterShareGroupOffsets", "response"): [
        ("ThrottleTimeMs", {"name": "ErrorCode", "type": "int16", "versions": "0+"}),
        ("ErrorCode", {"name": "ErrorMessage", "type": "string", "versions": "0+",
                       "nullableVersions": "0+", "default": "null"}),
    ],
}

QUIRKS: dict[int, dict[str, Any]] = {
    18: {
        "response_header_v0_always": True,
        "unsupported_version_response": 0,
        "notes": (
            "ApiVersions responses always use response header v0 (KIP-511) so that a client can "
            "read them before it knows the broker's versions; a request of an unknown version is "
            "answered with a v0 response carrying UNSUPPORTED_VERSION and the supported range."
        ),
    },
}


def strip_comments(text: str) -> str:
    """Drop // comments (outside strings) from a spec file."""
    out: list[str] = []
    in_string = escaped = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def load_spec(path: Path) -> dict[str, Any]:
    return json.loads(strip_comments(path.read_text()))


def parse_default(field_type: str, raw: Any) -> Any:
    """The spec's default string as a Python value."""
    if isinstance(raw, bool | int):
        return raw
    text = str(raw)
    if text == "null":
        return None
    if field_type == "bool":
        return text == "true"
    if field_type in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    if field_type == "float64":
        return float(text)
    return text


def render_fields(fields: list[dict[str, Any]], structs: dict[str, Any], indent: int) -> str:
    pad = " " * indent
    lines = []
    for spec in fields:
        args = [repr(spec["name"]), repr(spec["type"]), repr(spec["versions"])]
        if spec.get("nullableVersions"):
            args.append(f"nullable={spec['nullableVersions']!r}")
        if "tag" in spec:
            args.append(f"tag={spec['tag']!r}")
            args.append(f"tagged={spec['taggedVersions']!r}")
        if "default" in spec:
            args.append(f"default={parse_default(spec['type'], spec['default'])!r}")
        if spec.get("ignorable"):
            args.append("ignorable=True")
        if "flexibleVersions" in spec:
            args.append(f"flexible={spec['flexibleVersions']!r}")
        element = spec["type"][2:] if spec["type"].startswith("[]") else spec["type"]
        children = spec.get("fields")
        if children is None and element in structs:
            children = structs[element]["fields"]
        if children is not None:
            inner = render_fields(children, structs, indent + 4)
            args.append(f"fields=(\n{inner}{pad})")
        lines.append(f"{pad}F({', '.join(args)}),\n")
    return "".join(lines)


def render_api(api_key: int, stem: str, spec_dir: Path) -> tuple[str, str]:
    request = load_spec(spec_dir / f"{stem}Request.json")
    response = load_spec(spec_dir / f"{stem}Response.json")
    assert request["apiKey"] == api_key == response["apiKey"], stem
    if request["validVersions"] != response["validVersions"]:
        # DescribeShareGroupOffsets: the stored response (0-1, KIP-1226's Lag) is newer than
        # the stored request (0); only the versions both sides know are served.
        assert response["validVersions"].startswith(request["validVersions"]), stem
    assert request["flexibleVersions"] == response["flexibleVersions"], stem
    const = "".join("_" + c if c.isupper() else c for c in stem).lstrip("_").upper()
    parts = [
        f"{const} = ApiSchema(\n",
        f"    api_key={api_key},\n",
        f"    name={stem!r},\n",
        f"    valid_versions={request['validVersions']!r},\n",
        f"    flexible_versions={request['flexibleVersions']!r},\n",
    ]
    if request.get("deprecatedVersions"):
        parts.append(f"    deprecated_versions={request['deprecatedVersions']!r},\n")
    if request.get("latestVersionUnstable"):
        parts.append("    latest_version_unstable=True,\n")
    for name, value in QUIRKS.get(api_key, {}).items():
        if isinstance(value, str):
            chunks = textwrap.wrap(value, 80, drop_whitespace=False)
            value_text = "(" + " ".join(repr(c) for c in chunks) + ")"
        else:
            value_text = repr(value)
        parts.append(f"    {name}={value_text},\n")
    for label, message in (("request", request), ("response", response)):
        for after, extra in EXTRA_FIELDS.get((stem, label), []):
            names = [f["name"] for f in message["fields"]]
            message["fields"].insert(names.index(after) + 1, extra)
        structs = {s["name"]: s for s in message.get("commonStructs", [])}
        parts.append(f"    {label}=(\n{render_fields(message['fields'], structs, 8)}    ),\n")
    parts.append(")\n")
    return const, "".join(parts)


def main(argv: list[str]) -> None:
    spec_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_SPEC_DIR
    exported: list[tuple[str, str]] = []
    families = [(m, a, spec_dir) for m, a in FAMILIES.items()]
    share_dir = spec_dir.parent / SHARE_SPEC_DIR.name
    families += [(m, a, share_dir) for m, a in SHARE_FAMILIES.items()]
    for module, apis, family_dir in families:
        names = textwrap.fill(", ".join(stem for _, stem in apis) + ".", 80)
        body = [
            f'"""Schema table: {names}\n\n'
            "Generated by scripts/gen_kafka_schema.py from Apache Kafka's JSON message specs; "
            "plain data,\nchecked against the specs by tests/kafka_codec/test_schema_vs_spec.py. "
            'Never put code here.\n"""\n\n',
            "from .model import ApiSchema\nfrom .model import Field as F\n",
        ]
        for api_key, stem in apis:
            const, text = render_api(api_key, stem, family_dir)
            body.append("\n" + text)
            exported.append((module, const))
        (SCHEMA_DIR / f"{module}.py").write_text("".join(body))
    print("\n".join(f"{m}.{c}" for m, c in exported))


if __name__ == "__main__":
    main(sys.argv)
