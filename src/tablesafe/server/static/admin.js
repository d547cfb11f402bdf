// tablesafe: the data owner's section of the page (admin keys only): the cumulative
// disclosure risk of everything served, as the reconstruction audit measures it.
// Kept apart from app.js; hidden unless the key in use is an admin key.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  // The key the page keeps in this tab's sessionStorage (app.js), read at each call: it
  // can be entered, changed or forgotten while the page is open.
  const key = () => sessionStorage.getItem("tablesafe-key");
  const pct = (x) => (x === undefined || x === null ? "" : `${(100 * x).toFixed(1)}%`);

  async function call(path, options = {}) {
    const headers = { "content-type": "application/json" };
    if (key()) headers["x-api-key"] = key();
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (!response.ok) {
      let message = `request failed (${response.status})`;
      try { message = (await response.json()).error.message; } catch (e) { /* keep it */ }
      const error = new Error(message); error.status = response.status; throw error;
    }
    return response.json();
  }

  function range(row, name) {
    const low = pct(row[name]);
    return row.complete || row[`${name}_upper`] === undefined ? low : `${low} to ${pct(row[`${name}_upper`])}`;
  }

  function chart(history) {
    // An inline SVG line of the share of records in pinned cells, over the audits.
    const w = 480, h = 120, pad = 24;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "Share of records in exactly reconstructed cells, audit by audit: " +
      history.map((r) => `${r.served_until || r.time}: ${pct(r.records_exact_share)}`).join("; "));
    const n = history.length;
    const x = (i) => pad + (n > 1 ? (i * (w - 2 * pad)) / (n - 1) : (w - 2 * pad) / 2);
    const y = (v) => h - pad - v * (h - 2 * pad);
    const line = (get, color) => {
      const path = document.createElementNS(svg.namespaceURI, "polyline");
      path.setAttribute("points", history.map((r, i) => `${x(i)},${y(get(r))}`).join(" "));
      path.setAttribute("fill", "none"); path.setAttribute("stroke", color); path.setAttribute("stroke-width", "2");
      svg.appendChild(path);
    };
    line((r) => (r.unprotected ? r.unprotected.records_exact_share : 0), "#999");
    line((r) => r.records_exact_share, "#a40000");
    for (const [v, label] of [[0, "0%"], [1, "100%"]]) {
      const t = document.createElementNS(svg.namespaceURI, "text");
      t.setAttribute("x", 2); t.setAttribute("y", y(v) + 4); t.setAttribute("font-size", "10");
      t.textContent = label; svg.appendChild(t);
    }
    return svg;
  }

  function render(dataset, history) {
    const box = $("risk-body");
    box.replaceChildren();
    if (!history.length) {
      box.textContent = `No reconstruction audit of ${dataset} yet.`;
      return;
    }
    box.appendChild(chart(history));
    const legend = document.createElement("p");
    legend.className = "footnote";
    legend.textContent = "Red: records in exactly reconstructed cells from the protected tables served; grey: the same tables unprotected.";
    box.appendChild(legend);
    const table = document.createElement("table");
    table.className = "cross";
    const head = table.createTHead().insertRow();
    for (const title of ["audit", "served until", "tables", "cells pinned", "records pinned", "uniques re-identified", "unprotected: records pinned"]) {
      const th = document.createElement("th"); th.scope = "col"; th.textContent = title; head.appendChild(th);
    }
    const body = table.createTBody();
    for (const row of history) {
      const tr = body.insertRow();
      for (const value of [row.time, row.served_until || "", row.tables, range(row, "cells_exact_share"),
        range(row, "records_exact_share"), range(row, "uniques_exact_share"),
        row.unprotected ? pct(row.unprotected.records_exact_share) : ""]) {
        tr.insertCell().textContent = value;
      }
    }
    box.appendChild(table);
  }

  async function refresh() {
    const dataset = $("dataset").value;
    if (!dataset) return;
    try {
      const out = await call(`/api/admin/datasets/${encodeURIComponent(dataset)}/reconstruction`);
      $("risk-admin").hidden = false;
      render(dataset, out.history);
    } catch (e) {
      $("risk-admin").hidden = true; // not an admin key: nothing to show
    }
  }

  async function run() {
    const dataset = $("dataset").value;
    $("risk-status").textContent = "Attacking every table served (this can take a while)...";
    $("risk-run").disabled = true;
    try {
      await call(`/api/admin/datasets/${encodeURIComponent(dataset)}/reconstruction?time_limit=30`, { method: "POST" });
      $("risk-status").textContent = "Done.";
      await refresh();
    } catch (e) {
      $("risk-status").textContent = e.message;
    } finally {
      $("risk-run").disabled = false;
    }
  }

  async function refreshIfKeyed() {
    if (key()) await refresh();
    else $("risk-admin").hidden = true;
  }

  if (!$("risk-admin")) return;
  $("risk-run").addEventListener("click", run);
  // app.js says when a dataset is loaded (first, or chosen) and when the key changes.
  document.addEventListener("tablesafe-dataset", refreshIfKeyed);
  document.addEventListener("tablesafe-key", refreshIfKeyed);
})();
