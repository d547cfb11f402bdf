"""The data owner's offline tools: catalog drafts, replicate weights, record keys, demo data.

Run once, before a dataset is served; the table builder never calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe._keys import add_record_keys
    from tablesafe.prepare._catalog_init import init_catalog
    from tablesafe.prepare._demo import write_demo_data
    from tablesafe.prepare._replicates import add_replicates

_EXPORTS = {
    "init_catalog": "tablesafe.prepare._catalog_init",
    "add_replicates": "tablesafe.prepare._replicates",
    "write_demo_data": "tablesafe.prepare._demo",
    "add_record_keys": "tablesafe._keys",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "add_record_keys",
    "add_replicates",
    "init_catalog",
    "write_demo_data",
]
