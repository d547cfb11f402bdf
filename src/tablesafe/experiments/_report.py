"""Reports of the simulation study: side-by-side text, figures and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import numpy as np

from tablesafe.catalog._magnitudes import WEIGHTED_SUFFIX
from tablesafe.experiments._shlomo2019 import PAPER_TABLE_4, PAPER_TABLE_5, Shlomo2019

__all__ = ["comparison_text", "write_report"]


def _cell(ours: float | None, paper: float | None, digits: int) -> str:
    if ours is None or paper is None:
        return "-"
    return f"{ours:.{digits}f} ({paper:.{digits}f}, {ours - paper:+.{digits}f})"


def comparison_text(result: Shlomo2019) -> str:
    """Tables 4 and 5 in the paper's layout: ours (paper, difference)."""
    out = [f"Shlomo, Krenzke & Li (2019), simulation study: {result.reps} replications", ""]
    out.append("Table 4: risk measures, ours (paper, difference)")
    out.append(f"{'':<26}{'DP':>30}{'PRAM':>30}{'Q':>30}")
    for key, label, d in [
        ("pp_ind", "Percent perturbed, indep.", 1),
        ("pp_dep", "Percent perturbed, dep.", 1),
        ("rm_ind", "RM, independent", 4),
        ("rm_dep", "RM, dependent", 4),
    ]:
        out.append(
            f"{label:<26}"
            + "".join(
                f"{_cell(result.table4[m][key], PAPER_TABLE_4[m][key], d):>30}"
                for m in ("DP", "PRAM", "Q")
            )
        )
    for kind in ("dependent", "independent"):
        out += ["", f"Table 5 ({kind}): ours (paper, difference)"]
        out.append(f"{'':<24}{'mean':>28}{'s.e.':>22}{'% RAD':>26}{'avg HD':>26}")
        for row, (mean, se, rad, hd) in result.table5[kind].items():
            p = PAPER_TABLE_5[kind].get(row, (None, None, None, None))
            out.append(
                f"{row:<24}{_cell(mean, p[0], 1):>28}{_cell(se, p[1], 1):>22}"
                f"{_cell(rad, p[2], 3):>26}{_cell(hd, p[3], 3):>26}"
            )
    return "\n".join(out) + "\n"


def _png(fig: object) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    return buf.getvalue()


def write_report(result: Shlomo2019, out_dir: str | Path) -> Path:
    """Write Figures 1-4 as PNG and ``report.html`` (self-contained) to ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, bytes] = {}
    # Figure 1: the risk-utility map for dependent tables (HD axis reversed).
    fig, ax = plt.subplots(figsize=(5, 4))
    for m, marker in (("DP", "o"), ("PRAM", "^"), ("Q", "s")):
        hd = float(result.table5["dependent"][f"Sample {m}"][3] or 0.0)
        rm = result.table4[m]["rm_dep"]
        ax.scatter([hd], [rm], s=70, marker=marker, facecolors="none", linewidths=1.6, label=m)
    ax.legend(title="method")
    ax.invert_xaxis()
    ax.set_xlabel("Hellinger distance HD(a, b) (reversed)")
    ax.set_ylabel("RM = 1 - H(a|b) / H(a)")
    ax.set_title("Risk-utility map, dependent tables")
    images["figure1_risk_utility.png"] = _png(fig)
    plt.close(fig)
    # Figures 2-4: chi-square statistics and p-values by method.
    for n, (kind, what) in enumerate(
        [("dependent", 0), ("independent", 0), ("dependent", 1), ("independent", 1)], start=2
    ):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        names = list(result.chi_square[kind])
        series = [np.array([x[what] for x in result.chi_square[kind][k]]) for k in names]
        ax.boxplot(series)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_title(f"Chi-square {'statistics' if what == 0 else 'p-values'}, {kind} tables")
        images[f"figure{n}_chisq_{'stat' if what == 0 else 'p'}_{kind}.png"] = _png(fig)
        plt.close(fig)
    for name, png in images.items():
        (out / name).write_bytes(png)
    text = comparison_text(result)
    (out / "tables.txt").write_text(text)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>Shlomo, Krenzke &amp; Li (2019) reproduced</title></head><body>",
        "<h1>Simulation study of Shlomo, Krenzke &amp; Li (2019), reproduced</h1>",
        f"<pre>{html.escape(text)}</pre>",
    ]
    for name, png in images.items():
        b64 = base64.b64encode(png).decode()
        parts.append(f"<figure><img alt='{name}' src='data:image/png;base64,{b64}'>")
        parts.append(f"<figcaption>{html.escape(name)}</figcaption></figure>")
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts))
    return path


# --- `tablesafe evaluate`: text, risk-utility figure and HTML report -----------------

#: The columns of the evaluation's text and HTML tables: key, heading, format.
EVALUATION_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("table", "table", "{}"),
    ("method", "method", "{}"),
    ("epsilon", "epsilon", "{:.3g}"),
    ("delta", "delta", "{:.3g}"),
    ("percent_perturbed", "% perturbed", "{:.1f}"),
    ("small_cells", "small cells", "{:.0f}"),
    ("small_recovered", "% small recovered", "{:.1f}"),
    ("rm", "RM", "{:.4f}"),
    ("rm_weighted", "RM weighted", "{:.4f}"),
    ("hellinger", "HD", "{:.3f}"),
    ("utility", "HD utility", "{:.4f}"),
    ("mad", "MAD", "{:.3f}"),
    ("p_original", "p original", "{:.3g}"),
    ("p_protected", "p protected", "{:.3g}"),
)

_FAMILY_MARKERS = {"dp": "o", "q": "s", "pram": "^", "ckm": "D"}


#: Headings of the magnitude columns, by key prefix (the table's column follows:
#: ``rad_sum_INCOME``, or ``rad_sum_INCOME_weighted`` over the survey weights).
_MAGNITUDE_HEADINGS = (
    ("rad_sum_", "RAD {}sum {} %"),
    ("rad_mean_", "RAD {}mean {} %"),
    ("unpublished_sum_", "% {}sums {} unpublished"),
)


def _magnitude_heading(heading: str, rest: str) -> str:
    """A magnitude column's heading: ``RAD weighted sum INCOME %`` for ``INCOME_weighted``."""
    weighted = rest.endswith(WEIGHTED_SUFFIX)
    name = rest[: -len(WEIGHTED_SUFFIX)] if weighted else rest
    return heading.format("weighted " if weighted else "", name)


