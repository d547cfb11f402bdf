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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tablesafe._protection_limits import Additivity
from tablesafe._request import Statistic
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, SensitiveAction

__all__ = ["FLAG_COLUMNS", "SE_UNWEIGHTED", "footnote_lines", "footnotes"]

#: Flag columns of a published table and their legend entries.
FLAG_COLUMNS = ("structural_zero", "suppressed", "withheld", "excludes_withheld")

#: Why a table of statistic ``count`` asked with standard errors has none (``meta.se_unavailable``).
SE_UNWEIGHTED = (
    "Standard errors were asked for but are not given: they are of weighted estimates "
    "(computed from the replicate weights), and this table's figures are of the sample's "
    "records (statistic 'count'), not weighted estimates of the population; ask for "
    "statistic 'weighted' or 'both' for their standard errors."
)


def _q_words(mechanism: Mapping[str, Any]) -> str:
    rate, cap = mechanism.get("rate"), mechanism.get("cap")
    if isinstance(rate, int | float) and isinstance(cap, int):
        return f"q = {rate:g} x the count, rounded up, at most {cap}"
    return "q from the count"


#: Plain words for each mechanism tablesafe constructs, by the name its
#: constructor gives it (the public description of the Protection object:
#: ``Protection.describe()``), and whether it changes values at all.
_METHODS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "none": lambda m: "no protection: the figures are exact (for the data owner's evaluation only)",
    "ckm": lambda m: (
        "the cell-key method (a Destatis perturbation table): each count has a small "
        "random amount added, drawn from the permanent keys of the records in the cell"
    ),
    "dp": lambda m: (
        "differential privacy: each count has capped, discretised Laplace noise added"
        + (f" (epsilon = {m['epsilon']:g})" if isinstance(m.get("epsilon"), int | float) else "")
    ),
    "pram": lambda m: (
        "PRAM perturbation of counts: each count is moved by a random amount drawn from "
        "its cell key"
    ),
    "q": lambda m: (
        "drop/add-up-to-q, cell by cell: each count has a whole number from -q to q added "
        f"({_q_words(m)}), drawn from the permanent keys of the records in the cell"
    ),
    "drop/add-up-to-q (record level)": lambda m: (
        "drop/add-up-to-q: a few records are dropped from or added to each table, "
        "chosen by the records' permanent keys"
    ),
}


def _method(mechanism: Mapping[str, Any]) -> tuple[str, bool]:
    """The method in words, and whether it changes values at all.

    A perturbation table read from a file says so, whatever its name (a file
    named ``dp.csv`` is not the DP mechanism); a name tablesafe does not
    construct gets the words that hold for every perturbation table.
    """
    name = str(mechanism.get("name", "none"))
    if "file" in mechanism:
        return (
            f"a perturbation table read from {mechanism['file']}: each count has a random "
            "amount added from the table, drawn from the permanent keys of the records in the cell",
            True,
        )
    words = _METHODS.get(name)
    if words is not None:
        return words(mechanism), name != "none"
    return (
        f"a perturbation table ({name}): each count has a random amount added, drawn from "
        "the permanent keys of the records in the cell",
        True,
    )


#: What each additivity option means for a table's totals (keyed by the option's text).
_ADDITIVITY: dict[str, str] = {
    Additivity.AGGREGATE: (
        "Totals of counts are the sums of the protected cells, so they add up within "
        "this table, but may differ from the same total in another table."
    ),
    Additivity.INDEPENDENT: (
        "Each count, totals included, was protected on its own, so totals may not "
        "equal the sum of their cells."
    ),
    Additivity.IPF: (
        "Totals of counts were protected on their own and the cells then fitted to them and "
        "rounded, so cells add up to their totals within this table."
    ),
}


def _plain(text: str) -> str:
    """Catalog text as plain words: footnotes are not Markdown (no `code` backticks)."""
    return text.replace("`", "")


def _rounding_words(roundings: Sequence[Rounding]) -> tuple[str, bool]:
    """The rounding in words, and whether every step rounds to a base (keeps sums exact)."""
    steps = list(roundings) or [Rounding()]
    return " and then ".join(r.describe() for r in steps), all(r.base is not None for r in steps)


