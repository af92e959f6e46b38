"""Waiting for a condition, catching the typed error of a call and reading a raw call's
ErrorInfo: the helpers tests of running servers share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

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


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of a failed call's rich status (AssertionError when it has none)."""
    status = rpc_status.from_call(err)
    assert status is not None, err
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError(f"no ErrorInfo in {err}")
