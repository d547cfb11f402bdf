// tablesafe table builder: plain JavaScript, no build step, no network beyond this server.
"use strict";

const state = { datasets: [], meta: null, conditions: {}, last: null };
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

function option(value, text) {
  const o = document.createElement("option");
  o.value = value; o.textContent = text; return o;
}

function fillVariables() {
  const vars = state.meta.variables;
  for (const [id, optional] of [["rows", false], ["cols", true], ["layers", true], ["uvar", false]]) {
    const select = $(id);
    select.replaceChildren();
    if (optional) select.appendChild(option("", "(none)"));
    for (const v of vars) select.appendChild(option(v.name, `${v.label} (${v.name})`));
  }
  if (vars.length > 1) $("cols").value = vars[1].name;
  fillCategories();
}

function fillCategories() {
  const v = state.meta.variables.find((x) => x.name === $("uvar").value);
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
    const v = state.meta.variables.find((x) => x.name === name);
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

async function loadDataset() {
  const name = $("dataset").value;
  state.meta = await (await api(`/api/datasets/${encodeURIComponent(name)}`)).json();
  state.conditions = {};
  const weighted = state.meta.weighted;
  for (const r of document.querySelectorAll('input[name="statistic"]')) {
    r.disabled = !weighted && r.value !== "count";
    if (!weighted) r.checked = r.value === "count";
  }
  fillVariables();
  renderConditions();
}

function requestBody() {
  const dims = [$("rows").value, $("cols").value, $("layers").value].filter((x) => x);
  const statistic = document.querySelector('input[name="statistic"]:checked').value;
  const universe = {};
  for (const [name, codes] of Object.entries(state.conditions)) {
    const v = state.meta.variables.find((x) => x.name === name);
    const numeric = v.categories.length && typeof v.categories[0].code === "number";
    universe[name] = codes.map((c) => (numeric ? Number(c) : c));
  }
  return { dimensions: dims, universe, statistic, margins: "all" };
}

function labelOf(dim, code) {
  if (code === "_T") return "Total";
  const v = state.meta.variables.find((x) => x.name === dim);
  const c = v.categories.find((k) => String(k.code) === String(code));
  return c ? c.label : String(code);
}

function fmt(value, stat) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  return stat === "weighted" ? Math.round(value).toLocaleString() : value.toLocaleString();
}

function renderTable(doc) {
  const section = $("result");
  section.replaceChildren();
  const dims = doc.meta.dimensions;
  const stats = ["n", "weighted"].filter((s) => doc.cells.length && s in doc.cells[0]);
  const rowsDim = dims[0], colsDim = dims[1], layerDim = dims[2];
  const order = (dim) => [...state.meta.variables.find((x) => x.name === dim).categories.map((c) => String(c.code)), "_T"];
  const layers = layerDim ? order(layerDim) : [null];
  for (const stat of stats) {
    for (const layer of layers) {
      const cells = doc.cells.filter((c) => !layerDim || String(c[layerDim]) === layer);
      const rowCodes = order(rowsDim).filter((r) => cells.some((c) => String(c[rowsDim]) === r));
      const colCodes = colsDim ? order(colsDim).filter((r) => cells.some((c) => String(c[colsDim]) === r)) : [null];
      const table = document.createElement("table");
      table.className = "cross";
      const caption = document.createElement("caption");
      caption.textContent = (stat === "n" ? "Unweighted counts" : "Weighted counts") +
        (layerDim ? ` — ${labelOf(layerDim, layer)}` : "");
      table.appendChild(caption);
      const head = document.createElement("tr");
      const corner = document.createElement("th");
      corner.scope = "col";
      corner.textContent = colsDim ? `${labelOf(rowsDim, "_x")}` : "";
      corner.textContent = state.meta.variables.find((x) => x.name === rowsDim).label;
      head.appendChild(corner);
      for (const cc of colCodes) {
        const th = document.createElement("th"); th.scope = "col";
        th.textContent = colsDim ? labelOf(colsDim, cc) : (stat === "n" ? "Count" : "Weighted");
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
          for (const flag of ["structural_zero", "suppressed"]) {
            if (cell && cell[flag]) {
              const sup = document.createElement("sup");
              sup.className = "flag"; sup.textContent = FLAG_SYMBOL[flag];
              sup.title = (doc.meta.footnotes && doc.meta.footnotes.flags[flag]) || flag;
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
  for (const line of notes.statement) { const li = document.createElement("li"); li.textContent = line; list.appendChild(li); }
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

async function build(event) {
  event.preventDefault();
  $("message").textContent = "";
  const body = requestBody();
  try {
    const name = $("dataset").value;
    const doc = await (await api(`/api/datasets/${encodeURIComponent(name)}/tables`, { method: "POST", body: JSON.stringify(body) })).json();
    state.last = body;
    renderTable(doc);
    $("download-csv").disabled = false;
    $("download-xlsx").disabled = false;
  } catch (e) {
    $("message").textContent = e.message;
  }
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
  $("download-csv").addEventListener("click", () => download("csv"));
  $("download-xlsx").addEventListener("click", () => download("xlsx"));
}

start();
