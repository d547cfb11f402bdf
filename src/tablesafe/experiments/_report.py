"""Reports of the simulation study: side-by-side text, figures and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

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
    for m in ("DP", "PRAM", "Q"):
        hd = float(result.table5["dependent"][f"Sample {m}"][3] or 0.0)
        rm = result.table4[m]["rm_dep"]
        ax.scatter([hd], [rm], s=60)
        ax.annotate(m, (hd, rm), textcoords="offset points", xytext=(6, 4))
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
