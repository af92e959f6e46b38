"""The connector's error, :class:`ConnectorError`, and :func:`explained`, which turns the SDK's
errors into it, naming the option (or column) at fault."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from mtawindows.client import MtaWindowsError, NotFoundError, OutOfOrderError, UnavailableError


class _Endpoint(Protocol):
    """What :func:`explained` reads of the options (a :class:`ConnectorOptions`)."""

    @property
    def endpoint(self) -> str: ...


class ConnectorError(RuntimeError):
    """A connector failure; the message names the option or column at fault."""


@contextmanager
def explained(opts: _Endpoint, what: str) -> Iterator[None]:
    """Turn the SDK's errors into a :class:`ConnectorError` naming the option at fault."""
    try:
        yield
    except ConnectorError:
        raise
    except UnavailableError as ex:
        where = ex.target or opts.endpoint  # the one server of several that failed
        msg = (
            f"option 'endpoint': cannot reach mtawindows at {where!r} while {what}: "
            f"{ex}. Is `mtawindows serve` running there?"
        )
        raise ConnectorError(msg) from ex
    except NotFoundError as ex:
        msg = f"option 'stream': {what}: {ex}"
        raise ConnectorError(msg) from ex
    except OutOfOrderError as ex:
        msg = (
            f"{what}: {ex}. mtawindows needs each stream's rows in timestamp order: sort them "
            "(within each key: repartition by the key and sortWithinPartitions(key, timestamp)), "
            "or create the stream with late_policy DROP (late rows skipped and counted)"
        )
        raise ConnectorError(msg) from ex
    except MtaWindowsError as ex:
        msg = f"{what}: {ex}"
        raise ConnectorError(msg) from ex


__all__ = ["ConnectorError", "explained"]
