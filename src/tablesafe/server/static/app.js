// tablesafe table builder: plain JavaScript, no build step, no network beyond this server.
"use strict";

const state = { datasets: [], meta: null, conditions: {}, groups: [], last: null, doc: null, controller: null };
const $ = (id) => document.getElementById(id);
const FLAG_SYMBOL = { structural_zero: "z", suppressed: "x" };
const apiKey = new URLSearchParams(location.search).get("key") || localStorage.getItem("tablesafe-key");

async function api(path, options = {}) {
  const headers = Object.assign({ "content-type": "application/json" }, options.headers || {});
  if (apiKey) headers["x-api-key"] = apiKey;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = `request failed (${response.status})`;
    try { message = (await response.json()).error.message; } catch (e) { /* keep the default */ }
    throw new Error(message);
  }
  return response;
}

// Custom groups are sent as one grouping per variable, named VAR_C, with "Other" for the rest.
function customGroupings() {
  const byVar = {};
  for (const g of state.groups) (byVar[g.variable] = byVar[g.variable] || []).push(g);
  return Object.entries(byVar).map(([variable, groups]) => ({
    name: `${variable}_C`, variable, label: `${varInfo(variable).label} (custom groups)`,
    groups: groups.map((g, i) => ({ code: `g${i + 1}`, label: g.label, members: g.members })),
    other: "Other",
  }));
}

function varInfo(name) {
  const v = state.meta.variables.find((x) => x.name === name);
  if (v) return v;
  const g = customGroupings().find((x) => x.name === name);
  if (!g) return { name, label: name, categories: [] };
  return { name, label: g.label, categories: [...g.groups.map((x) => ({ code: x.code, label: x.label })), { code: "other", label: "Other" }] };
}

function option(value, text) {
  const o = document.createElement("option");
  o.value = value; o.textContent = text; return o;
}

function fillVariables() {
  const vars = [...state.meta.variables, ...customGroupings().map((g) => varInfo(g.name))];
  for (const [id, optional] of [["rows", false], ["cols", true], ["layers", true], ["uvar", false], ["gvar", false]]) {
    const select = $(id);
    const keep = select.value;
    select.replaceChildren();
    if (optional) select.appendChild(option("", "(none)"));
    for (const v of (id === "gvar" ? state.meta.variables : vars)) select.appendChild(option(v.name, `${v.label} (${v.name})`));
    if (keep && vars.some((v) => v.name === keep)) select.value = keep;
    else if (id === "cols" && vars.length > 1) select.value = vars[1].name;
  }
  fillCategories();
  fillGroupCategories();
}

function fillGroupCategories() {
  const v = varInfo($("gvar").value);
  $("gcats").replaceChildren(...v.categories.map((c) => option(String(c.code), c.label)));
}

function renderGroups() {
  const list = $("groups");
  list.replaceChildren();
  state.groups.forEach((g, i) => {
    const li = document.createElement("li");
    li.textContent = `${g.label}: ${varInfo(g.variable).label} ${g.members.join(", ")} `;
    const remove = document.createElement("button");
    remove.type = "button"; remove.textContent = "Remove";
    remove.setAttribute("aria-label", `Remove group ${g.label}`);
    remove.addEventListener("click", () => { state.groups.splice(i, 1); renderGroups(); fillVariables(); });
    li.appendChild(remove);
    list.appendChild(li);
  });
}

