"""Tables answered per dataset, counted for the metrics (:mod:`tablesafe.server._observe`)."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["Tally"]


class Tally:
    """Tables answered per dataset, built or from the table cache (safe across threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: Counter[str] = Counter()
        self._cached: Counter[str] = Counter()

    def add(self, dataset: str, *, cached: bool) -> None:
        """Count one table answered for ``dataset``."""
        with self._lock:
            (self._cached if cached else self._built)[dataset] += 1

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Tables built and tables answered from the cache, per dataset."""
        with self._lock:
            return dict(self._built), dict(self._cached)
