"""The idempotency ledger: the last sequence applied per producer, and what counts as a
duplicate. One class for every keeper of such a ledger (a window, a stream of the service),
saved and loaded as plain data (``{producer_id: sequence}``) inside their checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["Ledger"]


class Ledger:
    """The last ``sequence`` applied for each ``producer_id``.

    An operation keyed ``(producer_id, sequence)`` is a duplicate when its sequence is not
    above the last one recorded for its producer; applying it then changes nothing. The plain
    data of :meth:`snapshot` goes into checkpoints and comes back through the constructor.
    """

    __slots__ = ("_last",)

    def __init__(self, data: Mapping[Any, Any] | None = None) -> None:
        self._last: dict[str, int] = (
            {} if data is None else {str(k): int(v) for k, v in data.items()}
        )

    @staticmethod
    def check_key(owner: str, producer_id: Any, sequence: Any) -> None:
        """Validate an idempotency key given to ``owner`` (``ValueError`` naming it): a
        non-empty string and an int >= 0."""
        if not isinstance(producer_id, str) or not producer_id:
            msg = (
                f"{owner}: producer_id must be a non-empty string (with sequence), got "
                f"{producer_id!r}"
            )
            raise ValueError(msg)
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
            msg = f"{owner}: sequence must be an int >= 0 (with producer_id), got {sequence!r}"
            raise ValueError(msg)

    def is_duplicate(self, producer_id: str, sequence: int) -> bool:
        """Whether ``(producer_id, sequence)`` was applied already."""
        last = self._last.get(producer_id)
        return last is not None and sequence <= last

    def record(self, producer_id: str, sequence: int) -> None:
        """``(producer_id, sequence)`` was applied."""
        self._last[producer_id] = sequence

    def last(self, producer_id: str) -> int | None:
        """The last sequence applied for ``producer_id``, or ``None``."""
        return self._last.get(producer_id)

    def snapshot(self) -> dict[str, int]:
        """The ledger as plain data (a copy)."""
        return dict(self._last)

    def __len__(self) -> int:
        return len(self._last)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ledger) and other._last == self._last

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Ledger({self._last!r})"
