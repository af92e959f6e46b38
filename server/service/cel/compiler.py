"""The compiler of a policy expression: cel-python's parse tree, type-checked against the
window's record, translated into one generated Python function (:class:`CelPolicy`,
:func:`compile_expression`)."""

from __future__ import annotations

import ast as pyast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mtawindows.v1.reasons import Reason

from .expression_errors import CelError
from .expression_limits import CelLimits, check_limits
from .values import (
    _ORDERED,
    INT64_MAX,
    INT64_MIN,
    NUMERIC,
    UINT64_MAX,
    CelField,
    CelType,
    _cel_and,
    _cel_div,
    _cel_i64,
    _cel_mod,
    _cel_or,
    _to_int,
    parse_duration,
    parse_timestamp,
)

# generated operands that cannot raise: a name, a field read, a literal
_SAFE = re.compile(r"\(?[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])*\)?|True|False")

_HELPERS: dict[str, Any] = {
    "_div": _cel_div,
    "_mod": _cel_mod,
    "_i64": _cel_i64,
    "_int": _to_int,
    "_dbl": float,
    "_or": _cel_or,
    "_and": _cel_and,
}
# the CEL types held as 64-bit integers (durations and timestamps in nanoseconds)
_INT64 = frozenset({"int", "duration", "timestamp"})
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
        if op == "%":  # |a % b| < |b|: never overflows
            return f"_mod({a}, {b})", result
        src = f"_div({a}, {b})" if op == "/" else f"({a} {op} {b})"
        # 64-bit integers, durations and timestamps: an overflow is an evaluation error
        # (INT64_MIN / -1 included), not a wider value
        return (f"_i64({src})" if result in _INT64 else src), result

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
        return (f"_i64(-{a})" if at in _INT64 else f"(-{a})"), at  # -INT64_MIN overflows

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