def footnotes(
    mechanism: Mapping[str, Any],
    metadata: Mapping[str, Any],
    *,
    statistic: Statistic | str,
    roundings: Sequence[Rounding],
    suppressed_display: str | None,
    magnitudes: Sequence[str] = (),
) -> dict[str, Any]:
    """The footnotes of a table: statement, flag legend and citation.

    Each sentence states what a test checks on the table it comes with
    (tests/test_footnotes.py builds a table for every method and statistic).

    Args:
        mechanism: The public description of the protection (``Protection.describe()``).
        metadata: The table's public metadata (additivity, small-cell rule,
            weighted statement, magnitudes, citation, reference date, date of the
            last update, standard-error threshold).
        statistic: ``"count"``, ``"weighted"`` or ``"both"``.
        roundings: The roundings of the weighted figures, in order.
        suppressed_display: What suppressed cells show (``None``: blank).
        magnitudes: The request's sums and means (``"sum:VAR"``, ``"mean:VAR"``).

    Returns:
        ``{"statement": [sentences], "flags": {column: meaning}, "citation": text or None}``.
    """
    method, changes = _method(mechanism)
    statement = [f"Protection: {method}."]
    if metadata.get("unit"):
        unit = metadata["unit"]
        statement.append(
            f"The table counts {unit}s: each {unit} once, by its own variables, with its own "
            f"record key (its noise) and weight."
        )
    additivity = str(metadata.get("additivity", "")).split(" ")[0]
    additive = additivity in (Additivity.AGGREGATE, Additivity.IPF)
    if changes:
        _change_notes(mechanism, additivity, statistic, statement)
    if statistic != Statistic.COUNT and "weighted" in metadata:
        statement.append(_weighted_note(roundings, additive=additive, changes=changes))
    _percent_notes(metadata, statement)
    _interval_notes(metadata, statement)
    flags = {"structural_zero": "this combination cannot occur (a structural zero)"}
    _precision_notes(metadata, statement, flags)
    rule = metadata.get("small_cell_rule")
    if isinstance(rule, Mapping):
        _small_cell_notes(rule, suppressed_display, additive, statement, flags)
    withheld = metadata.get("withheld")
    if isinstance(withheld, Mapping):
        _withheld_notes(withheld, statement, flags)
    mags = metadata.get("magnitudes")
    if isinstance(mags, Mapping):
        _magnitude_notes(mags, magnitudes, statement, flags)
    quantiles = metadata.get("quantiles")
    if isinstance(quantiles, Mapping):
        _quantile_notes(quantiles, statement)
    citation = metadata.get("citation")
    if citation:
        statement.append(f"Source: {_plain(str(citation))}")
    # The catalog's dates (ISO 8601, checked when it is loaded).
    if metadata.get("reference_date"):
        statement.append(f"Reference date of the data: {metadata['reference_date']}.")
    if metadata.get("updated"):
        statement.append(f"Data last updated: {metadata['updated']}.")
    return {
        "statement": statement,
        "flags": flags,
        "citation": citation if citation else None,
    }


def _weighted_note(roundings: Sequence[Rounding], *, additive: bool, changes: bool) -> str:
    """The sentence on weighted figures: how they are made, rounded, and whether totals add up."""
    words, exact = _rounding_words(roundings)
    if not changes:
        # Unprotected, a total is the true total rounded once, not a sum of rounded cells.
        adds = (
            "each total is the exact total, rounded once, so totals may differ from the "
            "sums of their rounded cells"
        )
    elif additive and exact:
        adds = "totals of weighted figures are the sums of their cells within this table"
    else:
        adds = "they may not add up exactly to their totals"
    return (
        "Weighted figures are estimates derived from the protected counts with added noise"
        if changes
        else "Weighted figures are the exact sums of the survey weights"
    ) + f", {words}; {adds}."


