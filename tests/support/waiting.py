"""Waiting for a condition, and catching the typed error of a call: the helpers tests of
running servers share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from mtawindows.client import MtaWindowsError


def wait_until(pred: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """``pred()``'s first truthy answer, polled every 20 ms; AssertionError naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


def rpc_error(call: Callable[[], Any]) -> MtaWindowsError:
    """The typed error ``call()`` raises (it must raise one)."""
    with pytest.raises(MtaWindowsError) as info:
        call()
    return info.value
