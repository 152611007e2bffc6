"""Whole-request error bodies for the admin APIs this family adds (merged into error_responses).

`ADMIN_ERROR_BUILDERS` maps api key -> builder(version, request body, code, message) for the
APIs whose responses carry errors per item rather than at the top: AlterConfigs (33),
IncrementalAlterConfigs (44), DeleteRecords (21), DescribeProducers (61), CreateAcls (30),
DeleteAcls (31), DescribeLogDirs (35), ElectLeaders (43), AlterUserScramCredentials (51) and
DescribeTransactions (65).  DescribeAcls, DescribeCluster, SaslHandshake and SaslAuthenticate
have a top-level error code and need no builder.  `error_responses` merges this table into its own.

This module must never import error_responses (it is imported by it) or do I/O.
"""

from __future__ import annotations

from collections.abc import Callable


def _alter_configs(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "responses": [
        {"error_code": code, "error_message": message,
         "resource_type": r.get("resource_type", 0), "resource_name": r.get("resource_name", "")}
        for r in body.get("resources") or []]}


def _delete_records(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name", ""), "partitions": [
            {"partition_index": p.get("partition_index", 0), "low_watermark": -1,
             "error_code": code}
            for p in t.get("partitions") or []]}
        for t in body.get("topics") or []]}


def _describe_producers(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.get("name", ""), "partitions": [
            {"partition_index": i, "error_code": code, "error_message": message,
             "active_producers": []}
            for i in t.get("partition_indexes") or []]}
        for t in body.get("topics") or []]}


def _create_acls(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "results": [
        {"error_code": code, "error_message": message} for _ in body.get("creations") or []]}


def _delete_acls(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": []}
        for _ in body.get("filters") or []]}


def _elect_leaders(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": [
        {"topic": t.get("topic", ""), "partition_result": [
            {"partition_id": p, "error_code": code, "error_message": message}
            for p in t.get("partitions") or []]}
        for t in body.get("topic_partitions") or []]}


def _describe_transactions(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "transaction_states": [
        {"error_code": code, "transactional_id": t, "transaction_state": "",
         "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
         "producer_epoch": -1, "topics": []}
        for t in body.get("transactional_ids") or []]}


def _describe_log_dirs(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "results": [
        {"error_code": code, "log_dir": "", "topics": [], "total_bytes": -1,
         "usable_bytes": -1}]}


def _alter_scram(version: int, body: dict, code: int, message: str | None) -> dict:
    users = dict.fromkeys(str(i.get("name", "")) for kind in ("deletions", "upsertions")
                          for i in body.get(kind) or [])
    return {"throttle_time_ms": 0, "results": [
        {"user": u, "error_code": code, "error_message": message} for u in users]}


def _alter_client_quotas(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": code, "error_message": message, "entity": entry.get("entity") or []}
        for entry in body.get("entries") or []]}


ADMIN_ERROR_BUILDERS: dict[int, Callable[[int, dict, int, str | None], dict]] = {
    33: _alter_configs,
    44: _alter_configs,
    21: _delete_records,
    61: _describe_producers,
    30: _create_acls,
    31: _delete_acls,
    35: _describe_log_dirs,
    43: _elect_leaders,
    49: _alter_client_quotas,
    51: _alter_scram,
    65: _describe_transactions,
}