def _change_notes(
    mechanism: Mapping[str, Any],
    additivity: str,
    statistic: Statistic | str,
    statement: list[str],
) -> None:
    """Step 1 of footnotes: what a protection that changes values says of them."""
    # Cells fitted to their totals (ipf) and dynamic seeds depend on the table
    # around a cell: then only the same table is the same for every user.
    consistent = additivity != Additivity.IPF and mechanism.get("seeds") != SeedScheme.DYNAMIC
    statement.append(
        "Values have been changed slightly to protect the confidentiality of respondents; "
        "small differences between this table and others are deliberate, and "
        + (
            "the same cell always gets the same value, for every user."
            if consistent
            else "the same table always gets the same values, for every user."
        )
    )
    if statistic != Statistic.WEIGHTED and additivity in _ADDITIVITY:
        statement.append(_ADDITIVITY[additivity])
    statement.append(
        "Totals may not add up across tables, and figures derived from them (rates, "
        "differences) carry the protection's uncertainty."
    )


def _interval_notes(metadata: Mapping[str, Any], statement: list[str]) -> None:
    """Step 2 of footnotes: where standard errors are shown and where intervals start."""
    if metadata.get("se_unavailable"):
        statement.append(str(metadata["se_unavailable"]))
    if "se_min_count" in metadata:
        statement.append(
            "Standard errors and 95% confidence intervals are shown only where the protected "
            f"count is at least {metadata['se_min_count']}."
        )
    if "se_min_count" in metadata and metadata.get("se_perturbation"):
        statement.append(
            "Standard errors add the variance the protection adds (the change of each count, "
            "the noise on weighted figures) to the sampling variance from the replicate weights."
        )
    if metadata.get("ci_lower_bound") == 0:
        statement.append(
            "A weighted count cannot be negative, so an interval that would reach below 0 "
            "starts at 0."
        )
    pct = metadata.get("percentages")
    if "se_min_count" in metadata and isinstance(pct, Mapping) and pct.get("of") == "weighted":
        statement.append(
            "A percentage's interval that would reach below 0 starts at 0"
            + (", and one above 100 ends at 100." if pct.get("ci_upper_bound") == 100 else ".")
        )


def _percent_notes(metadata: Mapping[str, Any], statement: list[str]) -> None:
    """What a table's percentages are of (``meta.percentages``)."""
    pct = metadata.get("percentages")
    if not isinstance(pct, Mapping):
        return
    words = Rounding.parse(str(pct.get("rounding", "0.01"))).describe()
    if pct.get("of") == "weighted":
        statement.append(
            "Percentages divide this table's weighted counts, before they are rounded, by "
            f"their totals in this table and are {words}, so they may differ slightly from "
            "the shares of the rounded figures."
        )
    else:
        statement.append(
            f"Percentages divide this table's counts by their totals in this table, {words}."
        )


def _precision_notes(
    metadata: Mapping[str, Any], statement: list[str], flags: dict[str, str]
) -> None:
    """The precision rule's sentence and flag (``meta.precision_rule``)."""
    rule = metadata.get("precision_rule")
    if not isinstance(rule, Mapping):
        return
    least = int(rule.get("min_effective_count", 0))
    meaning = (
        f"too unreliable: a relative standard error above {float(rule['max_rse']):g}%, "
        "or no standard error (too few protected records)"
        + (f", or fewer than {least} protected records" if least > 0 else "")
    )
    if rule.get("action") == "np":
        statement.append(
            f'Estimates {meaning} show "np" (not published), with their standard errors '
            "and intervals."
        )
        flags["np"] = f"not published: {meaning}"
    else:
        statement.append(f"Estimates {meaning} are flagged.")
        for column in rule.get("estimates", ()):
            flags[f"unreliable_{column}"] = f"this estimate is {meaning}"


def _small_cell_notes(
    rule: Mapping[str, Any],
    suppressed_display: str | None,
    additive: bool,
    statement: list[str],
    flags: dict[str, str],
) -> None:
    """Step 3 of footnotes: what the small-cell rule did, and its flag."""
    k = rule.get("min_cell_size")
    upper = int(k) - 1 if isinstance(k, int) else k
    shown = "left blank" if suppressed_display is None else f'shown as "{suppressed_display}"'
    statement.append(
        f"Protected counts from 1 to {upper} are {shown}"
        + (", and totals include them." if additive else ".")
    )
    flags["suppressed"] = f"a protected count from 1 to {upper}, {shown}"


