"""Post-processing of protected tables into releasable inner cells (Langsrud 2019)."""

from __future__ import annotations

__all__: list[str] = []
