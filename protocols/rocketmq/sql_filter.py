"""RocketMQ's SQL92 message filters: parse an expression once, test messages' properties with it.

The language RocketMQ documents for `FilterExpression(..., SQL92)` / `MessageSelector.bySql`:
properties by name (user properties and `TAGS`, `KEYS`, ... as stored), literals (numbers,
'strings' with '' for a quote, TRUE, FALSE, NULL), comparisons `= <> != > >= < <=`,
`[NOT] BETWEEN a AND b`, `[NOT] IN ('a', 'b')`, `IS [NOT] NULL`,
`[NOT] CONTAINS | STARTSWITH | ENDSWITH 'x'`, `AND`, `OR`, `NOT` and parentheses; keywords in
any case.  Values are compared as RocketMQ does: a property (always text) compared with a
number is read as a number, with TRUE/FALSE as a boolean; `<`, `>` and BETWEEN compare numbers
only.  Logic is SQL's three-valued one: a missing property or a value that cannot be compared
is UNKNOWN, and a message is delivered only when the whole expression is TRUE.

A malformed expression raises `SqlFilterError` (for the caller's "illegal filter expression"),
never anything else; expressions are bounded in length and nesting.  This module never does
I/O and never evaluates anything but the expression's own operators (no eval).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MAX_EXPRESSION_CHARS = 4096
MAX_DEPTH = 64

Value = str | int | float | bool | None
Props = Mapping[str, str]
Node = Callable[[Props], Value]

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLdDfF]?)
    | (?P<op><>|!=|>=|<=|=|>|<|\(|\)|,)
    | (?P<word>[A-Za-z_$][A-Za-z0-9_$.]*)
    )""", re.VERBOSE)
KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})


class SqlFilterError(ValueError):
    """The expression is not valid SQL92 as RocketMQ filters take it."""


@dataclass(frozen=True)
class _Token:
    kind: str  # string, number, op, word, keyword, end
    text: str
    value: Value = None


