"""How large and how deep a policy expression may be (:class:`CelLimits`), checked by
:func:`check_limits` before anything is parsed.

The size is the expression's UTF-8 bytes. The nesting (:func:`measure`) is measured on its
tokens as an upper bound of its syntax tree's depth: each bracket (parentheses, list, call,
index) counts one, and inside a bracket level the operators that can stack on one operand count
one each (a chain of 30 ``||`` is 30 deep, ``!!x`` 2, ``total.a.b`` 2, ``int(x)`` 1). Parsing
(an LALR parser, no recursion) and the compiler's walk stay within those bounds; a
``RecursionError`` anywhere in them still becomes a :class:`~.expression_errors.CelError`
(``CEL_TOO_DEEP``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mtawindows.v1.reasons import Reason

from .expression_errors import CelError


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
