"""Protection mechanisms.

Cell-wise mechanisms are perturbation tables (:class:`tablesafe.PTable`) built
by the constructors in ``_cellwise``; table-level mechanisms (cyclic
perturbation, resampling) act on a whole table with an explicit Generator.
Each private module owns its ``__all__``; this package re-exports them.
"""

from __future__ import annotations

from tablesafe.mechanisms import _cellwise, _cyclic, _records, _resampling
from tablesafe.mechanisms._cellwise import *  # noqa: F403
from tablesafe.mechanisms._cyclic import *  # noqa: F403
from tablesafe.mechanisms._records import *  # noqa: F403
from tablesafe.mechanisms._resampling import *  # noqa: F403

__all__ = [*_cellwise.__all__, *_cyclic.__all__, *_records.__all__, *_resampling.__all__]