def _tokens(expression: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(expression):
        if expression[pos:].strip() == "":
            break
        match = _TOKEN.match(expression, pos)
        if match is None or match.end() == pos:
            raise SqlFilterError(f"unexpected {expression[pos:pos + 20].strip()!r} at {pos}")
        pos = match.end()
        kind = match.lastgroup or ""
        text = match.group(kind)
        if kind == "string":
            out.append(_Token("string", text, text[1:-1].replace("''", "'")))
        elif kind == "number":
            digits = text.rstrip("lLdDfF")
            try:
                value: Value = float(digits) if re.search(r"[.eE]", digits) else int(digits)
            except ValueError as exc:  # more digits than Python converts
                raise SqlFilterError(f"number {text[:20]}... is too long") from exc
            out.append(_Token("number", text, value))
        elif kind == "word" and text.upper() in KEYWORDS:
            out.append(_Token("keyword", text.upper()))
        else:
            out.append(_Token(kind, text))
    out.append(_Token("end", ""))
    return out


def _number(value: Value) -> int | float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return None


def _boolean(value: Value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _equal(left: Value, right: Value) -> bool | None:
    if left is None or right is None:
        return None
    if isinstance(left, bool) or isinstance(right, bool):
        a, b = _boolean(left), _boolean(right)
        return None if a is None or b is None else a == b
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    x, y = _number(left), _number(right)
    return None if x is None or y is None else x == y


def _order(op: str, left: Value, right: Value) -> bool | None:
    x, y = _number(left), _number(right)
    if x is None or y is None:
        return None
    return {">": x > y, ">=": x >= y, "<": x < y, "<=": x <= y}[op]


def _not(value: Value) -> bool | None:
    return None if value is None else not value


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0
        self.depth = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        token = self.peek()
        if token.kind == kind and token.text == text:
            self.at += 1
            return True
        return False

    def expect(self, kind: str, text: str) -> None:
        if not self.accept(kind, text):
            raise SqlFilterError(f"expected {text!r}, found {self.peek().text or 'the end'!r}")

    def expression(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SqlFilterError(f"nested deeper than {MAX_DEPTH}")
        node = self.disjunction()
        self.depth -= 1
        return node

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.accept("keyword", "OR"):
            node = _or(node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.accept("keyword", "AND"):
            node = _and(node, self.negation())
        return node

    def negation(self) -> Node:
        if self.accept("keyword", "NOT"):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise SqlFilterError(f"nested deeper than {MAX_DEPTH}")
            inner = self.negation()
            self.depth -= 1
            return lambda p: _not(inner(p))
        return self.comparison()

    def comparison(self) -> Node:
        left = self.operand()
        token = self.peek()
        if token.kind == "op" and token.text in ("=", "<>", "!=", ">", ">=", "<", "<="):
            self.take()
            right = self.operand()
            if token.text == "=":
                return lambda p: _equal(left(p), right(p))
            if token.text in ("<>", "!="):
                return lambda p: _not(_equal(left(p), right(p)))
            op = token.text
            return lambda p: _order(op, left(p), right(p))
        if self.accept("keyword", "IS"):
            negated = self.accept("keyword", "NOT")
            self.expect("keyword", "NULL")
            return (lambda p: left(p) is not None) if negated else (lambda p: left(p) is None)
        negated = self.accept("keyword", "NOT")
        if self.accept("keyword", "BETWEEN"):
            low = self.operand()
            self.expect("keyword", "AND")
            high = self.operand()
            node = _between(left, low, high)
        elif self.accept("keyword", "IN"):
            node = _in(left, self.string_list())
        elif self.peek().kind == "keyword" and self.peek().text in (
                "CONTAINS", "STARTSWITH", "ENDSWITH"):
            node = _text_test(self.take().text, left, self.string())
        elif negated:
            raise SqlFilterError(f"NOT before {self.peek().text or 'the end'!r}")
        else:
            return left  # a boolean operand on its own (TRUE, a parenthesised expression)
        return (lambda p: _not(node(p))) if negated else node

    def operand(self) -> Node:
        token = self.take()
        if token.kind == "op" and token.text == "(":
            inner = self.expression()
            self.expect("op", ")")
            return inner
        if token.kind in ("string", "number"):
            value = token.value
            return lambda p: value
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE", "NULL"):
            constant: Value = {"TRUE": True, "FALSE": False, "NULL": None}[token.text]
            return lambda p: constant
        if token.kind == "word":
            name = token.text
            return lambda p: p.get(name)
        raise SqlFilterError(f"unexpected {token.text or 'end of expression'!r}")

    def string(self) -> str:
        token = self.take()
        if token.kind != "string":
            raise SqlFilterError(f"expected a 'string', found {token.text or 'the end'!r}")
        return str(token.value)

    def string_list(self) -> frozenset[str]:
        self.expect("op", "(")
        values = {self.string()}
        while self.accept("op", ","):
            values.add(self.string())
        self.expect("op", ")")
        return frozenset(values)


def _or(a: Node, b: Node) -> Node:
    def node(p: Props) -> Value:
        x = a(p)
        if x is True:
            return True
        y = b(p)
        if y is True:
            return True
        return None if x is None or y is None else False
    return node


def _and(a: Node, b: Node) -> Node:
    def node(p: Props) -> Value:
        x = a(p)
        if x is False:
            return False
        y = b(p)
        if y is False:
            return False
        return None if x is None or y is None else True
    return node


def _between(value: Node, low: Node, high: Node) -> Node:
    return lambda p: _and(lambda q: _order(">=", value(q), low(q)),
                          lambda q: _order("<=", value(q), high(q)))(p)


def _in(value: Node, options: frozenset[str]) -> Node:
    def node(p: Props) -> Value:
        v = value(p)
        return None if v is None else str(v) in options
    return node


def _text_test(kind: str, value: Node, text: str) -> Node:
    def node(p: Props) -> Value:
        v = value(p)
        if not isinstance(v, str):
            return None
        if kind == "CONTAINS":
            return text in v
        return v.startswith(text) if kind == "STARTSWITH" else v.endswith(text)
    return node


@dataclass(frozen=True)
class SqlFilter:
    expression: str
    _node: Node

    def matches(self, properties: Props) -> bool:
        return self._node(properties) is True


def parse_sql_filter(expression: str) -> SqlFilter:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise SqlFilterError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    parser = _Parser(_tokens(expression))
    if parser.peek().kind == "end":
        raise SqlFilterError("empty expression")
    node = parser.expression()
    if parser.peek().kind != "end":
        raise SqlFilterError(f"unexpected {parser.peek().text!r} after the expression")
    return SqlFilter(expression, node)
