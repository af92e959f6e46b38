"""Bearer tokens: what one is, and the server's set of them, checked and loaded.

Tokens come from ``--tokens-file`` and ``$MTAWINDOWS_TOKENS``; every check fails closed (a
source given but holding no token stops the server) and no error ever echoes a token.
:mod:`.auth` checks each call against them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["TOKEN", "check_tokens", "load_tokens"]

# A token: printable ASCII without whitespace (RFC 6750's b64token is a subset); a token
# with anything else could never arrive intact in a header, so it is refused at start-up.
TOKEN = re.compile(r"[\x21-\x7e]+")


def check_tokens(tokens: Iterable[str], source: str = "tokens") -> list[str]:
    """The tokens, checked: at least one, each a :data:`TOKEN`. ValueError naming ``source``
    and the token's position, never the token (a secret)."""
    out = list(tokens)
    if not out:
        msg = (
            f"{source}: expected at least one bearer token, got none; with no token every "
            "call would be refused (remove the setting to run without authentication)"
        )
        raise ValueError(msg)
    for i, t in enumerate(out, 1):
        if not isinstance(t, str) or not TOKEN.fullmatch(t):
            msg = (
                f"{source}: token {i} is not a bearer token: expected printable ASCII "
                "without spaces (RFC 6750), got "
                + (f"{len(t)} characters" if isinstance(t, str) else type(t).__name__)
            )
            raise ValueError(msg)
    return out


def load_tokens(tokens_file: str | None, env: Mapping[str, str]) -> set[str] | None:
    """The bearer tokens from ``--tokens-file`` (one per line; blank lines and lines starting
    with ``#`` skipped) and ``$MTAWINDOWS_TOKENS`` (comma-separated); None when neither is
    given (no authentication). Fails closed: a source that is given (the file named, even as
    an empty string; the variable set, even empty) but holds no token, or a line that is not
    a bearer token (printable ASCII without spaces), is a ValueError naming the source and the
    line, never the token."""
    if tokens_file is None and "MTAWINDOWS_TOKENS" not in env:
        return None
    tokens: set[str] = set()
    if tokens_file is not None:
        tokens |= set(_file_tokens(tokens_file))
    if "MTAWINDOWS_TOKENS" in env:
        listed = [t.strip() for t in env["MTAWINDOWS_TOKENS"].split(",") if t.strip()]
        tokens |= set(check_tokens(listed, "$MTAWINDOWS_TOKENS (comma-separated)"))
    return tokens


def _file_tokens(tokens_file: str) -> list[str]:
    source = f"--tokens-file {tokens_file!r}"
    try:
        text = Path(tokens_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as ex:
        msg = f"{source}: expected a readable UTF-8 file of bearer tokens: {ex}"
        raise ValueError(msg) from None
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        t = line.strip()
        if not t or t.startswith("#"):
            continue
        if not TOKEN.fullmatch(t):
            msg = (
                f"{source}, line {lineno}: expected one bearer token (printable ASCII "
                f"without spaces) or a # comment, got a line of {len(t)} characters"
            )
            raise ValueError(msg)
        found.append(t)
    return check_tokens(found, f"{source} (blank lines and # comments only)")
