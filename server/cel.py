"""Slide policies written in CEL, compiled to Python closures.

A policy expression reads two records, ``total`` (the window before enforcement) and ``old``
(a candidate prefix), whose fields are the window's named aggregations, and says whether the
prefix may leave::

    total.ts_max - old.ts_max >= duration("1h")
    total.n - old.n > 1000 || total.peak.value > 2.0 * old.mean

The expression is parsed by cel-python (the CEL grammar, with positions), type-checked here
against the window's outputs, and translated into one generated Python function: nothing
from the expression text reaches the generated source (identifiers become tuple indices,
literals become named constants), so the only reachable names are ``total`` and ``old``.
Parse, type and name errors raise :class:`CelError` with the line and column.

Supported: literals (int, uint, double, string, bool, null), ``total.f`` / ``old.f`` and
struct parts (``total.peak.key``), ``! - * / % + -``, comparisons (numbers compare across
int/double as in CEL; arithmetic does not mix them: use ``double(x)``), ``&& || ?:``, ``in``
over a list literal, and the functions ``duration("1h30m")``, ``timestamp("2024-01-01T00:00:00Z")``,
``int()``, ``double()``. Timestamps are nanoseconds since the epoch, durations nanoseconds.

At run time an evaluation error (division by zero, a null operand) makes the expression
false: that prefix stays. Such errors are counted (:attr:`CelPolicy.errors`).
"""

from __future__ import annotations

import ast as pyast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

# CEL types we check: scalar names, or a dict of part name -> type for structs.
CelType = Any
NUMERIC = ("int", "double")
_ORDERED = ("int", "double", "string", "timestamp", "duration", "bool")


class CelError(ValueError):
    """A policy expression that does not parse or type-check; says where (line, column)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{message}{where}")
        self.reason = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class CelField:
    """One field of the ``total``/``old`` records: its CEL type and how to read it from a lifted
    aggregate tuple (``index``; ``lower`` when the stored form is not the value)."""

    type: CelType
    index: int
    lower: Callable[[Any], Any] | None = None
    parts: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)


_DURATION_UNITS = {
    "h": 3_600_000_000_000,
    "m": 60_000_000_000,
    "s": 1_000_000_000,
    "ms": 1_000_000,
    "us": 1_000,
    "µs": 1_000,
    "ns": 1,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")


def parse_duration(text: str) -> int:
    """CEL/Go duration text (``"1h30m"``, ``"1.5s"``, ``"-90ms"``) in nanoseconds."""
    s = text.strip()
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    if s == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            msg = f'bad duration {text!r}: expected e.g. "1h", "90s", "1.5m", "250ms"'
            raise ValueError(msg)
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not s:
        msg = f"bad duration {text!r}: empty"
        raise ValueError(msg)
    return sign * round(total)


def parse_timestamp(text: str) -> int:
    """RFC 3339 text in nanoseconds since the epoch."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as ex:
        msg = f'bad timestamp {text!r}: expected RFC 3339, e.g. "2024-01-01T00:00:00Z"'
        raise ValueError(msg) from ex
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _cel_div(a: Any, b: Any) -> Any:  # int: truncates toward zero; double: IEEE
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # ZeroDivisionError -> error -> false
        return q if (a >= 0) == (b >= 0) else -q
    if b == 0:
        return float("nan") if a == 0 or a != a else float("inf") if a > 0 else float("-inf")
    return a / b


def _cel_mod(a: int, b: int) -> int:  # sign of the dividend, as in CEL
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _to_int(v: Any) -> int:
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            msg = f"int() of {v}"
            raise ValueError(msg)
        return int(v)
    return int(v)


_HELPERS: dict[str, Any] = {"_div": _cel_div, "_mod": _cel_mod, "_int": _to_int, "_dbl": float}