function search() {
  const q = $("var-search").value.trim().toLowerCase();
  const list = $("var-results");
  list.replaceChildren();
  if (!q) return;
  for (const v of state.meta.variables) {
    const cats = v.categories.filter((c) => String(c.label).toLowerCase().includes(q) || String(c.code).toLowerCase() === q);
    if (!(v.name.toLowerCase().includes(q) || v.label.toLowerCase().includes(q) || cats.length)) continue;
    const li = document.createElement("li");
    li.appendChild(document.createTextNode(`${v.label} (${v.name})` + (cats.length ? ` — ${cats.slice(0, 3).map((c) => c.label).join(", ")}` : "") + " "));
    for (const [target, text] of [["rows", "Rows"], ["cols", "Columns"], ["layers", "Layers"]]) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = text;
      b.setAttribute("aria-label", `Use ${v.label} as ${text.toLowerCase()}`);
      b.addEventListener("click", () => { $(target).value = v.name; $(target).focus(); });
      li.appendChild(b);
    }
    list.appendChild(li);
  }
  if (!list.children.length) { const li = document.createElement("li"); li.textContent = "No variable matches."; list.appendChild(li); }
}

function fillCategories() {
  const v = varInfo($("uvar").value);
  const select = $("ucats");
  select.replaceChildren();
  if (!v) return;
  for (const c of v.categories) select.appendChild(option(String(c.code), c.label));
}

function renderConditions() {
  const list = $("conditions");
  list.replaceChildren();
  for (const [name, codes] of Object.entries(state.conditions)) {
    const li = document.createElement("li");
    const v = varInfo(name);
    const labels = codes.map((c) => (v.categories.find((k) => String(k.code) === String(c)) || {}).label || c);
    li.textContent = `${v.label} in {${labels.join(", ")}} `;
    const remove = document.createElement("button");
    remove.type = "button"; remove.textContent = "Remove";
    remove.setAttribute("aria-label", `Remove condition on ${v.label}`);
    remove.addEventListener("click", () => { delete state.conditions[name]; renderConditions(); });
    li.appendChild(remove);
    list.appendChild(li);
  }
}

// Hierarchies: levels of one classification, broadest first, and the tree of their categories.
function renderHierarchies() {
  const box = $("hierarchies");
  box.replaceChildren();
  const list = state.meta.hierarchies || [];
  $("hierarchies-box").hidden = !list.length;
  for (const h of list) {
    const div = document.createElement("div");
    div.className = "hierarchy";
    const p = document.createElement("p");
    p.textContent = `${h.label}, levels from broadest to finest: `;
    h.levels.forEach((level, i) => {
      const b = document.createElement("button");
      b.type = "button"; b.className = "level"; b.dataset.level = level;
      b.textContent = varInfo(level).label;
      b.setAttribute("aria-label", `Use ${varInfo(level).label} (level ${i + 1} of ${h.levels.length} of ${h.label}) as rows`);
      b.addEventListener("click", () => { $("rows").value = level; $("rows").focus(); });
      p.appendChild(b);
    });
    div.appendChild(p);
    const details = document.createElement("details");
    details.dataset.hierarchy = h.name;
    const summary = document.createElement("summary");
    summary.textContent = `Tree of ${h.label}`;
    details.append(summary, treeList(h.tree));
    div.appendChild(details);
    box.appendChild(div);
  }
}

function treeList(nodes) {
  const ul = document.createElement("ul");
  ul.className = "tree";
  for (const n of nodes) {
    const li = document.createElement("li");
    const filter = document.createElement("button");
    filter.type = "button"; filter.className = "filter"; filter.textContent = "Filter";
    filter.dataset.level = n.level; filter.dataset.code = String(n.code);
    filter.setAttribute("aria-label", `Restrict the universe to ${n.label} (${varInfo(n.level).label})`);
    filter.addEventListener("click", () => addCondition(n.level, [String(n.code)]));
    li.append(filter, document.createTextNode(" "));
    if (n.children.length) {
      const d = document.createElement("details");
      const sm = document.createElement("summary");
      sm.textContent = `${n.label} (${n.children.length})`;
      d.append(sm, treeList(n.children));
      li.appendChild(d);
    } else {
      li.appendChild(document.createTextNode(n.label));
    }
    ul.appendChild(li);
  }
  return ul;
}

