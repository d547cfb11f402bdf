"""Rate limits over counters that every replica can share.

A limit of ``L`` requests per minute is kept with one counter per bucket (an
API key, or a client address) and wall-clock minute. The requests of the
last 60 seconds are estimated from two counters: this minute's, plus the
previous minute's weighted by the part of it still inside the last 60
seconds (in whole milliseconds), rounded up. Rounding up errs toward
refusing, and keeps a short burst exact: a request of the previous minute
counts in full until its counter times the elapsed share of this minute
reaches one. A request is allowed when the estimate before it is below
``L``; a refused request is not counted, as before counters were shared.

The arithmetic is on integers, so the store's SQL and this module compute
the same numbers; counters are integers in a row each, checked and
incremented in one statement, so the rule holds across threads, processes
and replicas.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["MINUTE_MS", "MemoryRates", "RateCounter", "minute_and_rest", "previous_weight"]

#: A minute in milliseconds.
MINUTE_MS = 60_000


def minute_and_rest(now: float) -> tuple[int, int]:
    """A POSIX time's minute (since the epoch) and the milliseconds of it still ahead."""
    millis = math.floor(now * 1000)
    return millis // MINUTE_MS, MINUTE_MS - millis % MINUTE_MS


def previous_weight(previous: int, rest: int) -> int:
    """How many of the previous minute's requests still count ``rest`` ms before this one ends.

    ``ceil(previous * rest / 60,000)``: all of them at this minute's start.
    """
    return (previous * rest + MINUTE_MS - 1) // MINUTE_MS


class RateCounter(Protocol):
    """What a rate limit needs from a store: one atomic check and increment.

    Implemented by every :class:`~tablesafe.state.StateStore` and by
    :class:`MemoryRates` (one process).
    """

    def hit(self, bucket: str, limit: int, now: float | None = None) -> bool:
        """Count one request in ``bucket`` if fewer than ``limit`` were counted in the last minute.

        Returns:
            Whether the request is allowed (and counted).
        """
        ...


class MemoryRates:
    """Rate-limit counters in this process's memory (tests, and a store-less Authenticator).

    Args:
        clock: The POSIX time (for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._minute = -1

    def hit(self, bucket: str, limit: int, now: float | None = None) -> bool:
        """Count one request in ``bucket`` unless ``limit`` were counted in the last minute."""
        minute, rest = minute_and_rest(self._clock() if now is None else now)
        with self._lock:
            if minute != self._minute:
                # Counters of minutes before the previous one never count again.
                self._counts = {k: n for k, n in self._counts.items() if k[1] >= minute - 1}
                self._minute = minute
            before = previous_weight(self._counts.get((bucket, minute - 1), 0), rest)
            current = self._counts.get((bucket, minute), 0)
            if before + current >= limit:
                return False
            self._counts[bucket, minute] = current + 1
            return True
