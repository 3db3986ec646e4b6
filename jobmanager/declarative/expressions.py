"""Spark SQL expressions of a declarative job, checked at submit without Spark.

A `select` item or a `filter` condition is one Spark SQL expression over the columns of the
stream at that step. It is parsed with sqlglot's Spark dialect and refused, with a message
naming what to fix, when it

* does not parse, or holds more than one expression, or a statement (`SELECT ...`, `DROP ...`),
  a subquery, an alias (the name goes in the item's `alias`), or a comment;
* names a column the stream does not have (Spark's analyzer resolves names case-insensitively,
  and so does this check; `a.b` is field `b` of struct column `a`, so `a` must exist);
* calls a function Spark does not know (the names of Spark's built-in functions are in
  spark_functions.py), an aggregate (`count`, `sum`, ...: use a key_by step) or a window
  function (`row_number`, `lag`, ...: a stream's batch has no order).

Function calls are found on sqlglot's tokens (a name followed by `(`), not on the parsed tree,
because sqlglot normalises some calls into its own nodes (`date_format` becomes `TimeToStr`)
and would hide the name the user wrote. Names the tokenizer takes as keywords (`left`, `cast`)
are syntax the parser checks. What this cannot catch — a type error such as `upper(1) + 2` or a
wrong number of arguments — fails the job's first batch in Spark (a non-recoverable failure,
docs/protocols.md), naming the expression.

Pure: no Spark, no gRPC; sqlglot only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from jobmanager.declarative.spark_functions import AGGREGATES, FUNCTIONS, WINDOW_FUNCTIONS

# names Spark parses as syntax, not as a catalog function, that sqlglot tokenizes as plain names
_SYNTAX_CALLS = frozenset(("try_cast",))
_DIALECT = Spark()


# levels of parentheses, brackets, braces and CASE an expression may nest: sqlglot's parser recurses
# ~20 Python frames per level and ran out of stack at 43-54 levels here (a RecursionError, which
# reached a client as INTERNAL); deeper than any expression a job needs
MAX_NESTING = 32
_OPENERS = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE}
_CLOSERS = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END}


class ExpressionError(ValueError):
    """An expression that is refused; the message says why and what to fix."""


def check(text: str, columns: Sequence[str]) -> exp.Expr:
    """`text` parsed as one Spark SQL expression over `columns`; ExpressionError otherwise."""
    if not text.strip():
        raise ExpressionError("is empty; give a Spark SQL expression such as lower(url)")
    try:
        tokens = _DIALECT.tokenize(text)
    except TokenError as exc:
        raise ExpressionError(f"does not parse as Spark SQL: {_first_line(exc)}") from None
    if not tokens or any(t.comments for t in tokens):
        raise ExpressionError("holds a comment (-- or /* */); remove it")
    _check_nesting(tokens)
    _check_calls(tokens)
    try:
        parsed = sqlglot.parse(text, read="spark")
        statements = [p for p in parsed if p is not None]
        if len(statements) != 1:
            raise ExpressionError(f"holds {len(statements)} expressions (separated by ';'); give exactly one")
        tree = statements[0]
        _check_tree(tree)
        _check_columns(tree, columns)
    except ParseError as exc:
        raise ExpressionError(f"does not parse as Spark SQL: {_parse_message(exc)}") from None
    except RecursionError:  # nesting without brackets (a long run of NOT): deeper than the parser's stack
        raise ExpressionError("nests too deeply to be checked; write it with fewer nested operators") from None
    return tree


def _check_nesting(tokens: Sequence[sqlglot.tokens.Token]) -> None:
    depth = deepest = 0
    for t in tokens:
        if t.token_type in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif t.token_type in _CLOSERS:
            depth -= 1
    if deepest > MAX_NESTING:
        raise ExpressionError(
            f"nests {deepest} levels of parentheses, brackets or CASE deep; at most {MAX_NESTING}: "
            "split it into several steps (select, then where)"
        )


def _check_calls(tokens: Sequence[sqlglot.tokens.Token]) -> None:
    for i, tok in enumerate(tokens[:-1]):
        if tok.token_type != TokenType.VAR or tokens[i + 1].token_type != TokenType.L_PAREN:
            continue
        if i > 0 and tokens[i - 1].token_type == TokenType.DOT:
            raise ExpressionError(f"calls {tok.text}() on a qualified name; Spark's built-in functions have none")
        name = tok.text.lower()
        if name in _SYNTAX_CALLS:
            continue
        if name not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function {tok.text!r} (at character {tok.start + 1}): not one of Spark's built-in "
                "functions (https://spark.apache.org/docs/latest/api/sql/)"
            )
        if name in AGGREGATES:
            raise ExpressionError(
                f"{tok.text}() is an aggregate function, which a select or filter step cannot use: "
                "aggregate with a key_by step (count, sum, min, max, avg)"
            )
        if name in WINDOW_FUNCTIONS:
            raise ExpressionError(f"{tok.text}() is a window function, which needs an ordered input; a stream has none")


def _check_tree(tree: exp.Expr) -> None:
    if isinstance(tree, exp.Alias):
        raise ExpressionError(
            f"has an alias ({tree.alias!r}); give the expression alone and the name in the item's alias"
        )
    for node in tree.walk():
        if isinstance(node, exp.Query | exp.Subquery):
            what = "is a query" if node is tree else "holds a subquery"
            raise ExpressionError(f"{what}; a step takes one expression over the stream's columns")
        if isinstance(node, exp.Command | exp.Cache) or type(node).__module__.rsplit(".", 1)[-1] in ("ddl", "dml"):
            raise ExpressionError(f"is a statement ({node.key.upper()}), not an expression")
        if isinstance(node, exp.Window):
            raise ExpressionError("has a window (OVER ...), which needs an ordered input; a stream has none")
        if isinstance(node, exp.AggFunc):
            raise ExpressionError(
                f"uses the aggregate {node.sql(dialect='spark')}, which a select or filter step cannot use: "
                "aggregate with a key_by step"
            )
        if isinstance(node, exp.Star):
            raise ExpressionError("has *, which is not an expression of one value; name the columns")


def _check_columns(tree: exp.Expr, columns: Sequence[str]) -> None:
    known = {c.lower() for c in columns}
    for column in tree.find_all(exp.Column):
        parts = [p.name for p in column.parts]
        root = parts[0] if parts else column.name
        if root.lower() not in known:
            where = f" (in {column.sql(dialect='spark')})" if len(parts) > 1 else ""
            raise ExpressionError(f"unknown column {root!r}{where}; the stream's columns are: {', '.join(columns)}")


def column_name(tree: exp.Expr) -> str | None:
    """The name of a plain column reference (`url`, `` `my col` ``), None for anything else."""
    if isinstance(tree, exp.Column) and not tree.table:
        return str(tree.name)
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__


def _parse_message(exc: ParseError) -> str:
    errors = getattr(exc, "errors", None) or []
    if errors:
        e = errors[0]
        return f"{e.get('description', 'invalid syntax')} (at character {e.get('col', '?')})"
    return _first_line(exc)
