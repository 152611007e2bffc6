"""RocketMQ's SQL92 filter language (protocols/rocketmq/sql_filter.py): what it accepts, how it
decides, and that no input makes it fail other than with SqlFilterError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.rocketmq.sql_filter import SqlFilterError, parse_sql_filter

CASES = [
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "3"}, False),
    ("a > 5", {}, False),  # missing: UNKNOWN, not delivered
    ("a > 5", {"a": "ten"}, False),  # not a number: UNKNOWN
    ("NOT a > 5", {}, False),  # NOT UNKNOWN is UNKNOWN
    ("a > 5 OR TRUE", {}, True),
    ("a > 5 AND FALSE", {}, False),
    ("a = 'x' AND b IS NULL", {"a": "x"}, True),
    ("b IS NOT NULL", {"b": ""}, True),
    ("a BETWEEN 1 AND 3", {"a": "2"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3.5"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "7"}, True),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagB"}, True),
    ("TAGS NOT IN ('TagA', 'TagB')", {"TAGS": "TagC"}, True),
    ("TAGS NOT IN ('TagA')", {}, False),
    ("flag = TRUE", {"flag": "true"}, True),
    ("flag = FALSE", {"flag": "yes"}, False),
    ("a <> 'it''s'", {"a": "it's"}, False),
    ("a != 'x'", {"a": "y"}, True),
    ("a = 1.5", {"a": "1.50"}, True),
    ("a >= -2", {"a": "-2"}, True),
    ("a = 10", {"a": "10"}, True),
    ("a = '10'", {"a": "010"}, False),  # text against text: exact
    ("a < 'b'", {"a": "a"}, False),  # order compares numbers only
    ("a CONTAINS 'bc'", {"a": "abcd"}, True),
    ("a not startswith 'b'", {"a": "abcd"}, True),
    ("a EndsWith 'cd' and (x = 1 or y = 2)", {"a": "abcd", "y": "2"}, True),
    ("region.zone = 'eu'", {"region.zone": "eu"}, True),
    ("TRUE", {}, True),
]


@pytest.mark.parametrize(("expression", "properties", "delivered"), CASES)
def test_decisions(expression: str, properties: dict[str, str], delivered: bool) -> None:
    assert parse_sql_filter(expression).matches(properties) is delivered


@pytest.mark.parametrize("expression", [
    "", "   ", "a >", "a = ", "(a = 1", "a = 1)", "a IN ()", "a IN (1)", "a NOT", "a = 1 b",
    "'x", "a # b", "a IS 1", "a BETWEEN 1", "AND a = 1", "a = " + "(" * 100 + "1" + ")" * 100,
    "NOT " * 100 + "a = 1", "a = '" + "x" * 5000 + "'",
])
def test_malformed_expressions_are_refused(expression: str) -> None:
    with pytest.raises(SqlFilterError):
        parse_sql_filter(expression)


WORDS = st.sampled_from(["a", "b", "TAGS", "AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN",
                         "TRUE", "FALSE", "CONTAINS", "(", ")", ",", "=", "<>", ">", "<=",
                         "'x'", "'it''s'", "1", "-2.5", "3e2", "#", "'"])
PROPS = st.dictionaries(st.sampled_from(["a", "b", "TAGS"]),
                        st.sampled_from(["", "x", "1", "-2.5", "true", "300", "it's"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=14).map(" ".join), PROPS)
def test_any_token_soup_parses_or_is_refused_and_never_crashes(text: str,
                                                               props: dict[str, str]) -> None:
    try:
        compiled = parse_sql_filter(text)
    except SqlFilterError:
        return
    assert compiled.matches(props) in (True, False)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), PROPS)
def test_any_text_parses_or_is_refused(text: str, props: dict[str, str]) -> None:
    try:
        compiled = parse_sql_filter(text)
    except SqlFilterError:
        return
    assert compiled.matches(props) in (True, False)
