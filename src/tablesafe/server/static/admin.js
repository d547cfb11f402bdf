// tablesafe: the data owner's section of the page (admin keys only): the privacy ledger of
// the chosen dataset and the reconstruction audits of everything served, over time.
// Kept apart from app.js; hidden unless the key in use is an admin key.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  // The key the page keeps in this tab's sessionStorage (app.js), read at each call: it
  // can be entered, changed or forgotten while the page is open.
  const key = () => sessionStorage.getItem("tablesafe-key");
  const pct = (x) => (x === undefined || x === null ? "" : `${(100 * x).toFixed(1)}%`);
  // Privacy figures to 6 significant digits, without trailing zeros ("none" for no value).
  const num = (x) => (x === undefined || x === null ? "none" : String(Number(Number(x).toPrecision(6))));
  // The putative (best-guess) shares plotted, with their colour (the baseline's: dashed).
  const SERIES = [
    ["cells_exact_share", "cells exactly right", "#1f4e9a"],
    ["uniques_exact_share", "sample uniques found", "#a40000"],
    ["uniques_precision", "precision of claimed uniques", "#1a6b1a"],
  ];

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

  function el(tag, text, attrs = {}) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    return node;
  }

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A table with a caption, column headers and rows of text cells.
  function textTable(caption, titles, rows) {
    const table = el("table", undefined, { class: "cross" });
    table.createCaption().textContent = caption;
    const head = table.createTHead().insertRow();
    for (const title of titles) head.appendChild(el("th", title, { scope: "col" }));
    const body = table.createTBody();
    for (const row of rows) {
      const tr = body.insertRow();
      for (const value of row) tr.insertCell().textContent = value;
    }
    const box = el("div", undefined, { class: "table-scroll", tabindex: "0", role: "region" });
    box.setAttribute("aria-label", caption);
    box.appendChild(table);
    return box;
  }

  // -- the privacy ledger ------------------------------------------------------------------

  function budgetWords(budget) {
    const parts = [];
    if (budget.epsilon !== null && budget.epsilon !== undefined) parts.push(`epsilon ${num(budget.epsilon)} for the dataset`);
    if (budget.epsilon_per_key !== null && budget.epsilon_per_key !== undefined) parts.push(`epsilon ${num(budget.epsilon_per_key)} per key`);
    return parts.length ? parts.join("; ") : "none set";
  }

  function renderLedger(report) {
    const box = $("ledger-body");
    box.replaceChildren();
    const figures = el("dl", undefined, { class: "legend", id: "ledger-figures" });
    for (const [field, label, value] of [
      // null: no epsilon holds at the ledger's delta (a protection that is not DP).
      ["epsilon_spent", "Epsilon spent (largest loss of any record)", report.epsilon_spent === null ? "infinite" : num(report.epsilon_spent)],
      ["budget", "Budget", budgetWords(report.budget)],
      ["epsilon_left", "Epsilon left", report.epsilon_left === null ? "no budget set" : num(report.epsilon_left)],
      ["delta", "Delta (epsilon holds at this delta)", num(report.delta)],
      ["tables", "Tables that spent something", String(report.tables)],
      ["figures", "Distinct figures published", String(report.figures)],
      ["figures_per_record", "Most figures holding one record", String(report.figures_per_record)],
    ]) {
      figures.appendChild(el("dt", label));
      figures.appendChild(el("dd", value, { "data-field": field }));
    }
    box.appendChild(figures);
    if (report.note) {
      const note = el("p", undefined, { id: "ledger-note" });
      note.append(el("strong", "Not a DP guarantee."), ` ${report.note[0].toUpperCase()}${report.note.slice(1)}.`);
      box.appendChild(note);
    }
    box.appendChild(el("p", `How it is counted: ${report.accounting}.`, { class: "footnote" }));
    const rows = report.keys.map((k) => [k.key_id, k.epsilon_spent === null ? "infinite" : num(k.epsilon_spent),
      k.epsilon_left === null ? "no budget set" : num(k.epsilon_left),
      String(k.figures_per_record), String(k.tables), String(k.figures)]);
    const table = textTable("Privacy loss per key",
      ["key", "epsilon spent", "epsilon left", "figures per record", "tables", "figures"], rows);
    table.id = "ledger-keys";
    box.appendChild(table);
  }

  // -- the reconstruction audits -----------------------------------------------------------

  const shareOf = (row, field, baseline) => {
    const block = row.putative || {};
    const source = baseline ? block.baseline || {} : block;
    return typeof source[field] === "number" ? source[field] : null;
  };

  function axes(svg, n, box) {
    const { w, h, left, right, top, bottom, x, y } = box;
    svg.appendChild(svgEl("line", { x1: left, y1: h - bottom, x2: w - right, y2: h - bottom, stroke: "#333" }));
    svg.appendChild(svgEl("line", { x1: left, y1: top, x2: left, y2: h - bottom, stroke: "#333" }));
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      svg.appendChild(svgEl("line", { x1: left - 4, y1: y(v), x2: w - right, y2: y(v), stroke: v ? "#ddd" : "#333" }));
      svg.appendChild(svgEl("text", { x: left - 6, y: y(v) + 4, "font-size": 11, "text-anchor": "end", fill: "#333" }, `${100 * v}%`));
    }
    const step = Math.max(1, Math.ceil(n / 8));
    for (let i = 0; i < n; i += step) {
      svg.appendChild(svgEl("text", { x: x(i), y: h - bottom + 15, "font-size": 11, "text-anchor": "middle", fill: "#333" }, String(i + 1)));
    }
    svg.appendChild(svgEl("text", { x: (left + w - right) / 2, y: h - 4, "font-size": 11, "text-anchor": "middle", fill: "#333" }, "audit (oldest first)"));
  }

  function chart(history) {
    const box = { w: 520, h: 220, left: 46, right: 12, top: 10, bottom: 38 };
    const n = history.length;
    box.x = (i) => box.left + (n > 1 ? (i * (box.w - box.left - box.right)) / (n - 1) : (box.w - box.left - box.right) / 2);
    box.y = (v) => box.h - box.bottom - v * (box.h - box.top - box.bottom);
    const svg = svgEl("svg", { viewBox: `0 0 ${box.w} ${box.h}`, role: "img", id: "putative-chart",
      "aria-label": "Best-guess reconstruction over the audits, and its baseline; the figures are in the table beside the chart." });
    axes(svg, n, box);
    for (const [field, , color] of SERIES) {
      for (const baseline of [false, true]) {
        const points = history.map((r, i) => [i, shareOf(r, field, baseline)]).filter(([, v]) => v !== null);
        const attrs = { fill: "none", stroke: color, "stroke-width": 2, points: points.map(([i, v]) => `${box.x(i)},${box.y(v)}`).join(" ") };
        if (baseline) attrs["stroke-dasharray"] = "5 4";
        svg.appendChild(svgEl("polyline", attrs));
        for (const [i, v] of points) svg.appendChild(svgEl("circle", { cx: box.x(i), cy: box.y(v), r: 2.5, fill: color }));
      }
    }
    return svg;
  }

  function putativeTable(history) {
    const titles = ["audit", "time", "tables"];
    for (const [, label] of SERIES) titles.push(label, `baseline: ${label}`);
    const rows = history.map((row, i) => {
      const cells = [String(i + 1), row.time, String(row.tables)];
      for (const [field] of SERIES) cells.push(pct(shareOf(row, field, false)), pct(shareOf(row, field, true)));
      return cells;
    });
    const table = textTable("Best-guess reconstruction, audit by audit", titles, rows);
    table.id = "putative-table";
    return table;
  }

  function range(row, name) {
    const low = pct(row[name]);
    return row.complete || row[`${name}_upper`] === undefined ? low : `${low} to ${pct(row[`${name}_upper`])}`;
  }

  function provableTable(history) {
    const rows = history.map((row) => [row.time, row.served_until || "", String(row.tables),
      range(row, "cells_exact_share"), range(row, "records_exact_share"), range(row, "uniques_exact_share"),
      row.unprotected ? pct(row.unprotected.records_exact_share) : ""]);
    const table = textTable("Cells the tables pin provably",
      ["audit", "served until", "tables", "cells pinned", "records pinned", "uniques re-identified", "unprotected: records pinned"], rows);
    table.id = "provable-table";
    return table;
  }

  function render(dataset, history) {
    const box = $("risk-body");
    box.replaceChildren();
    if (!history.length) {
      box.textContent = `No reconstruction audit of ${dataset} yet.`;
      return;
    }
    const pair = el("div", undefined, { class: "chart-pair" });
    pair.appendChild(chart(history));
    pair.appendChild(putativeTable(history));
    box.appendChild(pair);
    box.appendChild(el("p", "Solid lines: the best guess (the integer table closest to every figure published); " +
      "dashed: the baseline, a guess from the one-way margins alone. Blue: cells exactly right; red: sample uniques " +
      "found; green: the share of the uniques it claims that are uniques.", { class: "footnote" }));
    box.appendChild(provableTable(history));
  }

  async function refresh() {
    const dataset = $("dataset").value;
    if (!dataset) return;
    const base = `/api/admin/datasets/${encodeURIComponent(dataset)}`;
    try {
      const [ledger, audits] = await Promise.all([call(`${base}/ledger`), call(`${base}/reconstruction`)]);
      $("risk-admin").hidden = false;
      renderLedger(ledger);
      render(dataset, audits.history);
    } catch (e) {
      // Not an admin key: nothing to show. Another failure is said in the section.
      const refused = e.status === 401 || e.status === 403;
      $("risk-admin").hidden = refused;
      if (!refused) $("risk-status").textContent = e.message;
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
