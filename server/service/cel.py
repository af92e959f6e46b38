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

Limits (:class:`CelLimits`, checked by :func:`check_limits` before anything is parsed): the
expression's UTF-8 size, and how deep it nests, measured on its tokens as an upper bound of its
syntax tree's depth: each bracket (parentheses, list, call, index) counts one, and inside a
bracket level the operators that can stack on one operand count one each (a chain of 30 ``||``
is 30 deep, ``!!x`` 2, ``total.a.b`` 2, ``int(x)`` 1). Parsing (an LALR parser, no recursion)
and the compiler's walk stay within those bounds; a ``RecursionError`` anywhere in them still
becomes a :class:`CelError` (``CEL_TOO_DEEP``). Integer literals must fit in 64 bits (int64, or
uint64 with the ``u`` suffix).
"""

from __future__ import annotations

import ast as pyast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from mtawindows.v1.reasons import Reason

# CEL types we check: scalar names, or a dict of part name -> type for structs.
CelType = Any
NUMERIC = ("int", "double")
_ORDERED = ("int", "double", "string", "timestamp", "duration", "bool")


_LONG_TOKEN = re.compile(r"\S{65,}")


class CelError(ValueError):
    """A policy expression that does not parse or type-check; says where (line, column).
    ``code`` is the ErrorInfo reason it maps to, ``metadata`` what was measured."""

    def __init__(
        self,
        message: str,
        line: int | None = None,
        column: int | None = None,
        *,
        code: str = Reason.INVALID_EXPRESSION,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        where = f" at line {line}, column {column}" if line is not None else ""
        # the parser quotes the offending token: echo at most 64 characters of any of them
        message = _LONG_TOKEN.sub(lambda m: f"{m[0][:61]}... ({len(m[0])} chars)", message)
        super().__init__(f"{message[:1000]}{where}")
        self.reason = message
        self.line = line
        self.column = column
        self.code = code
        self.metadata = dict(metadata or {})


@dataclass(frozen=True)
class CelLimits:
    """How large a new policy expression may be: UTF-8 bytes, and nesting (see the module
    docstring)."""

    max_bytes: int = 4096
    max_depth: int = 64

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.max_depth < 1:
            msg = (
                f"CEL limits must be >= 1, got max_bytes={self.max_bytes}, "
                f"max_depth={self.max_depth}"
            )
            raise ValueError(msg)


INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

# Operator tiers, loosest first: a ternary `?`, ||, &&, relations, + -, * / %, prefix ! -,
# member `.`. An operator of a tier ends the operands of the tighter tiers before it.
_TIER_TERNARY, _TIER_UNARY, _TIER_MEMBER = 0, 6, 7
_TIERS = 8
_BINARY = {
    "?": 0,
    "||": 1,
    "&&": 2,
    "==": 3,
    "!=": 3,
    "<": 3,
    "<=": 3,
    ">": 3,
    ">=": 3,
    "in": 3,
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
    ".": 7,
}
_OPEN, _CLOSE = "([{", ")]}"
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789")


class _Level:
    """One bracket level of :func:`measure`: per tier, the operators of the operand being
    read (``count``) and the deepest operand of the next tier finished so far (``best``)."""

    __slots__ = ("best", "count", "items", "postfix")

    def __init__(self, postfix: bool = False) -> None:
        self.postfix = postfix  # a call's arguments or an index, applied to an operand
        self.count = [0] * _TIERS
        self.best = [0] * _TIERS
        self.items = 0  # the deepest comma-separated item finished so far

    def fold(self, tier: int) -> None:
        """Operands of tiers >= ``tier`` end: their depth moves to tier - 1."""
        count, best = self.count, self.best
        for t in range(_TIERS - 1, tier - 1, -1):
            if count[t] or best[t]:
                value = count[t] + best[t]
                if t:
                    best[t - 1] = max(best[t - 1], value)
                else:
                    self.items = max(self.items, value)
                count[t] = best[t] = 0

    def leaf(self, depth: int) -> None:
        if depth > self.best[_TIERS - 1]:
            self.best[_TIERS - 1] = depth

    def op(self, tier: int) -> None:
        self.fold(tier + 1)
        self.count[tier] += 1

    def close(self) -> int:
        self.fold(0)
        return self.items


def measure(text: str) -> tuple[int, int]:
    """(bracket depth, nesting) of an expression, from its characters alone: nesting is an
    upper bound of its syntax tree's depth (brackets plus the operators stacked in each).
    Linear in the text; strings and comments are skipped, unbalanced text is measured as far
    as it goes (the parser reports it)."""
    return _Scan(text).run()


class _Scan:
    """One pass of :func:`measure` over a text, a token at a time: each step reads the token
    at ``i`` into the bracket levels and returns where the next one starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.levels = [_Level()]
        self.brackets = 0
        self.operand = False  # the previous token ended an operand: a `-` next is binary

    def run(self) -> tuple[int, int]:
        i, n = 0, len(self.text)
        while i < n:
            i = self.step(i)
        while len(self.levels) > 1:
            _close(self.levels)
        return self.brackets, self.levels[0].close()

    def step(self, i: int) -> int:
        text, c = self.text, self.text[i]
        if c in " \t\r\n\f":
            return i + 1
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            return len(text) if j < 0 else j
        if c in "\"'":
            return self.string(i)
        if c in _WORD or (c == "." and text[i + 1 : i + 2].isdigit() and not self.operand):
            return self.word(i)
        levels = self.levels
        if c in _OPEN:
            levels.append(_Level(postfix=self.operand))
            self.brackets = max(self.brackets, len(levels) - 1)
            self.operand = False
        elif c in _CLOSE:
            if len(levels) > 1:
                _close(levels)
            self.operand = True
        elif c == ",":
            levels[-1].fold(0)
            self.operand = False
        elif c == ":":
            levels[-1].fold(_TIER_TERNARY + 1)
            self.operand = False
        else:
            return self.operator(i)
        return i + 1

    def string(self, i: int) -> int:
        """A string literal (quoted once or thrice, escapes skipped): one operand."""
        text, n = self.text, len(self.text)
        c = text[i]
        q = c * 3 if text.startswith(c * 3, i) else c
        j = i + len(q)
        while j < n and not text.startswith(q, j):
            j += 2 if text[j] == "\\" else 1
        self.levels[-1].leaf(0)
        self.operand = True
        return j + len(q)

    def word(self, i: int) -> int:
        """A name or a number (``1e-5`` is one token): an operand; or the operator ``in``."""
        text, n = self.text, len(self.text)
        c = text[i]
        j = i + 1
        number = c.isdigit() or c == "."
        exponent = number and not text.startswith(("0x", "0X"), i)
        while j < n:
            d = text[j]
            if not (
                d in _WORD
                or (number and d == ".")
                or (exponent and d in "+-" and text[j - 1] in "eE")
            ):
                break
            j += 1
        if text[i:j] == "in":
            self.levels[-1].op(_BINARY["in"])
            self.operand = False
        else:
            self.levels[-1].leaf(0)
            self.operand = True
        return j

    def operator(self, i: int) -> int:
        """An operator (one or two characters; ``!`` and a ``-`` before an operand are
        prefix), or any other character, which counts for nothing."""
        two = self.text[i : i + 2]
        tok = two if two in _BINARY else self.text[i]
        if tok == "!" or (tok == "-" and not self.operand):
            self.levels[-1].op(_TIER_UNARY)
        elif tok in _BINARY:
            self.levels[-1].op(_BINARY[tok])
        self.operand = False
        return i + len(tok)


