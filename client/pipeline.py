"""Batches appended over one ``AppendBatches`` call, pipelined (:class:`BatchFeed`,
:func:`resendable`), for :meth:`WindowClient.append_batches`.

One ``Append`` at a time leaves each side idle while the other works: the client encodes a
batch, the server applies it, the client decodes the answer. Over ``AppendBatches`` the client
sends the next batches while the server applies one (at most ``in_flight`` unanswered), and
the answers come back in order, one per batch::

    gRPC's sending thread:  encode 1, send 1 | encode 2, send 2 | encode 3 ...  (BatchFeed)
    server:                        apply 1, answer 1 | apply 2, answer 2 | ...
    caller's thread:                          decode 1, yield 1 | decode 2 ...

The call ends at the first batch the server refuses (nothing of it applied, nor of any
after it); what the client then does depends on why (:func:`resendable`): a refusal that
applied nothing because the stream is elsewhere or the server is stopping sends the batches
left on, one by one through ``Append`` (which follows the cluster) and then over a new call;
a call cut while batches were unanswered resends them only when they carry a producer_id and
sequence (applied once); anything else raises.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1.reasons import Reason

from . import calls
from .errors import DeadlineExceededError, MtaWindowsError

__all__ = [
    "NOTHING_APPLIED",
    "AsyncBatchFeed",
    "BatchFeed",
    "alone",
    "at_batch",
    "batches_call",
    "check_arguments",
    "resendable",
    "timed_out",
]

# refusals of an AppendBatches call that applied nothing of the batch they name nor of any
# later one (the stream is served elsewhere, or this server is stopping): the batches left
# go on elsewhere, keyed or not
NOTHING_APPLIED = frozenset(
    {Reason.NOT_OWNER, Reason.STREAM_MOVING, Reason.MEMBER_ISOLATED, Reason.SERVER_STOPPING}
)


def check_arguments(
    results: str, arrow: bool, in_flight: int, producer_id: str | None, start_sequence: int
) -> None:
    """``append_batches``' arguments, refused before anything is sent."""
    calls.result_mode(results, arrow)
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        msg = f"in_flight: expected an int >= 1, got {in_flight!r}"
        raise ValueError(msg)
    if producer_id and (
        isinstance(start_sequence, bool)
        or not isinstance(start_sequence, int)
        or start_sequence < 1
    ):
        msg = f"start_sequence: expected an int >= 1, got {start_sequence!r}"
        raise ValueError(msg)


def alone(request: pb.AppendRequest) -> bool:
    """A batch too large for one message goes by itself, as AppendStream pieces."""
    return len(request.arrow_ipc) > calls.STREAM_BYTES


def at_batch(ex: BaseException, index: int) -> BaseException:
    """``ex``, the error of batch ``index`` of ``append_batches`` (the answers before it were
    yielded): in its ``metadata["batch"]`` (a service error), else in a note."""
    if isinstance(ex, MtaWindowsError):
        ex.metadata["batch"] = str(index)
    else:
        ex.add_note(
            f"append_batches: batch {index} of the batches given (the batches before it were applied)"
        )
    return ex


def _same(m: Any) -> Any:
    return m


def batches_call(stream: str) -> calls.Call[Any, Any]:
    """The call an AppendBatches is routed as (to ``stream``'s owner; never relayed)."""
    return calls.Call("AppendBatches", pb.AppendRequest(stream=stream), _same, False, stream)


def timed_out(address: str, limit: float) -> DeadlineExceededError:
    msg = (
        f"AppendBatches: no answer from {address} for a batch within {limit:g} s (timeout); "
        f"the call was cancelled"
    )
    return DeadlineExceededError(msg, code="DEADLINE_EXCEEDED", target=address)


def resendable(ex: MtaWindowsError, unanswered: int, idempotent: bool) -> bool:
    """Whether the batches left after an AppendBatches call ended with ``ex`` (``unanswered``
    of them sent and not answered) may be sent again: nothing of them was applied, or none
    was sent, or each is applied once (``idempotent``: a producer_id and sequence each)."""
    if ex.reason in NOTHING_APPLIED or unanswered == 0:
        return True
    return idempotent and ex.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")


