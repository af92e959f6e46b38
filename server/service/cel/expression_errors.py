"""The error of a policy expression that does not parse, type-check or fit the limits:
:class:`CelError`, with where (line, column), the ErrorInfo reason and what was measured."""

from __future__ import annotations

import re
from collections.abc import Mapping

from mtawindows.v1.reasons import Reason

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