def evaluation_columns(rows: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    """The columns present in ``rows``: the fixed ones, then the magnitudes' (key order)."""
    cols = [(k, h, f) for k, h, f in EVALUATION_COLUMNS if any(k in r for r in rows)]
    keys = dict.fromkeys(k for r in rows for k in r)
    for prefix, heading in _MAGNITUDE_HEADINGS:
        cols += [
            (k, _magnitude_heading(heading, k[len(prefix) :]), "{:.2f}")
            for k in keys
            if k.startswith(prefix)
        ]
    return cols


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not np.isfinite(value):
        return "-"
    return spec.format(value)


def evaluation_text(rows: list[dict[str, object]]) -> str:
    """The evaluation as a plain text table: full column names, one line per configuration.

    Columns are as wide as their widest entry (nothing is cut or wrapped, whatever
    the terminal's width); numbers are right-aligned.
    """
    cols = evaluation_columns(rows)
    cells = [[_fmt(r.get(k), f) for k, _, f in cols] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(cols)]

    def line(values: list[str]) -> str:
        parts = [
            v.ljust(w) if k in ("table", "method") else v.rjust(w)
            for v, w, (k, _, _) in zip(values, widths, cols, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line([h for _, h, _ in cols]), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    out += [
        "",
        "small cells: inner cells with a true count of 1 to 4; % small recovered: the share",
        "of them whose true count the best attack (published value, posterior mode, weighted",
        "figures) recovers. Owner only: these figures compare with the unprotected data.",
    ]
    if any(k.startswith("rad_") for k, _, _ in cols):
        out += [
            "RAD sum/mean VAR %: mean over inner cells of 100 |published - true| / |true|",
            "(cells with a non-zero true value that are published).",
        ]
    return "\n".join(out) + "\n"


def _family(method: str) -> str:
    return method.split(" ", 1)[0]


def risk_utility_figure(rows: list[dict[str, object]]) -> bytes:
    """The risk-utility map as PNG: per table, small-cell recovery and RM against utility.

    One row of two panels per table; every configuration has its own colour and its
    family's marker (hollow, so coinciding points stay visible) and is named once in
    a legend beside the panels: no text on the points, so no labels overlap.
    """
    import matplotlib.pyplot as plt

    fig = risk_utility_plot(rows)
    png = _png(fig)
    plt.close(fig)
    return png


def risk_utility_plot(rows: list[dict[str, object]]) -> Any:
    """The matplotlib figure of :func:`risk_utility_figure` (close it after use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    tables = list(dict.fromkeys(str(r["table"]) for r in rows))
    methods = list(dict.fromkeys(str(r["method"]) for r in rows))
    cmap = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
    colour = {m: cmap(i % cmap.N) for i, m in enumerate(methods)}
    # Within a family, later configurations get larger markers: coinciding points nest.
    size = {
        m: 55.0 + 45.0 * [x for x in methods if _family(x) == _family(m)].index(m) for m in methods
    }
    fig, axes = plt.subplots(
        len(tables), 2, figsize=(10, 3.4 * len(tables)), squeeze=False, sharex="row"
    )
    for t, (ax_small, ax_rm) in zip(tables, axes, strict=True):
        these = [r for r in rows if r["table"] == t]
        any_small = False
        for r in these:
            m = str(r["method"])
            style = {
                "marker": _FAMILY_MARKERS.get(_family(m), "o"),
                "facecolors": "none",
                "edgecolors": [colour[m]],
                "s": size[m],
                "linewidths": 1.6,
            }
            x = float(r["utility"])  # type: ignore[arg-type]
            if r.get("small_recovered") is not None:
                ax_small.scatter([x], [float(r["small_recovered"])], **style)  # type: ignore[arg-type]
                any_small = True
            ax_rm.scatter([x], [float(r["rm"])], label=m, **style)  # type: ignore[arg-type]
        if not any_small:
            ax_small.text(
                0.5,
                0.5,
                "no inner cell with a true count of 1 to 4",
                ha="center",
                va="center",
                transform=ax_small.transAxes,
            )
            ax_small.set_yticks([])
        else:
            ax_small.set_ylim(0, 100)
        ax_small.set_ylabel("% of small cells recovered")
        ax_small.set_title(f"{t}: disclosure risk of small cells", fontsize=10)
        ax_rm.set_ylabel("RM = 1 - H(a|b)/H(a)")
        ax_rm.set_title(f"{t}: entropy risk RM", fontsize=10)
        for ax in (ax_small, ax_rm):
            ax.set_xlabel("Hellinger utility (1 = unchanged)")
            ax.grid(True, alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(4))
    handles, labels = axes[0][1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), title="method")
    fig.suptitle("Risk against utility: lower and further right is better", y=1.0)
    fig.tight_layout()
    return fig


def write_evaluation_report(rows: list[dict[str, object]], out_dir: str | Path) -> Path:
    """Write ``results.json``, ``risk_utility.png`` and a self-contained ``report.html``."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    png = risk_utility_figure(rows) if rows else b""
    if png:
        (out / "risk_utility.png").write_bytes(png)
    cols = evaluation_columns(rows)
    head = "".join(f"<th scope='col'>{html.escape(h)}</th>" for _, h, _ in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(k), f))}</td>" for k, _, f in cols) + "</tr>"
        for r in rows
    )
    b64 = base64.b64encode(png).decode()
    figure = (
        f"<figure><img alt='risk-utility map: per table, the share of small cells recovered "
        f"and RM against Hellinger utility, one marker per method' "
        f"src='data:image/png;base64,{b64}'><figcaption>Risk against utility.</figcaption>"
        "</figure>"
        if png
        else ""
    )
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<title>tablesafe evaluation</title><style>body{font-family:sans-serif;max-width:75em}"
        "td,th{padding:.2em .6em;text-align:right}td:nth-child(-n+2){text-align:left}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#f3f3f3}"
        "img{max-width:100%}</style></head><body>"
        "<h1>Risk and utility of the protections</h1>"
        "<p><strong>Owner only</strong>: these figures compare protected tables with the "
        "unprotected data.</p>"
        "<p><em>% small recovered</em>: of the inner cells with a true count of 1 to 4, the "
        "share whose true count the best of three attacks recovers (take the published "
        "count; the posterior mode under the public ptable; the weighted-figures "
        "estimators). <em>RM</em> is seed 000's entropy measure (near 1 for every method on "
        "tables with large counts). <em>HD utility</em> is 1 - HD/sqrt(total). "
        "<em>RAD sum/mean</em> (with continuous variables): the mean over inner cells of "
        "100 |published - true| / |true|, over cells with a non-zero true value that are "
        "published. See "
        "docs/metrics.md and docs/choosing.md.</p>"
        f"{figure}<table><tr>{head}</tr>{body}</table></body></html>\n"
    )
    path = out / "report.html"
    path.write_text(page)
    return path