class _Feed:
    """What both feeds keep of one AppendBatches call: the requests sent and unanswered (with
    their send times), the one held back, how the source ended, the answers counted."""

    def __init__(self, alone: Callable[[pb.AppendRequest], bool]) -> None:
        self.alone = alone
        self.sent: deque[tuple[pb.AppendRequest, float]] = deque()  # unanswered, send time
        self.held: pb.AppendRequest | None = None
        self.error: BaseException | None = None
        self.exhausted = False
        self.closed = False
        self.answers = 0

    def _taken(self, request: pb.AppendRequest) -> bool:
        """Record a request pulled from the source: sent (True), or held back to go alone."""
        if self.alone(request):
            self.held = request
            return False
        self.sent.append((request, time.monotonic()))
        return True

    def _release(self) -> None:
        raise NotImplementedError

    def answer(self) -> None:
        """The oldest unanswered request was answered: a slot for the next."""
        self.sent.popleft()
        self.answers += 1
        self._release()

    def oldest(self) -> float | None:
        """When the oldest unanswered request was sent (None: none is)."""
        try:
            return self.sent[0][1]
        except IndexError:
            return None

    def unanswered(self) -> int:
        return len(self.sent)

    def stop(self) -> None:
        """End the feed: it returns before pulling another request (one waiting for a slot
        wakes now; one pulling returns once that pull is over)."""
        self.closed = True
        self._release()

    def _left(self) -> list[pb.AppendRequest]:
        """The requests left: those sent and unanswered, then the one held back, in order."""
        left = [r for r, _ in self.sent]
        self.sent.clear()
        if self.held is not None:
            left.append(self.held)
            self.held = None
        return left


class BatchFeed(_Feed):
    """The requests of one AppendBatches call, pulled by gRPC's sending thread from
    ``source`` (encoded there, as they are pulled: the caller's thread meanwhile decodes
    answers): at most ``in_flight`` sent and unanswered; the feed ends when ``source`` does,
    when it raises (:attr:`error`, raised by the caller after the answers before it), at a
    request ``alone`` says goes by itself (:attr:`held`: a batch too large for one message,
    sent as AppendStream pieces) or when :meth:`close` d."""

    def __init__(
        self,
        source: Iterator[pb.AppendRequest],
        in_flight: int,
        alone: Callable[[pb.AppendRequest], bool],
    ) -> None:
        super().__init__(alone)
        self.source = source
        self.slots = threading.Semaphore(in_flight)
        # held while a request is pulled from source: the caller takes it to own the source
        # again once the call ended (a pull in progress is then finished and recorded)
        self.lock = threading.Lock()

    def _release(self) -> None:
        self.slots.release()

    def __iter__(self) -> Iterator[pb.AppendRequest]:
        while True:
            self.slots.acquire()
            with self.lock:
                if self.closed:
                    return
                try:
                    request = next(self.source)
                except StopIteration:
                    self.exhausted = True
                    return
                except BaseException as ex:  # the caller's rows did not encode, say
                    self.error = ex
                    return
                if not self._taken(request):
                    return
            yield request

    def close(self) -> list[pb.AppendRequest]:
        """:meth:`stop`, and return the requests left once a pull in progress is over."""
        self.stop()
        with self.lock:  # a pull in progress is finished (and recorded) first
            return self._left()


class AsyncBatchFeed(_Feed):
    """:class:`BatchFeed` for the asyncio client: the requests of one AppendBatches call,
    pulled by grpc.aio's task from ``source`` (an async iterator). Each pull runs as a task of
    its own, shielded: the call ending (grpc.aio then cancels whatever pulls its requests)
    never cuts the caller's source in the middle of a batch; :meth:`close` waits for it."""

    def __init__(
        self,
        source: AsyncIterator[pb.AppendRequest],
        in_flight: int,
        alone: Callable[[pb.AppendRequest], bool],
    ) -> None:
        super().__init__(alone)
        self.source = source
        self.slots = asyncio.Semaphore(in_flight)
        self.expired = False  # cancelled by the watchdog (the timeout)
        self.ended: MtaWindowsError | None = None  # how the call ended (None: answered all)
        self._pull: asyncio.Future[pb.AppendRequest | None] | None = None

    def _release(self) -> None:
        self.slots.release()

    async def _next(self) -> pb.AppendRequest | None:
        try:
            request = await anext(self.source)
        except StopAsyncIteration:
            self.exhausted = True
            return None
        except Exception as ex:  # the caller's rows did not encode, say
            self.error = ex
            return None
        return request if self._taken(request) else None

    def ended_by_close(self) -> bool:  # (a method: read afresh after each await)
        return self.closed

    async def requests(self) -> AsyncIterator[pb.AppendRequest]:
        while not self.closed:
            await self.slots.acquire()
            if self.ended_by_close():
                return
            self._pull = asyncio.ensure_future(self._next())
            request = await asyncio.shield(self._pull)
            if request is None or self.ended_by_close():
                return
            yield request

    async def close(self) -> list[pb.AppendRequest]:
        """:meth:`stop`, and the requests left once a pull in progress is over."""
        self.stop()
        if self._pull is not None:
            await self._pull
        return self._left()

    async def watch(self, rpc: Any, limit: float) -> None:
        """Cancel ``rpc`` once its oldest unanswered batch was sent over ``limit`` s ago."""
        step = min(1.0, limit / 4)
        while True:
            await asyncio.sleep(step)
            oldest = self.oldest()
            if oldest is not None and time.monotonic() - oldest > limit:
                self.expired = True
                rpc.cancel()
                return