def _withheld_notes(
    withheld: Mapping[str, Any], statement: list[str], flags: dict[str, str]
) -> None:
    """What the account of published figures withheld (``meta.withheld``), and its flags."""
    cells = int(withheld.get("cells", 0))
    noun = "cell is" if cells == 1 else "cells are"
    sentence = (
        f"{cells} {noun} withheld: together with figures already published, they would let "
        "differences isolate a few records."
    )
    if withheld.get("margins_excluding"):
        sentence += (
            " Totals add up the cells published: a total marked excludes_withheld leaves the "
            "withheld cells out, and its sums, means and quantiles are withheld too."
        )
    elif withheld.get("margins") == "withheld with their cells":
        sentence += " Totals over a withheld cell are withheld too."
    statement.append(sentence)
    flags["withheld"] = "withheld: publishing it would isolate a few records by difference"
    if withheld.get("margins_excluding"):
        flags["excludes_withheld"] = "a total of the cells published only (some are withheld)"


def _magnitude_notes(
    mags: Mapping[str, Any],
    items: Sequence[str],
    statement: list[str],
    flags: dict[str, str],
) -> None:
    """The sentences and flags of a table's sums and means (``meta.magnitudes``)."""
    names = list(mags.get("variables", ()))
    if mags.get("statement"):
        # The metadata's own words, verbatim: the page shows each sentence once.
        statement.append(str(mags["statement"]))
    elif mags.get("method") == MagnitudeMethod.NONE:
        statement.append("Sums and means of continuous variables are exact (no protection).")
    rounding = mags.get("rounding", {})
    sums = [i.split(":", 1)[1] for i in items if i.startswith("sum:")]
    means = [i.split(":", 1)[1] for i in items if i.startswith("mean:")]

    if sums:
        words = Rounding.parse(str(rounding.get("sum", "1"))).describe()
        statement.append(
            f"Sums ({', '.join(sums)}) are {words}"
            + (
                "; each cell and each total is protected on its own, so totals may not "
                "equal the sum of their cells."
                if mags.get("method") != MagnitudeMethod.NONE
                else "."
            )
        )
    if means:
        words = Rounding.parse(str(rounding.get("mean", "0.01"))).describe()
        over = (
            "protected weighted counts before rounding"
            if mags.get("weighted")
            else "protected counts"
        )
        statement.append(
            f"Means ({', '.join(means)}) are the protected sums over the {over}, {words}."
        )
    rules = list(mags.get("rules", ()))
    if rules:
        hidden = mags.get("sensitive_cells") == SensitiveAction.SUPPRESS
        for name in names:
            flags[f"sensitive_{name}"] = (
                f"the {' or '.join(rules)} rule finds that a few records make up most of "
                f"this cell's {name}" + ("; its sum and mean are left blank" if hidden else "")
            )


def _quantile_notes(quantiles: Mapping[str, Any], statement: list[str]) -> None:
    """The sentences of a table's medians and quantiles (``meta.quantiles``)."""
    over = "survey weights" if quantiles.get("weighted") else "records"
    words = Rounding.parse(str(quantiles.get("rounding", "1"))).describe()
    if quantiles.get("method") == MagnitudeMethod.NONE:
        statement.append(
            f"Medians and quantiles are exact (no protection), over the {over}, {words}."
        )
    else:
        statement.append(
            f"Medians and quantiles (over the {over}): {quantiles.get('statement', '')}; "
            f"{words}; blank where not published."
        )
    if quantiles.get("intervals"):
        statement.append(str(quantiles["intervals"]))


def footnote_lines(notes: Mapping[str, Any]) -> list[str]:
    """The footnotes as text lines (for the CSV and the XLSX ``about`` sheet)."""
    lines = list(notes.get("statement", ()))
    for column, meaning in dict(notes.get("flags", {})).items():
        lines.append(f"Flag {column}: {meaning}.")
    return lines