function addCondition(name, codes) {
  const had = state.conditions[name] || [];
  state.conditions[name] = [...had, ...codes.filter((c) => !had.includes(c))];
  $("message").textContent = "";
  renderConditions();
}

async function loadDataset() {
  const name = $("dataset").value;
  state.meta = await (await api(`/api/datasets/${encodeURIComponent(name)}`)).json();
  state.conditions = {}; state.groups = [];
  const weighted = state.meta.weighted;
  for (const r of document.querySelectorAll('input[name="statistic"]')) {
    r.disabled = !weighted && r.value !== "count";
    if (!weighted) r.checked = r.value === "count";
  }
  fillVariables();
  fillMagnitudes();
  renderConditions();
  renderGroups();
  renderHierarchies();
}

// Continuous variables (sum:/mean:), listed by the dataset description.
function fillMagnitudes() {
  const mags = state.meta.magnitudes || [];
  $("magnitude-box").hidden = !mags.length;
  const sel = $("magvar");
  sel.replaceChildren(new Option("(none)", ""));
  for (const m of mags) sel.appendChild(new Option(m.unit ? `${m.label} (${m.unit})` : m.label, m.name));
}

function magnitudeInfo(name) {
  return (state.meta.magnitudes || []).find((m) => m.name === name);
}

function requestBody() {
  const dims = [$("rows").value, $("cols").value, $("layers").value].filter((x) => x);
  const statistic = document.querySelector('input[name="statistic"]:checked').value;
  const universe = {};
  for (const [name, codes] of Object.entries(state.conditions)) {
    const v = varInfo(name);
    const numeric = v.categories.length && typeof v.categories[0].code === "number";
    universe[name] = codes.map((c) => (numeric ? Number(c) : c));
  }
  const body = { dimensions: dims, universe, statistic, margins: "all" };
  const mag = $("magvar").value;
  const magStats = [...document.querySelectorAll('input[name="magstat"]:checked')].map((c) => c.value);
  if (mag && magStats.length) body.magnitudes = magStats.map((s) => `${s}:${mag}`);
  const used = customGroupings().filter((g) => dims.includes(g.name) || g.name in universe);
  if (used.length) body.groupings = used;
  return body;
}

function labelOf(dim, code) {
  if (code === "_T") return "Total";
  const v = varInfo(dim);
  const c = v.categories.find((k) => String(k.code) === String(code));
  return c ? c.label : String(code);
}

function fmt(value, stat) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  if (stat.startsWith("mean_")) return value.toLocaleString(undefined, { maximumFractionDigits: 2 });
  return stat === "weighted" || stat.startsWith("sum_") ? Math.round(value).toLocaleString() : value.toLocaleString();
}

// A statistic's caption: counts, or "Sum of Annual income (currency units)".
function statTitle(stat) {
  if (stat === "n") return "Unweighted counts";
  if (stat === "weighted") return "Weighted counts";
  const [kind, ...rest] = stat.split("_");
  const m = magnitudeInfo(rest.join("_"));
  const label = m ? m.label + (m.unit ? ` (${m.unit})` : "") : rest.join("_");
  return `${kind === "sum" ? "Sum" : "Mean"} of ${label}`;
}