def _close(levels: list[_Level]) -> None:
    """The innermost bracket level ends: a call or an index stacks one more operator on the
    operand before it, parentheses or a list are one level around what they hold."""
    level = levels.pop()
    inner = level.close()
    if level.postfix:
        levels[-1].count[_TIER_MEMBER] += 1
        levels[-1].leaf(inner)
    else:
        levels[-1].leaf(inner + 1)


def check_limits(text: str, limits: CelLimits) -> None:
    """Refuse an expression over ``limits`` before it is parsed: :class:`CelError` with code
    ``CEL_TOO_LARGE`` (UTF-8 size) or ``CEL_TOO_DEEP`` (nesting), naming limit and measure."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        msg = (
            f"the expression is {size} bytes (UTF-8), over the limit of {limits.max_bytes} "
            "bytes for a slide policy"
        )
        raise CelError(
            msg,
            code=Reason.CEL_TOO_LARGE,
            metadata={"limit": str(limits.max_bytes), "bytes": str(size)},
        )
    brackets, depth = measure(text)
    if depth > limits.max_depth:
        msg = (
            f"the expression nests {depth} levels deep ({brackets} of them brackets; the rest "
            f"operators stacked on one operand, such as a chain of ||), over the limit of "
            f"{limits.max_depth}"
        )
        raise CelError(
            msg,
            code=Reason.CEL_TOO_DEEP,
            metadata={
                "limit": str(limits.max_depth),
                "depth": str(depth),
                "brackets": str(brackets),
            },
        )


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


def _cel_or(a: Callable[[], bool], b: Callable[[], bool]) -> bool:
    try:
        if a():
            return True
    except Exception:
        if b() is True:  # the error is absorbed: the other side decides
            return True
        raise
    return b()


def _cel_and(a: Callable[[], bool], b: Callable[[], bool]) -> bool:
    try:
        if not a():
            return False
    except Exception:
        if b() is False:
            return False
        raise
    return b()


# generated operands that cannot raise: a name, a field read, a literal
_SAFE = re.compile(r"\(?[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])*\)?|True|False")

_HELPERS: dict[str, Any] = {
    "_div": _cel_div,
    "_mod": _cel_mod,
    "_int": _to_int,
    "_dbl": float,
    "_or": _cel_or,
    "_and": _cel_and,
}
_PASS_THROUGH = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)


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
        # the grammar wraps every operand in one node per precedence level (expr,
        # conditionalor, ..., member, primary, paren_expr): step through those here, so the
        # recursion is as deep as the expression's operators, not ten times that
        while node.data in _PASS_THROUGH and len(node.children) == 1:
            node = node.children[0]
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
        # CEL's logic is commutative over errors: `err || true` is true, `err && false` false.
        # Python's `or`/`and` short-circuit left to right, which is CEL's answer whenever the
        # left operand does not raise; a left operand that may raise goes through a helper
        # that still asks the right one. Only names, field reads and literals cannot raise.
        if _SAFE.fullmatch(a):
            return f"({a} {op} {b})", "bool"
        return f"_{op}(lambda: {a}, lambda: {b})", "bool"

    def n_conditionalor(self, node: Any) -> tuple[str, CelType]:
        return self._logic(node, "or", "||")

    def n_conditionaland(self, node: Any) -> tuple[str, CelType]:
        return self._logic(node, "and", "&&")

    # the grammar's binary operator nodes -> the Python (and CEL) operator
    _OPS: ClassVar[dict[str, str]] = {
        "relation_lt": "<",
        "relation_le": "<=",
        "relation_gt": ">",
        "relation_ge": ">=",
        "relation_eq": "==",
        "relation_ne": "!=",
        "addition_add": "+",
        "addition_sub": "-",
        "multiplication_mul": "*",
        "multiplication_div": "/",
        "multiplication_mod": "%",
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
        op = self._OPS[opnode.data]
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

    def _arith(self, node: Any) -> tuple[str, CelType]:
        if len(node.children) == 1:
            return self.expr(node.children[0])
        opnode, right = node.children
        a, at = self.expr(opnode.children[0])
        b, bt = self.expr(right)
        op = self._OPS[opnode.data]
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
            if tok.type in ("INT_LIT", "UINT_LIT"):
                return self._integer(tok), "int"
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
        except CelError:
            raise
        except (ValueError, SyntaxError) as ex:
            raise self.fail(tok, f"bad literal {text}: {ex}") from None
        raise self.fail(tok, f"{tok.type.lower().replace('_lit', '')} literals are not supported")

    def _integer(self, tok: Any) -> str:
        """An int64 literal, or a uint64 one with the ``u`` suffix; anything wider is refused
        (CEL's integers are 64 bits)."""
        text = tok.value
        unsigned = tok.type == "UINT_LIT"
        value = int(text[:-1] if unsigned else text, 0)
        low, high = (0, UINT64_MAX) if unsigned else (INT64_MIN, INT64_MAX)
        if low <= value <= high:
            return self.const(value)
        kind = "a uint64" if unsigned else "an int64"
        msg = f"integer literal {text} does not fit in {kind} ({low}..{high})"
        raise CelError(msg, *self.where(tok))

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
    text: str,
    record: Mapping[str, CelField],
    errors: list[int],
    limits: CelLimits | None = None,
) -> tuple[Callable[[Any, Any], bool], str]:
    """Parse, check and compile ``text``; returns the function and its generated source.
    With ``limits``, an expression over them is refused before it is parsed."""
    from celpy.celparser import CELParseError

    if not isinstance(text, str) or not text.strip():
        msg = "expected a CEL expression over total and old, got an empty one"
        raise CelError(msg)
    if limits is not None:
        check_limits(text, limits)
    # a RecursionError (or the Python compiler's nesting limit) becomes a CelError outside the
    # except clause, and the tree lives in _compile's frame only: nothing of a refused
    # expression stays reachable from the error
    too_deep = ""
    try:
        return _compile(text, record, errors)
    except CELParseError as ex:
        first = str(ex.args[0]).splitlines()[0] if ex.args else "syntax error"
        line = getattr(ex, "line", None)
        col = getattr(ex, "column", None)
        msg = f"syntax error: {first.strip()}"
        raise CelError(msg, line, col) from None
    except (RecursionError, MemoryError) as ex:
        too_deep = type(ex).__name__
    except SyntaxError as ex:  # the generated source past Python's own nesting limits
        too_deep = f"SyntaxError: {ex.msg}"
    msg = f"the expression nests too deeply to compile ({too_deep}); split it or lower its nesting"
    raise CelError(msg, code=Reason.CEL_TOO_DEEP, metadata={"error": too_deep})


def _compile(
    text: str, record: Mapping[str, CelField], errors: list[int]
) -> tuple[Callable[[Any, Any], bool], str]:
    from celpy.celparser import CELParser

    tree = CELParser().parse(text)
    comp = _Compiler(text, record)
    src, t = comp.expr(tree)
    if t != "bool":
        msg = f"a slide policy must be a bool expression, this one is {comp.tname(t)}"
        raise CelError(msg)
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
