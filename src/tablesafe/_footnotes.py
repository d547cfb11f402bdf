"""Footnotes: the plain-language statement that travels with every table.

Every published table (JSON ``meta.footnotes``, the footnote lines of the
API's CSV, the ``about`` sheet of the XLSX, the web page) says in plain
words what was done to it: which method protected it, that small
differences between tables are deliberate, whether totals add up, how the
weighted figures are rounded, what the flags mean, and how to cite the
dataset.

The statement is built only from public facts: the mechanism's public
description, the additivity option, the rounding, the small-cell rule and
the catalog's citation. It never names a true value, a record key, a seed
or the secret, and it is the same for every table built the same way, so it
reveals nothing about any cell. Cells are flagged only when a flag is
itself public (a structural zero, a suppressed cell); which cells the
mechanism or the additivity step changed is never flagged, since that would
tell which published values are exact (see ``ProtectedTable.to_frame``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FLAG_COLUMNS", "footnote_lines", "footnotes"]

#: Flag columns of a published table and their legend entries.
FLAG_COLUMNS = ("structural_zero", "suppressed")


def _method(mechanism: Mapping[str, Any]) -> tuple[str, bool]:
    """The method in words, and whether it changes values at all."""
    name = str(mechanism.get("name", "none"))
    low = name.lower()
    if low == "none":
        return "no protection: the figures are exact (for the data owner's evaluation only)", False
    if low.startswith("drop/add"):
        return (
            "drop/add-up-to-q: a few records are dropped from or added to each table, "
            "chosen by the records' permanent keys",
            True,
        )
    if low == "dp" or "laplace" in low or "geometric" in low:
        eps = mechanism.get("epsilon")
        extra = f" (epsilon = {eps:g})" if isinstance(eps, int | float) else ""
        return (
            "differential privacy: each count has capped, discretised Laplace noise added" + extra,
            True,
        )
    if "pram" in low:
        return (
            "PRAM perturbation of counts: each count is moved by a random amount drawn from "
            "its cell key",
            True,
        )
    return (
        f"the cell-key method ({name}): each count has a small random amount added, "
        "drawn from the permanent keys of the records in the cell",
        True,
    )


_ADDITIVITY = {
    "aggregate": "Totals are the sums of the protected cells shown, so they add up within "
    "this table, but may differ from the same total in another table.",
    "independent": "Each cell and each total was protected on its own, so totals may not "
    "equal the sum of their cells.",
    "ipf": "Totals were protected on their own and the cells then fitted to them and "
    "rounded, so cells add up to their totals within this table.",
}


def footnotes(
    mechanism: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    statistic: str,
    rounding: str | None,
    suppressed_display: str | None,
) -> dict[str, Any]:
    """The footnotes of a table: statement, flag legend and citation.

    Args:
        mechanism: The public description of the protection.
        metadata: The table's public metadata (additivity, small-cell rule,
            weighted statement, citation, standard-error threshold).
        statistic: ``"count"``, ``"weighted"`` or ``"both"``.
        rounding: The rounding of the weighted figures (``"1"``, ``"3sf"``, ...).
        suppressed_display: What suppressed cells show (``None``: blank).

    Returns:
        ``{"statement": [sentences], "flags": {column: meaning}, "citation": text or None}``.
    """
    method, changes = _method(mechanism)
    statement = [f"Protection: {method}."]
    if changes:
        statement.append(
            "Values have been changed slightly to protect the confidentiality of respondents; "
            "small differences between this table and others are deliberate, and the same "
            "cell always gets the same value, for every user."
        )
    additivity = str(metadata.get("additivity", "")).split(" ")[0]
    if changes and additivity in _ADDITIVITY:
        statement.append(_ADDITIVITY[additivity])
    if changes:
        statement.append(
            "Totals may not add up across tables, and figures derived from them (rates, "
            "differences) carry the protection's uncertainty."
        )
    if statistic != "count" and "weighted" in metadata:
        from tablesafe._protection import Rounding

        steps = [Rounding.parse(r).describe() for r in (rounding or "1").split(", then ")]
        statement.append(
            "Weighted figures are estimates derived from the protected counts"
            + (" with added noise" if changes else "")
            + f", {' and then '.join(steps)}; they may not add up exactly to their totals."
        )
    if "se_min_count" in metadata:
        statement.append(
            "Standard errors and 95% confidence intervals are shown only where the protected "
            f"count is at least {metadata['se_min_count']}."
        )
    if metadata.get("ci_lower_bound") == 0:
        statement.append(
            "A weighted count cannot be negative, so an interval that would reach below 0 "
            "starts at 0."
        )
    rule = metadata.get("small_cell_rule")
    flags = {"structural_zero": "a structural zero: this combination cannot occur"}
    if isinstance(rule, Mapping):
        k = rule.get("min_cell_size")
        shown = "left blank" if suppressed_display is None else f'shown as "{suppressed_display}"'
        statement.append(
            f"Protected counts from 1 to {int(k) - 1 if isinstance(k, int) else k} are {shown}."
        )
        flags["suppressed"] = f"suppressed: a protected count below {k}, {shown}"
    citation = metadata.get("citation")
    if citation:
        statement.append(f"Source: {citation}")
    return {
        "statement": statement,
        "flags": flags,
        "citation": citation if citation else None,
    }


def footnote_lines(notes: Mapping[str, Any]) -> list[str]:
    """The footnotes as text lines (for the CSV and the XLSX ``about`` sheet)."""
    lines = list(notes.get("statement", ()))
    for column, meaning in dict(notes.get("flags", {})).items():
        lines.append(f"Flag {column}: {meaning}.")
    return lines