function renderTable(doc) {
  const section = $("result");
  section.replaceChildren();
  const dims = doc.meta.dimensions;
  const magCols = (doc.meta.magnitudes ? doc.meta.magnitudes.variables : []).flatMap((v) => [`sum_${v}`, `mean_${v}`]);
  const stats = ["n", "weighted", ...magCols].filter((s) => doc.cells.length && s in doc.cells[0]);
  const rowsDim = dims[0], colsDim = dims[1], layerDim = dims[2];
  const order = (dim) => [...varInfo(dim).categories.map((c) => String(c.code)), "_T"];
  const layers = layerDim ? order(layerDim) : [null];
  for (const stat of stats) {
    for (const layer of layers) {
      const cells = doc.cells.filter((c) => !layerDim || String(c[layerDim]) === layer);
      const rowCodes = order(rowsDim).filter((r) => cells.some((c) => String(c[rowsDim]) === r));
      const colCodes = colsDim ? order(colsDim).filter((r) => cells.some((c) => String(c[colsDim]) === r)) : [null];
      const table = document.createElement("table");
      table.className = "cross";
      const caption = document.createElement("caption");
      caption.textContent = statTitle(stat) +
        (layerDim ? ` — ${labelOf(layerDim, layer)}` : "");
      table.appendChild(caption);
      const head = document.createElement("tr");
      const corner = document.createElement("th");
      corner.scope = "col";
      corner.textContent = colsDim ? `${labelOf(rowsDim, "_x")}` : "";
      corner.textContent = varInfo(rowsDim).label;
      head.appendChild(corner);
      for (const cc of colCodes) {
        const th = document.createElement("th"); th.scope = "col";
        th.textContent = colsDim ? labelOf(colsDim, cc) : (stat === "n" ? "Count" : stat === "weighted" ? "Weighted" : statTitle(stat).split(" ")[0]);
        head.appendChild(th);
      }
      table.appendChild(head);
      for (const rc of rowCodes) {
        const tr = document.createElement("tr");
        if (rc === "_T") tr.className = "total";
        const th = document.createElement("th"); th.scope = "row"; th.textContent = labelOf(rowsDim, rc);
        tr.appendChild(th);
        for (const cc of colCodes) {
          const cell = cells.find((c) => String(c[rowsDim]) === rc && (!colsDim || String(c[colsDim]) === cc));
          const td = document.createElement("td");
          if (cc === "_T") td.className = "total";
          td.textContent = cell ? fmt(cell[stat], stat) : "";
          const magFlag = stat.includes("_") ? `sensitive_${stat.split("_").slice(1).join("_")}` : null;
          for (const flag of ["structural_zero", "suppressed", ...(magFlag ? [magFlag] : [])]) {
            if (cell && cell[flag]) {
              const sup = document.createElement("sup");
              sup.className = "flag"; sup.textContent = FLAG_SYMBOL[flag] || "s";
              sup.title = (doc.meta.footnotes && doc.meta.footnotes.flags[flag]) ||
                (flag.startsWith("sensitive_") ? "sensitive: the site's dominance or p% rule flags this sum (a few contributors make most of it)" : flag);
              td.appendChild(document.createTextNode(" ")); td.appendChild(sup);
            }
          }
          tr.appendChild(td);
        }
        table.appendChild(tr);
      }
      section.appendChild(table);
    }
  }
  section.appendChild(renderFootnotes(doc.meta));
}

