"""Next steps for the errors a new user meets first: what to run to fix the data.

The texts name commands only, never a value of the data, so they are safe in
any message the server returns.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["missing_key_hint", "missing_replicates_hint"]


def missing_key_hint(record_key: str, missing: Collection[str]) -> str:
    """A clause for a missing-column error when the record-key column is among the missing.

    Args:
        record_key: The catalog's record-key column.
        missing: The columns the microdata lacks.

    Returns:
        ``""`` when the key column is present, else a clause (starting with a space)
        naming ``tablesafe keys add`` and ``tablesafe catalog init``.
    """
    if record_key not in missing:
        return ""
    return (
        f" ({record_key} is the record-key column: give the records permanent keys with "
        f"`tablesafe keys add IN OUT --column {record_key}`, or prepare the file with "
        "`tablesafe catalog init DATA_FILE DIR`, which adds them)"
    )


def missing_replicates_hint() -> str:
    """The next step when standard errors are asked of a dataset without replicate weights."""
    return (
        "; make replicate weights from the sample design with `tablesafe replicates add DIR "
        "--psu COL [--strata COL] --method JK1|JK2|BRR|bootstrap`, or declare existing ones "
        "as replicate_weights in the catalog's [dataset] section"
    )
