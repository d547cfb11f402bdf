"""Command line: `tablesafe evaluate`: choose a protection and its parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app


@app.command("evaluate")
def evaluate_cmd(
    data_dir: Annotated[Path, typer.Argument(help="Dataset folder (with catalog.toml).")],
    table: Annotated[list[str], typer.Option(help="A table, e.g. AGEGRP*SEX (repeatable).")],
    methods: Annotated[
        str, typer.Option(help="Comma-separated: dp, pram, q, ckm.")
    ] = "dp,pram,q,ckm",
    epsilon: Annotated[str, typer.Option(help="dp: comma-separated epsilons.")] = "0.5,1,2",
    cap: Annotated[str, typer.Option(help="dp and q: comma-separated caps.")] = "3,5,7",
    out: Annotated[
        Path | None, typer.Option(help="Folder for results.json, PNG and report.html.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """Risk and utility of each mechanism and parameter on a dataset's tables."""
    from rich.console import Console
    from rich.table import Table

    from tablesafe._dataset import Dataset
    from tablesafe._errors import ParameterError, RequestError
    from tablesafe.experiments._evaluate import evaluate, mechanism_grid

    if fmt not in ("text", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, json")
    try:
        eps = [float(x) for x in epsilon.split(",") if x.strip()]
        caps = [int(x) for x in cap.split(",") if x.strip()]
    except ValueError:
        raise ParameterError("--epsilon and --cap take comma-separated numbers") from None
    configs = mechanism_grid([m.strip() for m in methods.split(",") if m.strip()], eps, caps)
    tables = [[d.strip() for d in t.split("*") if d.strip()] for t in table]
    with Console(stderr=True).status("protecting and measuring"):
        results = evaluate(Dataset.open(data_dir), tables, configs)
    rows = [r.as_dict() for r in results]
    if out is not None:
        _write(rows, out)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    t = Table("table", "method", "epsilon", "delta", "% perturbed", "RM", "HD", "utility", "MAD")
    for r in rows:
        t.add_row(
            r["table"],
            r["method"],
            f"{r['epsilon']:.3g}",
            f"{r['delta']:.3g}",
            f"{r['percent_perturbed']:.1f}",
            f"{r['rm']:.4f}",
            f"{r['hellinger']:.3f}",
            f"{r['utility']:.4f}",
            f"{r['mad']:.3f}",
        )
    Console().print(t)


def _write(rows: list[dict[str, object]], out: Path) -> None:
    import base64
    import html
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in rows:
        x, y = float(r["hellinger"]), float(r["rm"])  # type: ignore[arg-type]
        ax.scatter([x], [y], s=30)
        ax.annotate(
            f"{r['method']} ({r['table']})",
            (x, y),
            fontsize=6,
            textcoords="offset points",
            xytext=(4, 2),
        )
    ax.invert_xaxis()
    ax.set_xlabel("Hellinger distance (reversed)")
    ax.set_ylabel("RM")
    ax.set_title("Risk-utility map")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    (out / "risk_utility.png").write_bytes(buf.getvalue())
    b64 = base64.b64encode(buf.getvalue()).decode()
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0]) if rows else ""
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
        for r in rows
    )
    (out / "report.html").write_text(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tablesafe "
        "evaluation</title></head><body><h1>Risk and utility of the protections</h1>"
        f"<img alt='risk-utility map' src='data:image/png;base64,{b64}'>"
        f"<table border='1'><tr>{head}</tr>{body}</table></body></html>"
    )