// The table's footnotes: the statement of its protection, the flag legend, the citation.
function renderFootnotes(meta) {
  const notes = meta.footnotes || { statement: [], flags: {}, citation: null };
  const box = document.createElement("section");
  box.id = "footnotes"; box.className = "footnote";
  box.setAttribute("aria-labelledby", "footnotes-title");
  const h = document.createElement("h2"); h.id = "footnotes-title"; h.textContent = "About this table";
  box.appendChild(h);
  const list = document.createElement("ul");
  const lines = [...notes.statement];
  if (meta.magnitudes && meta.magnitudes.statement && !lines.includes(meta.magnitudes.statement)) lines.push(meta.magnitudes.statement);
  for (const line of lines) { const li = document.createElement("li"); li.textContent = line; list.appendChild(li); }
  box.appendChild(list);
  const legend = document.createElement("dl");
  legend.className = "legend";
  for (const [column, meaning] of Object.entries(notes.flags)) {
    const dt = document.createElement("dt"); dt.textContent = FLAG_SYMBOL[column] || column;
    const dd = document.createElement("dd"); dd.textContent = meaning;
    legend.append(dt, dd);
  }
  box.appendChild(legend);
  const m = meta.mechanism;
  const params = Object.entries(m).filter(([k]) => k !== "name" && k !== "paper").map(([k, v]) => `${k} = ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
  const tech = document.createElement("p");
  tech.className = "technical";
  tech.textContent = `Technical: ${m.name}${params ? " (" + params + ")" : ""}; additivity: ${meta.additivity}.`;
  box.appendChild(tech);
  return box;
}

// Long requests: a progress line (time waited, then data received) and a Cancel button
// that aborts the request (AbortController); the server stops sending to a closed connection.
function showProgress(text) {
  $("progress-box").hidden = text === null;
  $("progress-text").textContent = text || "";
}

async function readWithProgress(response, started) {
  if (!response.body || !response.body.getReader) return response.text();
  const reader = response.body.getReader();
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value); received += value.length;
    showProgress(`Receiving the table: ${(received / 1024).toFixed(0)} kB after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  return new TextDecoder().decode(await new Blob(chunks).arrayBuffer());
}

async function build(event) {
  if (event) event.preventDefault();
  $("message").textContent = "";
  const body = requestBody();
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  state.controller = controller;
  const started = Date.now();
  const tick = setInterval(() => {
    if ($("progress-text").textContent.startsWith("Receiving")) return;
    showProgress(`Building the table: ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }, 500);
  showProgress("Building the table: 0 s");
  $("cancel").disabled = false;
  $("build").setAttribute("aria-busy", "true");
  try {
    const name = $("dataset").value;
    const response = await api(`/api/datasets/${encodeURIComponent(name)}/tables`, { method: "POST", body: JSON.stringify(body), signal: controller.signal });
    const doc = JSON.parse(await readWithProgress(response, started));
    state.last = body; state.doc = doc;
    renderTable(doc);
    drawChart(doc);
    for (const id of ["download-csv", "download-xlsx", "download-svg", "download-png"]) $(id).disabled = false;
    saveToUrl(name, body);
  } catch (e) {
    $("message").textContent = e.name === "AbortError" ? "Cancelled: the table was not built. Change the request or build it again." : e.message;
  } finally {
    clearInterval(tick);
    if (state.controller === controller) {
      state.controller = null;
      $("cancel").disabled = true;
      $("build").removeAttribute("aria-busy");
      showProgress(null);
    }
  }
}

// The page state lives in the URL (never the API key): reopening it rebuilds the same table.
function saveToUrl(name, body) {
  const params = new URLSearchParams();
  params.set("dataset", name);
  params.set("table", JSON.stringify({ ...body, groups: state.groups }));
  history.replaceState(null, "", `${location.pathname}?${params}`);
  $("share").href = `${location.origin}${location.pathname}?${params}`;
  $("share-line").hidden = false;
}

async function restoreFromUrl() {
  const params = new URLSearchParams(location.search);
  const raw = params.get("table");
  if (!raw) return;
  let t;
  try { t = JSON.parse(raw); } catch (e) { $("message").textContent = "The table link is damaged; build the table again."; return; }
  if (params.get("dataset") && params.get("dataset") !== $("dataset").value) { $("dataset").value = params.get("dataset"); await loadDataset(); }
  state.groups = Array.isArray(t.groups) ? t.groups : [];
  fillVariables(); renderGroups();
  const dims = t.dimensions || [];
  $("rows").value = dims[0] || ""; $("cols").value = dims[1] || ""; $("layers").value = dims[2] || "";
  state.conditions = {};
  for (const [k, v] of Object.entries(t.universe || {})) state.conditions[k] = v.map(String);
  renderConditions();
  const radio = document.querySelector(`input[name="statistic"][value="${t.statistic}"]`);
  if (radio) radio.checked = true;
  const mags = Array.isArray(t.magnitudes) ? t.magnitudes.map((m) => String(m).split(":")) : [];
  $("magvar").value = mags.length && magnitudeInfo(mags[0][1]) ? mags[0][1] : "";
  for (const c of document.querySelectorAll('input[name="magstat"]')) c.checked = mags.some((m) => m[0] === c.value);
  await build();
}

// Charts are drawn from the protected values of the table shown, never from anything else.
const SVGNS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawChart(doc) {
  const dims = doc.meta.dimensions;
  const stat = doc.cells.length && "weighted" in doc.cells[0] ? "weighted" : "n";
  const num = (c) => (c && typeof c[stat] === "number" ? c[stat] : 0);
  const rowsDim = dims[0], colsDim = dims[1];
  const inner = doc.cells.filter((c) => dims.every((d, i) => (i < 2 ? String(c[d]) !== "_T" : String(c[d]) === "_T")));
  const rows = varInfo(rowsDim).categories.map((c) => String(c.code)).filter((r) => inner.some((c) => String(c[rowsDim]) === r));
  const series = colsDim ? varInfo(colsDim).categories.map((c) => String(c.code)).filter((r) => inner.some((c) => String(c[colsDim]) === r)) : [null];
  const find = (r, s) => inner.find((c) => String(c[rowsDim]) === r && (s === null || String(c[colsDim]) === s));
  const isAge = (d) => /^AGE/i.test(varInfo(d).name) || /^age/i.test(varInfo(d).label);
  const isSex = (d) => d && /^SEX$/i.test(d) && series.length === 2;
  const pyramid = colsDim && isAge(rowsDim) && isSex(colsDim);
  const W = 720, rowH = 18, top = 30, left = 170, H = top + rows.length * (pyramid ? rowH : rowH * Math.max(1, series.length) + 4) + 40;
  const svg = el("svg", { xmlns: SVGNS, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
  const what = stat === "n" ? "unweighted counts" : "weighted counts";
  const title = pyramid ? `Population pyramid: ${varInfo(rowsDim).label} by ${varInfo(colsDim).label} (protected ${what})`
    : `${varInfo(rowsDim).label}${colsDim ? " by " + varInfo(colsDim).label : ""} (protected ${what})`;
  svg.appendChild(el("title", {}, title));
  svg.appendChild(el("rect", { x: 0, y: 0, width: W, height: H, fill: "#ffffff" }));
  svg.appendChild(el("text", { x: 8, y: 18, "font-weight": "600" }, title));
  const colors = ["#1f5f99", "#c4541a", "#3a8a3a", "#7b4ea3", "#a0761c", "#2a8a8a", "#9c2f5a", "#555555"];
  const max = Math.max(1, ...rows.flatMap((r) => series.map((sv) => num(find(r, sv)))));
  if (pyramid) {
    const mid = left + (W - left - 20) / 2, half = (W - left - 30) / 2;
    // Oldest at the top, as population pyramids are drawn.
    [...rows].reverse().forEach((r, i) => {
      const y = top + i * rowH;
      svg.appendChild(el("text", { x: left - 6, y: y + 12, "text-anchor": "end" }, labelOf(rowsDim, r)));
      series.forEach((sv, k) => {
        const w = (num(find(r, sv)) / max) * half;
        svg.appendChild(el("rect", { x: k === 0 ? mid - w : mid, y, width: w, height: rowH - 3, fill: colors[k] }));
      });
    });
    series.forEach((sv, k) => svg.appendChild(el("text", { x: k === 0 ? left : W - 20, y: H - 12, "text-anchor": k === 0 ? "start" : "end", fill: colors[k] }, labelOf(colsDim, sv))));
  } else {
    let y = top;
    for (const r of rows) {
      svg.appendChild(el("text", { x: left - 6, y: y + 12, "text-anchor": "end" }, labelOf(rowsDim, r)));
      series.forEach((sv, k) => {
        const v = num(find(r, sv));
        svg.appendChild(el("rect", { x: left, y, width: (v / max) * (W - left - 90), height: rowH - 3, fill: colors[k % colors.length] }));
        svg.appendChild(el("text", { x: left + (v / max) * (W - left - 90) + 4, y: y + 12 }, fmt(find(r, sv) ? find(r, sv)[stat] : null, stat)));
        y += rowH;
      });
      y += 4;
    }
    if (colsDim) series.forEach((sv, k) => svg.appendChild(el("text", { x: left + k * 110, y: H - 12, fill: colors[k % colors.length] }, labelOf(colsDim, sv))));
  }
  $("chart").replaceChildren(svg);
  svg.setAttribute("aria-label", title);
  $("chart-caption").textContent = `${title}. Drawn from the protected values in the table above; suppressed cells are drawn as zero.`;
  $("chart-box").hidden = false;
}

function chartSvgText() {
  return new XMLSerializer().serializeToString($("chart").querySelector("svg"));
}

function save(blob, filename) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob); a.download = filename;
  document.body.appendChild(a); a.click(); a.remove();
}

async function exportChart(format) {
  const name = `${$("dataset").value}-chart.${format}`;
  const text = chartSvgText();
  if (format === "svg") { save(new Blob([text], { type: "image/svg+xml" }), name); return; }
  const svg = $("chart").querySelector("svg");
  const img = new Image();
  img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(text);
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = Number(svg.getAttribute("width")) * 2; canvas.height = Number(svg.getAttribute("height")) * 2;
  const ctx = canvas.getContext("2d"); ctx.scale(2, 2); ctx.drawImage(img, 0, 0);
  canvas.toBlob((blob) => save(blob, name), "image/png");
}

async function download(format) {
  if (!state.last) return;
  $("message").textContent = "";
  try {
    const name = $("dataset").value;
    const response = await api(`/api/datasets/${encodeURIComponent(name)}/tables?format=${format}`, { method: "POST", body: JSON.stringify(state.last) });
    const blob = await response.blob();
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = `${name}-table.${format}`;
    document.body.appendChild(a); a.click(); a.remove();
  } catch (e) {
    $("message").textContent = e.message;
  }
}

async function start() {
  try {
    const list = await (await api("/api/datasets")).json();
    state.datasets = list.datasets;
    for (const d of list.datasets) $("dataset").appendChild(option(d.name, d.title));
    await loadDataset();
  } catch (e) {
    $("message").textContent = e.message;
  }
  $("dataset").addEventListener("change", loadDataset);
  $("uvar").addEventListener("change", fillCategories);
  $("add-condition").addEventListener("click", () => {
    const codes = [...$("ucats").selectedOptions].map((o) => o.value);
    if (!codes.length) { $("message").textContent = "Select at least one category for the condition."; return; }
    $("message").textContent = "";
    state.conditions[$("uvar").value] = codes;
    renderConditions();
  });
  $("builder").addEventListener("submit", build);
  $("cancel").addEventListener("click", () => { if (state.controller) state.controller.abort(); });
  $("var-search").addEventListener("input", search);
  $("gvar").addEventListener("change", fillGroupCategories);
  $("add-group").addEventListener("click", () => {
    const members = [...$("gcats").selectedOptions].map((o) => o.value);
    const label = $("glabel").value.trim();
    if (!members.length || !label) { $("message").textContent = "Select categories and give the group a name."; return; }
    const v = varInfo($("gvar").value);
    const numeric = v.categories.length && typeof v.categories[0].code === "number";
    $("message").textContent = "";
    state.groups.push({ variable: v.name, label, members: members.map((c) => (numeric ? Number(c) : c)) });
    $("glabel").value = "";
    renderGroups(); fillVariables();
  });
  $("download-svg").addEventListener("click", () => exportChart("svg"));
  $("download-png").addEventListener("click", () => exportChart("png"));
  await restoreFromUrl();
  $("download-csv").addEventListener("click", () => download("csv"));
  $("download-xlsx").addEventListener("click", () => download("xlsx"));
}

start();