class _Compiler:
    def __init__(self, text: str, record: Mapping[str, CelField]) -> None:
        self.text = text
        self.record = record
        self.env: dict[str, Any] = dict(_HELPERS)
        self.n = 0

    # -- helpers
    def const(self, value: Any) -> str:
        name = f"k{self.n}"
        self.n += 1
        self.env[name] = value
        return name

    def fn(self, value: Any) -> str:
        name = f"f{self.n}"
        self.n += 1
        self.env[name] = value
        return name

    @staticmethod
    def where(node: Any) -> tuple[int | None, int | None]:
        meta = getattr(node, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            return meta.line, meta.column
        line = getattr(node, "line", None)
        return line, getattr(node, "column", None)

    def fail(self, node: Any, message: str) -> CelError:
        line, col = self.where(node)
        return CelError(message, line, col)

    @staticmethod
    def tname(t: CelType) -> str:
        return "struct" if isinstance(t, dict) else str(t)

    # -- the walk: returns (python source, CEL type)
    def expr(self, node: Any) -> tuple[str, CelType]:
        kind = node.data
        method = getattr(self, f"n_{kind}", None)
        if method is None:
            raise self.fail(node, f"{kind.replace('_', ' ')} is not supported in a slide policy")
        return method(node)  # type: ignore[no-any-return]

    def single(self, node: Any) -> tuple[str, CelType]:
        return self.expr(node.children[0])

    n_member = n_primary = n_paren_expr = single

    def n_expr(self, node: Any) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        c, ct = self.expr(node.children[0])
        a, at = self.expr(node.children[1])
        b, bt = self.expr(node.children[2])
        if ct != "bool":
            raise self.fail(node, f"the condition of ?: must be bool, got {self.tname(ct)}")
        if at != bt and not (at == "null" or bt == "null"):
            raise self.fail(node, f"?: branches differ: {self.tname(at)} and {self.tname(bt)}")
        return f"({a} if {c} else {b})", at if at != "null" else bt

    def _logic(self, node: Any, op: str, cel: str) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        a, at = self.expr(node.children[0])
        b, bt = self.expr(node.children[1])
        for t, side in ((at, node.children[0]), (bt, node.children[1])):
            if t != "bool":
                raise self.fail(side, f"operands of {cel} must be bool, got {self.tname(t)}")
        return f"({a} {op} {b})", "bool"

    def n_conditionalor(self, node: Any) -> tuple[str, CelType]:
        return self._logic(node, "or", "||")

    def n_conditionaland(self, node: Any) -> tuple[str, CelType]:
        return self._logic(node, "and", "&&")

    _REL: ClassVar[dict[str, str]] = {
        "relation_lt": "<",
        "relation_le": "<=",
        "relation_gt": ">",
        "relation_ge": ">=",
        "relation_eq": "==",
        "relation_ne": "!=",
    }

    def n_relation(self, node: Any) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        opnode, right = node.children
        a, at = self.expr(opnode.children[0])
        if opnode.data == "relation_in":
            items = right
            while items.data in ("addition", "multiplication", "unary", "member", "primary"):
                if len(items.children) != 1:
                    break
                items = items.children[0]
            if items.data != "list_lit":
                raise self.fail(
                    right, "`in` is supported over a list literal only, e.g. x in [1, 2]"
                )
            parts = []
            for e in items.children[0].children if items.children else []:
                s, t = self.expr(e)
                self._comparable(e, at, t, "in")
                parts.append(s)
            return f"({a} in ({', '.join(parts)},))", "bool"
        b, bt = self.expr(right)
        op = self._REL[opnode.data]
        self._comparable(node, at, bt, op)
        return f"({a} {op} {b})", "bool"

    def _comparable(self, node: Any, at: CelType, bt: CelType, op: str) -> None:
        if at == bt and (op in ("==", "!=", "in") or at in _ORDERED):
            return
        if at in NUMERIC and bt in NUMERIC:
            return
        if op in ("==", "!=") and "null" in (at, bt):
            return
        raise self.fail(
            node, f"cannot compare {self.tname(at)} {op} {self.tname(bt)}: no matching overload"
        )

    _ARITH: ClassVar[dict[str, str]] = {
        "addition_add": "+",
        "addition_sub": "-",
        "multiplication_mul": "*",
        "multiplication_div": "/",
        "multiplication_mod": "%",
    }

    def _arith(self, node: Any) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        opnode, right = node.children
        a, at = self.expr(opnode.children[0])
        b, bt = self.expr(right)
        op = self._ARITH[opnode.data]
        result = self._arith_type(op, at, bt)
        if result is None:
            hint = " (convert with double() or int())" if {at, bt} == set(NUMERIC) else ""
            raise self.fail(
                node,
                f"no matching overload for {self.tname(at)} {op} {self.tname(bt)}{hint}",
            )
        if op == "/":
            return f"_div({a}, {b})", result
        if op == "%":
            return f"_mod({a}, {b})", result
        return f"({a} {op} {b})", result

    n_addition = n_multiplication = _arith

    @staticmethod
    def _arith_type(op: str, at: CelType, bt: CelType) -> CelType | None:
        if at == bt and at in NUMERIC:
            return None if (op == "%" and at == "double") else at
        if op == "+" and at == bt == "string":
            return "string"
        if op in "+-":
            if at == bt == "duration":
                return "duration"
            if op == "-" and at == bt == "timestamp":
                return "duration"
            if at == "timestamp" and bt == "duration":
                return "timestamp"
            if op == "+" and at == "duration" and bt == "timestamp":
                return "timestamp"
        return None

    def n_unary(self, node: Any) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        opnode, operand = node.children
        a, at = self.expr(operand)
        if opnode.data == "unary_not":
            if at != "bool":
                raise self.fail(node, f"! needs a bool, got {self.tname(at)}")
            return f"(not {a})", "bool"
        if at not in (*NUMERIC, "duration"):
            raise self.fail(node, f"- needs a number or duration, got {self.tname(at)}")
        return f"(-{a})", at

    def n_literal(self, node: Any) -> tuple[str, CelType]:
        tok = node.children[0]
        text = tok.value
        try:
            if tok.type == "INT_LIT":
                return self.const(int(text, 0)), "int"
            if tok.type == "UINT_LIT":
                return self.const(int(text[:-1], 0)), "int"
            if tok.type == "FLOAT_LIT":
                return self.const(float(text)), "double"
            if tok.type == "BOOL_LIT":
                return ("True" if text == "true" else "False"), "bool"
            if tok.type == "NULL_LIT":
                return "None", "null"
            if tok.type in ("STRING_LIT", "MLSTRING_LIT"):
                value = pyast.literal_eval(text)
                if not isinstance(value, str):  # pragma: no cover - grammar guarantees it
                    raise ValueError(text)
                return self.const(value), "string"
        except (ValueError, SyntaxError) as ex:
            raise self.fail(tok, f"bad literal {text}: {ex}") from None
        raise self.fail(tok, f"{tok.type.lower().replace('_lit', '')} literals are not supported")

    def n_ident(self, node: Any) -> tuple[str, CelType]:
        tok = node.children[0]
        if tok.value in ("total", "old"):
            return tok.value, "record"
        raise self.fail(
            tok, f"unknown name {tok.value!r}: a slide policy can only read `total` and `old`"
        )

    def n_member_dot(self, node: Any) -> tuple[str, CelType]:
        base, name_tok = node.children
        src, t = self.expr(base)
        name = name_tok.value
        if t == "record":
            f = self.record.get(name)
            if f is None:
                raise self.fail(
                    name_tok,
                    f"{src} has no field {name!r}; the window's outputs are {sorted(self.record)}",
                )
            read = f"{src}[{f.index}]"
            if f.lower is not None:
                read = f"{self.fn(f.lower)}({read})"
            return read, f.type
        if isinstance(t, dict):
            if name not in t:
                raise self.fail(name_tok, f"no part {name!r} here; parts are {sorted(t)}")
            getter = self._part_getter(node, name)
            return f"{self.fn(getter)}({src})", t[name]
        raise self.fail(name_tok, f"a {self.tname(t)} has no field {name!r}")

    def _part_getter(self, node: Any, name: str) -> Callable[[Any], Any]:
        base = node.children[0]
        while base.data in ("member", "primary") and len(base.children) == 1:
            base = base.children[0]
        if base.data == "member_dot":
            outer = base.children[1].value
            f = self.record.get(outer)
            if f is not None and name in f.parts:
                return f.parts[name]
        raise self.fail(node, f"cannot read part {name!r} here")  # pragma: no cover

    def n_ident_arg(self, node: Any) -> tuple[str, CelType]:
        name_tok = node.children[0]
        args = node.children[1].children if len(node.children) > 1 else []
        fname = name_tok.value
        if fname in ("duration", "timestamp"):
            if len(args) != 1:
                raise self.fail(name_tok, f"{fname}() takes one string literal")
            src, t = self.expr(args[0])
            if t != "string" or src not in self.env:
                raise self.fail(args[0], f'{fname}() takes a string literal, e.g. {fname}("1h")')
            parse = parse_duration if fname == "duration" else parse_timestamp
            try:
                value = parse(self.env[src])
            except ValueError as ex:
                raise self.fail(args[0], str(ex)) from None
            return self.const(value), fname
        if fname in ("int", "double"):
            if len(args) != 1:
                raise self.fail(name_tok, f"{fname}() takes one argument")
            src, t = self.expr(args[0])
            allowed = (*NUMERIC, "timestamp", "duration") if fname == "int" else NUMERIC
            if t not in allowed:
                raise self.fail(args[0], f"no matching overload for {fname}({self.tname(t)})")
            return f"{'_int' if fname == 'int' else '_dbl'}({src})", fname
        raise self.fail(
            name_tok,
            f"unknown function {fname!r}; available: duration, timestamp, int, double",
        )


@dataclass
class CelPolicy:
    """A slide policy given as a CEL expression; bind it to the window's record to use it."""

    expression: str
    record: Mapping[str, CelField] = field(repr=False, compare=False)
    errors: list[int] = field(default_factory=lambda: [0], repr=False, compare=False)
    _fn: Callable[[Any, Any], bool] | None = field(default=None, repr=False, compare=False)
    source: str = field(default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        self._fn, self.source = compile_expression(self.expression, self.record, self.errors)

    def bind(self, monoid: Any) -> Callable[[Any, Any], bool]:
        assert self._fn is not None
        return self._fn

    def __call__(self, total: Any, old: Any) -> bool:
        assert self._fn is not None
        return self._fn(total, old)

    def describe(self) -> dict[str, Any]:
        return {"kind": "CelPolicy", "expression": self.expression}

    @property
    def error_count(self) -> int:
        return self.errors[0]


def compile_expression(
    text: str, record: Mapping[str, CelField], errors: list[int]
) -> tuple[Callable[[Any, Any], bool], str]:
    """Parse, check and compile ``text``; returns the function and its generated source."""
    from celpy.celparser import CELParseError, CELParser

    if not isinstance(text, str) or not text.strip():
        msg = "expected a CEL expression over total and old, got an empty one"
        raise CelError(msg)
    try:
        tree = CELParser().parse(text)
    except CELParseError as ex:
        first = str(ex.args[0]).splitlines()[0] if ex.args else "syntax error"
        line = getattr(ex, "line", None)
        col = getattr(ex, "column", None)
        msg_0 = f"syntax error: {first.strip()}"
        raise CelError(msg_0, line, col) from None
    comp = _Compiler(text, record)
    src, t = comp.expr(tree)
    if t != "bool":
        msg_0 = f"a slide policy must be a bool expression, this one is {comp.tname(t)}"
        raise CelError(msg_0)
    comp.env["errors"] = errors
    code = (
        "def policy(total, old):\n"
        "    try:\n"
        f"        return {src}\n"
        "    except Exception:\n"
        "        errors[0] += 1\n"
        "        return False\n"
    )
    exec(compile(code, "<cel policy>", "exec"), comp.env)
    return comp.env["policy"], code
