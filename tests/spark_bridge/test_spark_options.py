"""Option parsing, connection resolution and Kafka's murmur2 (fast, no Spark, no broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_bridge.metadata_access import resolve_connection
from spark_bridge.options import OptionError, parse_reader_options
from spark_bridge.partitioner import murmur2, partition_for_key


@pytest.fixture
def standalone_dir(tmp_path: Path) -> str:
    (tmp_path / "metadata").mkdir()
    (tmp_path / "metadata" / "metadata.db").write_bytes(b"")
    (tmp_path / "bookies" / "0").mkdir(parents=True)
    (tmp_path / "bookies" / "1").mkdir(parents=True)
    return str(tmp_path)


def _parse(standalone_dir: str, streaming: bool = False, **options: str):  # type: ignore[no-untyped-def]
    return parse_reader_options({"ledgerwire.metadata": standalone_dir, **options},
                                streaming=streaming)  # fmt: skip


def test_defaults_match_sparks_kafka_source(standalone_dir: str) -> None:
    opts = _parse(standalone_dir, subscribe="a, b")
    assert opts.subscribe == ("a", "b")
    assert (opts.starting.kind, opts.ending.kind) == ("earliest", "latest")
    assert opts.fail_on_data_loss and opts.read_committed and not opts.include_headers
    assert _parse(standalone_dir, streaming=True, subscribe="a").starting.kind == "latest"
    assert opts.spec.metadata_url.endswith("/metadata")
    assert [Path(d).name for d in opts.spec.bookie_dirs] == ["0", "1"]


def test_bookie_security_options_reach_the_connection(standalone_dir: str) -> None:
    opts = _parse(standalone_dir, subscribe="a", **{
        "ledgerwire.bookieSecretFile": "/s", "ledgerwire.BOOKIETLSCAFILE": "/ca.pem",
        "ledgerwire.bookieTlsCertFile": "/c.pem", "ledgerwire.bookieTlsKeyFile": "/k.pem"})
    assert opts.spec.bookie_secret_file == "/s"
    assert opts.spec.bookie_tls == ("/c.pem", "/k.pem", "/ca.pem")
    assert _parse(standalone_dir, subscribe="a").spec.bookie_tls == ("", "", "")


def test_option_names_are_case_insensitive(standalone_dir: str) -> None:
    opts = _parse(standalone_dir, SUBSCRIBE="a", minpartitions="4", IncludeHeaders="TRUE")
    assert opts.min_partitions == 4 and opts.include_headers


def test_timestamp_options_take_precedence(standalone_dir: str) -> None:
    opts = _parse(standalone_dir, subscribe="a", startingOffsets="earliest",
                  startingOffsetsByTimestamp='{"a": {"0": 5}}', startingTimestamp="7")
    assert (opts.starting.kind, opts.starting.timestamp) == ("timestamp", 7)
    opts = _parse(standalone_dir, subscribe="a", startingOffsetsByTimestamp='{"a": {"0": 5}}')
    assert opts.starting.per_partition == {"a": {0: 5}}


@pytest.mark.parametrize(("options", "message"), [
    ({}, r"options 'subscribe', 'subscribePattern', 'assign': exactly one"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, r"exactly one must be given \(got subscribe"),
    ({"assign": '{"a": [-1]}'}, r"option 'assign'="),
    ({"subscribePattern": "("}, r"option 'subscribePattern'='\(': bad regex"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, r"option 'endingOffsets'.*-2"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, r"option 'endingOffsets': 'earliest'"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'},
     r"option 'startingOffsets': partition 'x'"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": "1"}}'},
     r"option 'startingOffsets': a-0 must be an integer"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, r"option 'startingTimestamp'="),
    ({"subscribe": "a", "failOnDataLoss": "perhaps"}, r"option 'failOnDataLoss'="),
    ({"subscribe": "a", "minPartitions": "0"}, r"option 'minPartitions'='0'"),
    ({"subscribe": "a", "kafka.isolation.level": "dirty"}, r"option 'kafka.isolation.level'"),
    ({"subscribe": "a", "ledgerwire.readFrom": "tape"}, r"option 'ledgerwire.readFrom'"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"},
     r"option 'startingOffsetsByTimestampStrategy'"),
])
def test_bad_options_name_the_option(standalone_dir: str, options: dict[str, str],
                                     message: str) -> None:  # fmt: skip
    with pytest.raises(OptionError, match=message):
        _parse(standalone_dir, **options)


def test_metadata_option_is_checked(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"option 'ledgerwire.metadata' is required"):
        parse_reader_options({"subscribe": "a"})
    with pytest.raises(OptionError, match=r"option 'ledgerwire.metadata'=.*no ledgerwire "
                                          r"metadata there"):
        parse_reader_options({"subscribe": "a", "ledgerwire.metadata": str(tmp_path)})
    assert resolve_connection("zk://h:2181/lw").metadata_url == "zk://h:2181/lw"


def test_murmur2_matches_kafkas_reference_values() -> None:
    # expected values from Apache Kafka's UtilsTest.testMurmur2
    cases = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
             "a-little-bit-longer-string": -1486304829, "abc": 479470107,
             "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}  # fmt: skip
    for text, expected in cases.items():
        assert murmur2(text.encode()) == expected
    assert partition_for_key(b"foobar", 10) == (-790332482 & 0x7FFFFFFF) % 10
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)
