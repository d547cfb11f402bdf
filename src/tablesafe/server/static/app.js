// tablesafe table builder: plain JavaScript, no build step, no network beyond this server.
"use strict";

const state = {
  datasets: [], meta: null, conditions: {}, groups: [],
  last: null, doc: null, index: null, layer: null, stat: null, controller: null, job: null,
  checkController: null, checkTimer: null,
};
const $ = (id) => document.getElementById(id);
// The marks of flagged cells, each explained in the legend by the footnotes' flag (docs/formats.md):
// a withheld figure shows "c" in place of its value, a total of the published cells only "t".
const FLAG_SYMBOL = { structural_zero: "z", suppressed: "x", np: "np", withheld: "c", excludes_withheld: "t" };
const DIMENSIONS = ["rows", "cols", "layers"];
const PLACE = { rows: "rows", cols: "columns", layers: "layers" };
const KEY_STORE = "tablesafe-key";
const SITE_TITLE = document.title;

// The API key lives in this tab's sessionStorage only. A ?key= in the address (an older
// kind of link) is moved there and taken out of the address before anything else runs,
// so no link, bookmark or history entry the page makes holds it.
(function keepKeyOutOfTheAddress() {
  localStorage.removeItem(KEY_STORE); // where an older version of the page kept it
  const params = new URLSearchParams(location.search);
  if (!params.has("key")) return;
  if (params.get("key")) sessionStorage.setItem(KEY_STORE, params.get("key"));
  params.delete("key");
  const rest = params.toString();
  history.replaceState(null, "", `${location.pathname}${rest ? "?" + rest : ""}${location.hash}`);
})();
const keysRequired = () => document.body.dataset.keys === "required";
const apiKey = () => sessionStorage.getItem(KEY_STORE);

async function api(path, options = {}) {
  const headers = Object.assign({ "content-type": "application/json" }, options.headers || {});
  const key = apiKey();
  if (key) headers["x-api-key"] = key;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = `request failed (${response.status})`, type = null, alternatives = [];
    try {
      const body = await response.json();
      ({ message, type } = body.error);
      alternatives = body.alternatives || [];
    } catch (e) { /* keep the default */ }
    if (response.status === 401) message = keyMessage(message);
    const error = new Error(message);
    error.status = response.status;
    error.type = type;
    error.alternatives = alternatives; // a refusal's nearest tables that pass
    throw error;
  }
  return response;
}

// The server's 401 texts are written for API clients (which header to send); the page has a field.
function keyMessage(serverText) {
  const text = apiKey()
    ? `The site did not accept the API key in use (${serverText}): enter another one under "API key".`
    : 'This site needs an API key: enter it under "API key" at the top of the page.';
  showKeyForm(true);
  $("key-status").textContent = text;
  return text;
}

function showKeyForm(focus) {
  $("key-form").hidden = false;
  $("key-status").textContent = apiKey() ? "A key is in use in this tab." : "No key entered yet.";
  if (focus) $("api-key").focus();
}

async function useKey(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) { $("key-status").textContent = "Enter a key first."; return; }
  sessionStorage.setItem(KEY_STORE, key);
  $("api-key").value = "";
  showKeyForm(false);
  document.dispatchEvent(new Event("tablesafe-key"));
  await loadSite();
}

function forgetKey() {
  sessionStorage.removeItem(KEY_STORE);
  clearResult();
  showKeyForm(true);
  document.dispatchEvent(new Event("tablesafe-key"));
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

function allVariables() {
  return [...state.meta.variables, ...customGroupings().map((g) => varInfo(g.name))];
}

// The microdata variable a variable classifies: a grouping (a hierarchy's upper level, a
// custom grouping) classifies its source's. A table may not classify one variable twice.
function rootOf(name) {
  const v = state.meta.variables.find((x) => x.name === name);
  if (v) return v.grouping_of && v.grouping_of !== name ? rootOf(v.grouping_of) : v.name;
  const g = customGroupings().find((x) => x.name === name);
  return g ? rootOf(g.variable) : name;
}

function option(value, text) {
  const o = document.createElement("option");
  o.value = value; o.textContent = text; return o;
}

function fillVariables() {
  const vars = allVariables();
  for (const [id, optional] of [["rows", false], ["cols", true], ["layers", true], ["uvar", false], ["gvar", false]]) {
    const select = $(id);
    const keep = select.value;
    const list = id === "gvar" ? state.meta.variables : vars;
    select.replaceChildren();
    if (optional) select.appendChild(option("", "(none)"));
    for (const v of list) select.appendChild(option(v.name, `${v.label} (${v.name})`));
    if (keep && list.some((v) => v.name === keep)) select.value = keep;
  }
  fillCategories();
  fillGroupCategories();
}

// A fresh dataset's table: its first variable as rows and, as columns, the first variable
// that classifies another microdata variable (never a grouping of the rows'), no layers.
function defaultDimensions() {
  const vars = state.meta.variables;
  if (!vars.length) return;
  $("rows").value = vars[0].name;
  const other = vars.find((v) => rootOf(v.name) !== rootOf(vars[0].name));
  $("cols").value = other ? other.name : "";
  $("layers").value = "";
  $("dims-status").textContent = "";
}

// Put a variable in one place of the table. Another place that holds a variable of the same
// microdata variable would make the table refused, so that place takes the chosen place's
// previous variable when it fits, or else the first variable that fits (rows) or nothing.
function useAs(place, name) {
  const before = $(place).value;
  $(place).value = name;
  const notes = [`${varInfo(name).label} is now the ${PLACE[place]}.`];
  for (const other of DIMENSIONS) {
    const held = $(other).value;
    if (other === place || !held || rootOf(held) !== rootOf(name)) continue;
    const used = DIMENSIONS.filter((p) => p !== other && $(p).value).map((p) => rootOf($(p).value));
    const fits = (v) => Boolean(v) && !used.includes(rootOf(v));
    const first = allVariables().find((v) => fits(v.name));
    const next = fits(before) ? before : other === "rows" && first ? first.name : "";
    $(other).value = next;
    const was = `${PLACE[other][0].toUpperCase()}${PLACE[other].slice(1)} changed from ${varInfo(held).label} to`;
    notes.push(`${was} ${next ? varInfo(next).label : "(none)"}: a table cannot classify ${varInfo(rootOf(name)).label} twice.`);
  }
  $("dims-status").textContent = notes.join(" ");
  scheduleCheck();
}

// A level of a classification replaces the level of the same classification already in
// the table, wherever it is; otherwise it becomes the rows.
function useLevel(level) {
  const place = DIMENSIONS.find((p) => $(p).value && rootOf($(p).value) === rootOf(level)) || "rows";
  useAs(place, level);
  $(place).focus();
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
    remove.addEventListener("click", () => {
      state.groups.splice(i, 1);
      groupsChanged(g.variable);
    });
    li.appendChild(remove);
    list.appendChild(li);
  });
  scheduleCheck();
}

// A grouping's codes (g1, g2, other) change meaning when its groups change: a condition
// on it is dropped rather than kept with codes that now mean other records.
function groupsChanged(variable) {
  delete state.conditions[`${variable}_C`];
  renderGroups(); fillVariables(); renderConditions();
}

function addGroup() {
  const members = [...$("gcats").selectedOptions].map((o) => o.value);
  const label = $("glabel").value.trim();
  if (!members.length || !label) { $("message").textContent = "Select categories and give the group a name."; return; }
  const v = varInfo($("gvar").value);
  const numeric = v.categories.length && typeof v.categories[0].code === "number";
  $("message").textContent = "";
  state.groups.push({ variable: v.name, label, members: members.map((c) => (numeric ? Number(c) : c)) });
  $("glabel").value = "";
  groupsChanged(v.name);
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
      b.addEventListener("click", () => { useAs(target, v.name); $(target).focus(); });
      li.appendChild(b);
    }
    list.appendChild(li);
  }
  if (!list.children.length) { const li = document.createElement("li"); li.textContent = "No variable matches."; list.appendChild(li); }
}

// The universe editor: ticking a category is the condition; there is no other state.
function fillCategories() {
  const name = $("uvar").value;
  const v = varInfo(name);
  $("ucats-legend").textContent = `Categories of ${v.label}`;
  const chosen = state.conditions[name] || [];
  $("ucats-list").replaceChildren(...v.categories.map((c) => {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox"; box.value = String(c.code); box.checked = chosen.includes(String(c.code));
    box.addEventListener("change", () => setCondition(name));
    label.append(box, ` ${c.label}`);
    return label;
  }));
}

function setCondition(name) {
  const codes = [...$("ucats-list").querySelectorAll("input:checked")].map((b) => b.value);
  if (codes.length) state.conditions[name] = codes; else delete state.conditions[name];
  $("message").textContent = "";
  renderConditions();
}

function addCondition(name, codes) {
  const had = state.conditions[name] || [];
  state.conditions[name] = [...had, ...codes.filter((c) => !had.includes(c))];
  $("message").textContent = "";
  renderConditions();
}

function orList(items) {
  return items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} or ${items[items.length - 1]}`;
}

// A category label that could be misread in a list ("Divorced, widowed", "Married or in a
// civil partnership") in double quotes, as output/_describe.quoted_label writes it.
// Words end at any letter or digit, as Python's \b sees them (JavaScript's \b is ASCII only).
const MISREAD = /[,;"]|(?<![\p{L}\p{N}_])(?:or|and)(?![\p{L}\p{N}_])|^\s|\s$|^$/iu;
const quotedLabel = (label) => (MISREAD.test(label) ? `"${label.replace(/"/g, '""')}"` : label);

// The universe in the words of the table's own metadata (meta.universe_label, the same
// text as in every download): "Region is North or North East; Sex is Female".
function universeLabel(universe) {
  const parts = Object.entries(universe).map(([name, codes]) => `${varInfo(name).label} is ${orList(codes.map((c) => quotedLabel(labelOf(name, c))))}`);
  return parts.length ? parts.join("; ") : "All records";
}
const universeWords = (universe) => `Universe: ${universeLabel(universe)}.`;
const tableUniverse = (meta) => `Universe: ${meta.universe_label || universeLabel(meta.universe || {})}.`;

function renderConditions() {
  $("universe-words").textContent = universeWords(state.conditions);
  $("conditions").replaceChildren(...Object.keys(state.conditions).map((name) => {
    const li = document.createElement("li");
    const remove = document.createElement("button");
    remove.type = "button"; remove.textContent = `Remove the condition on ${varInfo(name).label}`;
    remove.addEventListener("click", () => { delete state.conditions[name]; renderConditions(); $("uvar").focus(); });
    li.appendChild(remove);
    return li;
  }));
  const shown = state.conditions[$("uvar").value] || [];
  for (const box of $("ucats-list").querySelectorAll("input")) box.checked = shown.includes(box.value);
  scheduleCheck();
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
      b.setAttribute("aria-label", `Use ${varInfo(level).label} (level ${i + 1} of ${h.levels.length} of ${h.label}) in the table`);
      b.addEventListener("click", () => useLevel(level));
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

async function loadDataset() {
  const name = $("dataset").value;
  clearResult();
  state.meta = await (await api(`/api/datasets/${encodeURIComponent(name)}`)).json();
  state.conditions = {}; state.groups = [];
  const weighted = state.meta.weighted;
  for (const r of document.querySelectorAll('input[name="statistic"]')) {
    r.disabled = !weighted && r.value !== "count";
    if (!weighted) r.checked = r.value === "count";
  }
  // Standard errors come from replicate weights, which go with survey weights.
  $("se").disabled = !weighted;
  if (!weighted) $("se").checked = false;
  fillVariables();
  defaultDimensions();
  fillMagnitudes();
  renderConditions();
  renderGroups();
  renderHierarchies();
  document.dispatchEvent(new Event("tablesafe-dataset"));
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
  const base = document.querySelector('input[name="statistic"]:checked').value;
  const percents = [...document.querySelectorAll('input[name="percent"]:checked')].map((c) => `percent:${c.value}`);
  const statistic = [base, ...percents].join(",");
  const universe = {};
  for (const [name, codes] of Object.entries(state.conditions)) {
    const v = varInfo(name);
    const numeric = v.categories.length && typeof v.categories[0].code === "number";
    universe[name] = codes.map((c) => (numeric ? Number(c) : c));
  }
  const body = { dimensions: dims, universe, statistic, margins: $("margins").value || "all" };
  const mag = $("magvar").value;
  const magStats = [...document.querySelectorAll('input[name="magstat"]:checked')].map((c) => c.value);
  // Quartiles are two quantiles; every other box is one item (sum:, mean:, median:).
  if (mag && magStats.length) {
    body.magnitudes = magStats.flatMap((s) => (s === "quartiles" ? [`quantile:${mag}:0.25`, `quantile:${mag}:0.75`] : [`${s}:${mag}`]));
  }
  if ($("se").checked) body.se = true;
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

// decimals: one number of decimals for every mean of a column (columnDecimals), so that
// 52,028.10 stands beside 18,790.66, not 52,028.1.
function fmt(value, stat, decimals) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  if (stat.startsWith("mean_")) {
    const d = decimals === undefined ? 2 : decimals;
    return value.toLocaleString(undefined, { minimumFractionDigits: d, maximumFractionDigits: d });
  }
  if (stat.startsWith("percent_")) return value.toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  // Quantiles have their own rounding (3 significant figures by default): as published.
  if (/^(median|p\d\d)_/.test(stat)) return value.toLocaleString(undefined, { maximumFractionDigits: 10 });
  const whole = stat === "weighted" || stat.startsWith("sum_");
  return whole ? Math.round(value).toLocaleString() : value.toLocaleString();
}

// The decimals a published (rounded) figure has: 2.82 has 2, 31400 none.
function decimalsOf(value) {
  const text = String(value);
  if (text.includes("e")) return Math.max(0, -Number(text.split("e")[1]));
  return text.includes(".") ? text.split(".")[1].length : 0;
}

// One number of decimals for a column of means (its estimate, standard error or interval):
// as many as its figure with most needs for 4 significant digits, no more than the
// published figures have (as the text format: tablesafe.output._render.column_decimals).
function columnDecimals(doc, stat) {
  if (!stat.startsWith("mean_")) return undefined;
  const values = doc.cells.map((c) => c[stat]).filter((v) => typeof v === "number" && v !== 0 && Number.isFinite(v));
  if (!values.length) return 0;
  const needed = Math.max(...values.map((v) => Math.max(0, 3 - Math.floor(Math.log10(Math.abs(v))))));
  return Math.min(needed, Math.max(...values.map(decimalsOf)));
}

// A statistic's caption: counts, or the table's own words for a sum or mean (meta.statistics,
// as in every download): "Weighted sum of Annual income (currency units)", "Mean of ...".
function statTitle(doc, stat) {
  if (stat === "n") return "Unweighted counts";
  if (stat === "weighted") return "Weighted counts";
  return (doc.meta.statistics && doc.meta.statistics[stat]) || stat;
}

// Sums and means are named sum_VAR / mean_VAR over the records, sum_VAR_weighted /
// mean_VAR_weighted over the survey weights, VAR a magnitude of the dataset; any other
// column (a standard error of a sum, say) is not a sum or mean.
function magnitudeOf(stat) {
  const m = /^(sum|mean)_(.+?)(_weighted)?$/.exec(stat);
  return m && (state.meta.magnitudes || []).some((x) => x.name === m[2]) ? m[2] : null;
}

// Every statistic of the table, in its order: counts, weighted counts and their standard
// errors and intervals, percentages, sums and means (meta.statistics names them all).
function statsOf(doc) {
  const named = Object.keys(doc.meta.statistics || {});
  return (named.length ? named : ["n", "weighted"]).filter((s) => doc.cells.length && s in doc.cells[0]);
}

// An estimate's standard error and interval: "se", "ci_low", "ci_high" of the weighted count,
// "<stat>_se", "<stat>_ci_low", "<stat>_ci_high" of any other estimate (a percentage, a mean).
const COMPANIONS = ["se", "ci_low", "ci_high"];
function companionsOf(doc, stat) {
  const all = statsOf(doc);
  const out = {};
  for (const k of COMPANIONS) {
    const name = stat === "weighted" ? k : `${stat}_${k}`;
    if (all.includes(name)) out[k] = name;
  }
  return out;
}

// The table's estimates: every statistic that is not another's standard error or interval.
function estimatesOf(doc) {
  const all = statsOf(doc);
  const companions = new Set(all.flatMap((s) => Object.values(companionsOf(doc, s))));
  return all.filter((s) => !companions.has(s));
}

// The estimate shown first: a percentage, sum, mean or quantile asked for (the figures a
// request adds to its counts), else the first count (unweighted before weighted).
function defaultEstimate(estimates) {
  return estimates.find((s) => s !== "n" && s !== "weighted") || estimates[0];
}

const tableTitle = (dims) => dims.map((d) => varInfo(d).label).join(" by ");
const categoryOrder = (dim) => [...varInfo(dim).categories.map((c) => String(c.code)), "_T"];
const cellKey = (codes) => codes.map(String).join("\u0001");

function cellIndex(doc) {
  const index = new Map();
  for (const c of doc.cells) index.set(cellKey(doc.meta.dimensions.map((d) => c[d])), c);
  return index;
}

// The result: its title, its universe in words, a layer picker for a 3-way table, one
// table per statistic (for the layer shown), and what was done to protect it.
function renderResult(doc) {
  const dims = doc.meta.dimensions;
  const title = document.createElement("h2");
  title.id = "table-title"; title.textContent = doc.meta.title || tableTitle(dims);
  const universe = document.createElement("p");
  universe.id = "universe-line"; universe.textContent = tableUniverse(doc.meta);
  const tables = document.createElement("div");
  tables.id = "tables";
  const estimates = estimatesOf(doc);
  if (!estimates.includes(state.stat)) state.stat = defaultEstimate(estimates);
  const pickers = [...(estimates.length > 1 ? [statPicker(doc, estimates)] : []), ...(dims[2] ? [layerPicker(doc)] : [])];
  $("result").replaceChildren(title, universe, ...pickers, tables, renderFootnotes(doc.meta));
  renderTables(doc);
}

// One table at a time, as ABS TableBuilder shows one: a list of the table's estimates
// (count, weighted count, percentages, sums, means, quantiles) picks which.
function statPicker(doc, estimates) {
  const box = document.createElement("div");
  box.className = "row stat-pick";
  const label = document.createElement("label");
  label.htmlFor = "stat-pick"; label.textContent = "Statistic shown";
  const select = document.createElement("select");
  select.id = "stat-pick";
  for (const s of estimates) select.appendChild(option(s, statTitle(doc, s)));
  select.value = state.stat;
  select.addEventListener("change", () => {
    state.stat = select.value;
    renderTables(state.doc); saveToUrl($("dataset").value, state.last);
  });
  box.append(label, select);
  return box;
}

function layerCodes(doc) {
  const dim = doc.meta.dimensions[2];
  const present = new Set(doc.cells.map((c) => String(c[dim])));
  return categoryOrder(dim).filter((c) => present.has(c));
}

function layerPicker(doc) {
  const dim = doc.meta.dimensions[2];
  const codes = layerCodes(doc);
  if (!codes.includes(state.layer)) state.layer = codes[0];
  const box = document.createElement("div");
  box.className = "row layer-pick";
  const label = document.createElement("label");
  label.htmlFor = "layer"; label.textContent = `Layer: ${varInfo(dim).label}`;
  const select = document.createElement("select");
  select.id = "layer";
  codes.forEach((c, i) => select.appendChild(option(c, `${labelOf(dim, c)} (${i + 1} of ${codes.length})`)));
  select.value = state.layer;
  select.addEventListener("change", () => {
    state.layer = select.value;
    renderTables(state.doc); drawChart(state.doc); saveToUrl($("dataset").value, state.last);
  });
  box.append(label, select);
  return box;
}

function renderTables(doc) {
  const [rowsDim, colsDim, layerDim] = doc.meta.dimensions;
  const layer = layerDim ? state.layer : null;
  const cells = layerDim ? doc.cells.filter((c) => String(c[layerDim]) === layer) : doc.cells;
  const present = (dim) => { const s = new Set(cells.map((c) => String(c[dim]))); return categoryOrder(dim).filter((c) => s.has(c)); };
  const rowCodes = present(rowsDim);
  const colCodes = colsDim ? present(colsDim) : [null];
  const find = (rc, cc) => state.index.get(cellKey([rc, ...(colsDim ? [cc] : []), ...(layerDim ? [layer] : [])]));
  const stat = state.stat;
  const precision = Object.keys(companionsOf(doc, stat)).length ? ", with its 95% confidence interval and relative standard error (RSE)" : "";
  const caption = statTitle(doc, stat) + precision + (layerDim ? ` — ${varInfo(layerDim).label}: ${labelOf(layerDim, layer)}` : "");
  $("tables").replaceChildren(crossTable(doc, stat, caption, rowCodes, colCodes, find));
}

// One statistic as a cross-tab, in a box that scrolls sideways when the table is wider
// than the screen (the page itself never does).
function crossTable(doc, stat, captionText, rowCodes, colCodes, find) {
  const [rowsDim, colsDim] = doc.meta.dimensions;
  const table = document.createElement("table");
  table.className = "cross";
  const caption = document.createElement("caption");
  caption.textContent = captionText;
  table.appendChild(caption);
  const head = document.createElement("tr");
  const corner = document.createElement("th");
  corner.scope = "col"; corner.textContent = varInfo(rowsDim).label;
  head.appendChild(corner);
  for (const cc of colCodes) {
    const th = document.createElement("th"); th.scope = "col";
    th.textContent = colsDim ? labelOf(colsDim, cc) : (stat === "n" ? "Count" : stat === "weighted" ? "Weighted" : statTitle(doc, stat).split(" of ")[0]);
    head.appendChild(th);
  }
  table.appendChild(head);
  for (const rc of rowCodes) {
    const tr = document.createElement("tr");
    if (rc === "_T") tr.className = "total";
    const th = document.createElement("th"); th.scope = "row"; th.textContent = labelOf(rowsDim, rc);
    tr.appendChild(th);
    for (const cc of colCodes) tr.appendChild(dataCell(doc, stat, find(rc, cc), cc === "_T"));
    table.appendChild(tr);
  }
  const box = document.createElement("div");
  box.className = "table-scroll";
  box.tabIndex = 0; // a box that may scroll is reachable by keyboard
  box.setAttribute("role", "region");
  box.setAttribute("aria-label", captionText);
  box.appendChild(table);
  return box;
}

// A figure the account of published figures withholds (output/_withheld.py): every statistic
// of a withheld cell, a percentage of a withheld denominator, and a figure a total that leaves
// withheld cells out does not publish (its sums, means and quantiles).
const PERCENT_OVER = { row: [1], column: [0], total: [0, 1] };
function withheldFigure(doc, stat, cell) {
  if (!cell) return false;
  if (cell.withheld) return true;
  if (cell[stat] !== null && cell[stat] !== undefined) return false;
  if (cell.excludes_withheld) return true;
  const m = /^percent_(row|column|total)/.exec(stat);
  if (!m) return false;
  const dims = doc.meta.dimensions;
  const codes = dims.map((d, i) => (PERCENT_OVER[m[1]].includes(i) ? "_T" : cell[d]));
  const denominator = state.index.get(cellKey(codes));
  return Boolean(denominator && denominator.withheld);
}

// A mark in a cell (c, t, z, x, u...): its meaning from the footnotes' flag legend, as a tooltip.
function flagMark(doc, flag, symbol) {
  const sup = document.createElement("sup");
  sup.className = "flag"; sup.textContent = symbol;
  sup.title = (doc.meta.footnotes && doc.meta.footnotes.flags[flag]) ||
    (flag.startsWith("sensitive_") ? "sensitive: the site's dominance or p% rule flags this sum (a few contributors make most of it)" : flag);
  return sup;
}

function dataCell(doc, stat, cell, total) {
  const td = document.createElement("td");
  if (total) td.className = "total";
  if (withheldFigure(doc, stat, cell)) {
    // No number at all: the mark, explained by its tooltip and the legend.
    const mark = document.createElement("span");
    mark.className = "withheld"; mark.textContent = FLAG_SYMBOL.withheld;
    mark.title = (doc.meta.footnotes && doc.meta.footnotes.flags.withheld) || "withheld";
    td.appendChild(mark);
    return td;
  }
  td.textContent = cell ? fmt(cell[stat], stat, columnDecimals(doc, stat)) : "";
  if (cell && cell.excludes_withheld) {
    td.appendChild(document.createTextNode(" "));
    td.appendChild(flagMark(doc, "excludes_withheld", FLAG_SYMBOL.excludes_withheld));
  }
  const magFlag = magnitudeOf(stat) !== null ? `sensitive_${magnitudeOf(stat)}` : null;
  // The precision rule's flag, where the site flags unreliable estimates (np shows itself).
  const unsure = `unreliable_${stat}`;
  for (const flag of ["structural_zero", "suppressed", ...(magFlag ? [magFlag] : []), unsure]) {
    if (cell && cell[flag]) {
      td.appendChild(document.createTextNode(" "));
      td.appendChild(flagMark(doc, flag, FLAG_SYMBOL[flag] || (flag === unsure ? "u" : "s")));
    }
  }
  if (cell) td.append(...precisionLines(doc, stat, cell));
  return td;
}

// Under an estimate, where the table has its standard error: its 95% interval and its
// relative standard error (the published standard error over the published estimate, in
// percent), each on a line of its own. Nothing where either is not published.
function precisionLines(doc, stat, cell) {
  const comp = companionsOf(doc, stat);
  const value = cell[stat], se = comp.se && cell[comp.se];
  const low = comp.ci_low && cell[comp.ci_low], high = comp.ci_high && cell[comp.ci_high];
  const lines = [];
  const line = (cls, text, title) => {
    const span = document.createElement("span");
    span.className = `precision ${cls}`; span.textContent = text; span.title = title;
    lines.push(span);
  };
  if (typeof low === "number" && typeof high === "number") {
    const d = columnDecimals(doc, stat);
    line("ci", `${fmt(low, stat, d)}–${fmt(high, stat, d)}`, "95% confidence interval");
  }
  if (typeof value === "number" && typeof se === "number" && value !== 0) {
    line("rse", `RSE ${(100 * se / Math.abs(value)).toFixed(1)}%`, `relative standard error: the standard error ${fmt(se, stat)} over the estimate`);
  }
  return lines;
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
  box.append(...technicalLines(meta));
  return box;
}

// Parameters of the protection description in words, where their meaning is one
// (docs/ptable.md): a ptable's largest change and variance, and where draws come from.
const SEED_WORDS = { cellkey: "the cell key", keyed: "a keyed hash of the cell's records" };
function parameterWords(m, k, v) {
  if (typeof v === "object" && v !== null) return `${k} = ${JSON.stringify(v)}`;
  if (k === "D" && m.name === "ckm") return `largest change D = ${v}`;
  if (k === "V" && m.name === "ckm") return `variance of the change V = ${v}`;
  if (k === "js" && m.name === "ckm" && v > 0) return `js = ${v} (no count from 1 to ${v} is published)`;
  if (k === "cap" && (m.name === "dp" || m.name === "q")) return `largest change cap = ${v}`;
  if (k === "seeds") return `noise drawn from ${SEED_WORDS[v] || v}`;
  return `${k} = ${v}`;
}
const sig = (x) => Number(x.toPrecision(3)).toString();

// The technical line, and the privacy figures explained next to them: epsilon and delta of
// a perturbation table compare one cell's count with the same count plus one record.
function technicalLines(meta) {
  const m = meta.mechanism;
  const skip = new Set(["name", "paper", "epsilon", "delta"]);
  const params = Object.entries(m).filter(([k]) => !skip.has(k)).map(([k, v]) => parameterWords(m, k, v)).join(", ");
  const tech = document.createElement("p");
  tech.className = "technical";
  tech.textContent = `Technical: ${m.name}${params ? " (" + params + ")" : ""}; additivity: ${meta.additivity}.`;
  if (typeof m.epsilon !== "number" || typeof m.delta !== "number") return [tech];
  const figures = document.createElement("p");
  figures.className = "technical"; figures.id = "privacy-figures";
  const worst = m.name === "dp"
    ? "Epsilon is the one the site set; delta is the table's worst case over all counts."
    : "Both are the table's worst case over all counts.";
  figures.textContent = `Privacy figures of the perturbation table: epsilon = ${sig(m.epsilon)}, delta = ${sig(m.delta)}. ` +
    "They hold for one cell: between a count and the same count with one record more, the chance of " +
    `publishing any set of values differs by at most a factor of e^epsilon (here ${sig(Math.exp(m.epsilon))}), plus delta. ` +
    `${worst} They say nothing of several cells or tables taken together.`;
  return [tech, figures];
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

// Nothing of a previous table stays on screen once another is asked for: its table,
// chart, share link and downloads go, so a refusal never leaves a stale result.
function clearResult() {
  state.last = null; state.doc = null; state.index = null;
  clearJob();
  $("result").replaceChildren();
  $("chart").replaceChildren();
  $("chart-caption").textContent = "";
  $("chart-box").hidden = true;
  $("outputs").hidden = true;
  $("share").setAttribute("href", "/");
  document.title = SITE_TITLE;
}

async function build(event) {
  if (event) event.preventDefault();
  // A table asked for from the form opens on its default estimate; a link, on the one it names.
  if (event) state.stat = null;
  $("message").textContent = "";
  const body = requestBody();
  if (state.controller) state.controller.abort();
  clearResult();
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
    if (state.controller !== controller) return;
    showTable(name, body, doc);
    // Cells withheld: the check offers the nearest tables answered in full.
    if (doc.cells.some((c) => c.withheld)) checkNow(); else showAlternatives([]);
  } catch (e) {
    if (state.controller !== controller) return; // a newer request took over
    $("message").textContent = e.name === "AbortError" ? "Cancelled: the table was not built. Change the request or build it again." : e.message;
    showAlternatives(e.alternatives || []);
    // Over the direct limit: the same request may be built as a job.
    if (e.type === "TooManyCells") offerJob($("dataset").value, body);
    // A link kept while the key is missing still builds the table once a key is entered.
    if (e.status !== 401) history.replaceState(null, "", location.pathname);
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

function showTable(name, body, doc) {
  state.last = body; state.doc = doc; state.index = cellIndex(doc);
  if (!doc.meta.dimensions[2]) state.layer = null;
  renderResult(doc);
  drawChart(doc);
  $("outputs").hidden = false;
  document.title = `${doc.meta.title || tableTitle(doc.meta.dimensions)} — ${SITE_TITLE}`;
  saveToUrl(name, body);
}

// The page state lives in the URL (never the API key): reopening it rebuilds the same table.
function saveToUrl(name, body) {
  const params = new URLSearchParams();
  params.set("dataset", name);
  params.set("table", JSON.stringify({ ...body, groups: state.groups }));
  if (state.layer !== null) params.set("layer", state.layer);
  if (state.stat) params.set("show", state.stat);
  history.replaceState(null, "", `${location.pathname}?${params}`);
  $("share").href = `${location.origin}${location.pathname}?${params}`;
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
  applyBody(t);
  state.layer = params.get("layer");
  state.stat = params.get("show");
  await build();
}

// A request body (a link's, or a suggested table's) set into the form.
function applyBody(t) {
  const dims = t.dimensions || [];
  $("rows").value = dims[0] || ""; $("cols").value = dims[1] || ""; $("layers").value = dims[2] || "";
  state.conditions = {};
  for (const [k, v] of Object.entries(t.universe || {})) state.conditions[k] = v.map(String);
  fillCategories(); renderConditions();
  const items = String(t.statistic || "").split(",");
  const radio = document.querySelector(`input[name="statistic"][value="${items[0]}"]`);
  if (radio) radio.checked = true;
  for (const c of document.querySelectorAll('input[name="percent"]')) c.checked = items.includes(`percent:${c.value}`);
  $("se").checked = t.se === true && !$("se").disabled;
  const mags = Array.isArray(t.magnitudes) ? t.magnitudes.map((m) => String(m).split(":")) : [];
  $("magvar").value = mags.length && magnitudeInfo(mags[0][1]) ? mags[0][1] : "";
  for (const c of document.querySelectorAll('input[name="magstat"]')) {
    c.checked = mags.some((m) => m[0] === (c.value === "quartiles" ? "quantile" : c.value));
  }
  $("margins").value = ["all", "total", "none"].includes(t.margins) ? t.margins : "all";
}

// -- the pre-flight check: live while the table is chosen, with the nearest tables that pass --
// A dry run on the server (POST .../tables:check): nothing is published, no budget spent.

function scheduleCheck() {
  clearTimeout(state.checkTimer);
  state.checkTimer = setTimeout(checkNow, 600);
}

async function checkNow() {
  clearTimeout(state.checkTimer);
  if (!state.meta || !$("rows").value || (keysRequired() && !apiKey())) return;
  if (state.checkController) state.checkController.abort();
  const controller = new AbortController();
  state.checkController = controller;
  const name = $("dataset").value;
  try {
    const path = `/api/datasets/${encodeURIComponent(name)}/tables:check`;
    const answer = await (await api(path, { method: "POST", body: JSON.stringify(requestBody()), signal: controller.signal })).json();
    if (state.checkController !== controller) return;
    showCheck(answer);
  } catch (e) {
    if (state.checkController === controller) $("check-status").textContent = e.name === "AbortError" ? "" : `The table could not be checked: ${e.message}`;
  } finally {
    if (state.checkController === controller) state.checkController = null;
  }
}

const UNDECIDED = { universe_size: "the universe's size", risk_ceiling: "the risk ceiling", account: "cells withheld" };

function showCheck(answer) {
  let text;
  if (!answer.passes) {
    text = `This table would be refused: ${answer.refusal.message}`;
  } else {
    const withheld = answer.withheld.length;
    text = `This table would be answered: ${answer.cells} cells`;
    text += withheld ? `, ${withheld} of them withheld (with tables already published, they would let differences isolate a few records).` : ", none withheld.";
    if (answer.undecided.length) text += ` Decided when it is built: ${answer.undecided.map((u) => UNDECIDED[u] || u).join(", ")}.`;
  }
  $("check-status").textContent = text;
  showAlternatives(answer.alternatives || []);
}

function showAlternatives(list) {
  $("alternatives-list").replaceChildren(...list.map((a) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "alternative";
    button.textContent = a.change;
    button.addEventListener("click", () => { applyBody(a.request); renderConditions(); state.stat = null; build(); });
    item.appendChild(button);
    return item;
  }));
  $("alternatives").hidden = list.length === 0;
}

// Charts are drawn from the protected values of the table shown, never from anything else.
const SVGNS = "http://www.w3.org/2000/svg";
function el(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// What a chart shows: the inner cells of the table (of the layer shown), by rows and series.
function chartData(doc) {
  const [rowsDim, colsDim, layerDim] = doc.meta.dimensions;
  const stat = doc.cells.length && "weighted" in doc.cells[0] ? "weighted" : "n";
  const layer = layerDim ? state.layer : null;
  const inner = doc.cells.filter((c) => String(c[rowsDim]) !== "_T" && (!colsDim || String(c[colsDim]) !== "_T") &&
    (!layerDim || String(c[layerDim]) === layer));
  const codes = (dim) => { const s = new Set(inner.map((c) => String(c[dim]))); return varInfo(dim).categories.map((c) => String(c.code)).filter((c) => s.has(c)); };
  const rows = codes(rowsDim);
  const series = colsDim ? codes(colsDim) : [null];
  const find = (r, s) => state.index.get(cellKey([r, ...(colsDim ? [s] : []), ...(layerDim ? [layer] : [])]));
  const value = (r, s) => { const c = find(r, s); return c && typeof c[stat] === "number" ? c[stat] : 0; };
  // A withheld cell has no bar: it is not zero, it is not published.
  const withheld = (r, s) => { const c = find(r, s); return Boolean(c && c.withheld); };
  const isAge = (d) => /^AGE/i.test(varInfo(d).name) || /^age/i.test(varInfo(d).label);
  const pyramid = Boolean(colsDim) && isAge(rowsDim) && /^SEX$/i.test(colsDim) && series.length === 2;
  const what = stat === "n" ? "unweighted counts" : "weighted counts";
  const where = layerDim ? `, ${varInfo(layerDim).label}: ${labelOf(layerDim, layer)}` : "";
  const name = `${varInfo(rowsDim).label}${colsDim ? " by " + varInfo(colsDim).label : ""}${where}`;
  // The table's own flag says whether its values are protected (never assumed).
  const kind = doc.meta.protected === true ? "protected" : "UNPROTECTED";
  const title = pyramid ? `Population pyramid: ${name} (${kind} ${what})` : `${name} (${kind} ${what})`;
  const anyWithheld = rows.some((r) => series.some((s) => withheld(r, s)));
  return { rowsDim, colsDim, stat, rows, series, find, value, withheld, anyWithheld, pyramid, title, axis: stat === "n" ? "Count" : "Weighted count" };
}

// A value axis with round steps (1, 2, 2.5 or 5 times a power of ten) reaching past the largest value.
function niceScale(max) {
  const raw = Math.max(max, 1) / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  const top = Math.ceil(Math.max(max, 1) / step) * step;
  const ticks = [];
  for (let t = 0; t <= top + step / 2; t += step) ticks.push(t);
  return { top, ticks };
}

// The lines under an exported chart: the universe, the source, the date of the data and
// the protection.
function chartNotes(doc) {
  const statement = (doc.meta.footnotes && doc.meta.footnotes.statement) || [];
  const citation = doc.meta.footnotes && doc.meta.footnotes.citation;
  const source = statement.find((s) => s.startsWith("Source:")) || (citation ? `Source: ${citation}` : null);
  const date = statement.find((s) => s.startsWith("Reference date of the data:"));
  const protection = statement.find((s) => s.startsWith("Protection:"));
  const withheld = chartData(doc).anyWithheld ? `Withheld cells (${FLAG_SYMBOL.withheld}) have no bar.` : null;
  const lines = [tableUniverse(doc.meta), source, date, protection, "Suppressed cells are drawn as zero.", withheld];
  return lines.filter(Boolean).flatMap((line) => wrap(line, 128));
}

function wrap(text, width) {
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + word.length + 1 > width) { lines.push(line); line = word; } else line = line ? `${line} ${word}` : word;
  }
  return line ? [...lines, line] : lines;
}

function drawChart(doc) {
  const data = chartData(doc);
  const notes = chartNotes(doc);
  const W = 720, rowH = 18, top = 30, left = 170;
  const plotH = data.rows.length * (data.pyramid ? rowH : rowH * Math.max(1, data.series.length) + 4);
  const legendY = top + plotH + 44;
  const H = legendY + 12 + notes.length * 14 + 8;
  // Fonts as attributes, not page CSS: an exported SVG carries them too.
  const svg = el("svg", { xmlns: SVGNS, width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "font-family": "system-ui, sans-serif", "font-size": 11, fill: "#1a1a1a" });
  svg.appendChild(el("title", {}, data.title));
  svg.appendChild(el("rect", { x: 0, y: 0, width: W, height: H, fill: "#ffffff" }));
  svg.appendChild(el("text", { x: 8, y: 18, "font-weight": "600" }, data.title));
  const max = Math.max(1, ...data.rows.flatMap((r) => data.series.map((s) => data.value(r, s))));
  const scale = niceScale(max);
  const geometry = { W, rowH, top, left, plotH, legendY };
  if (data.pyramid) drawPyramid(svg, data, scale, geometry); else drawBars(svg, data, scale, geometry);
  notes.forEach((line, i) => svg.appendChild(el("text", { x: 8, y: legendY + 24 + i * 14, "font-size": 10, class: "note" }, line)));
  $("chart").replaceChildren(svg);
  svg.setAttribute("aria-label", data.title);
  const values = doc.meta.protected === true ? "protected values" : "UNPROTECTED (true) values";
  const skipped = data.anyWithheld ? ` Withheld cells (${FLAG_SYMBOL.withheld}) have no bar.` : "";
  $("chart-caption").textContent = `${data.title}. Drawn from the ${values} in the table above; suppressed cells are drawn as zero.${skipped}`;
  $("chart-box").hidden = false;
}

const COLORS = ["#1f5f99", "#c4541a", "#3a8a3a", "#7b4ea3", "#a0761c", "#2a8a8a", "#9c2f5a", "#555555"];

// A value axis along y = at, from x0 (value 0) to x1 (value top), leftwards when x1 < x0;
// withZero false leaves out the 0 that the pyramid's other half already labels.
function valueAxis(svg, scale, x0, x1, at, withZero = true) {
  svg.appendChild(el("line", { x1: Math.min(x0, x1), x2: Math.max(x0, x1), y1: at, y2: at, stroke: "#555", class: "axis" }));
  for (const t of scale.ticks.filter((v) => withZero || v > 0)) {
    const x = x0 + ((x1 - x0) * t) / scale.top;
    svg.appendChild(el("line", { x1: x, x2: x, y1: at, y2: at + 4, stroke: "#555" }));
    svg.appendChild(el("text", { x, y: at + 15, "text-anchor": "middle", class: "tick" }, Math.round(t).toLocaleString()));
  }
}

function drawPyramid(svg, data, scale, g) {
  const mid = g.left + (g.W - g.left - 20) / 2, half = (g.W - g.left - 60) / 2;
  // Oldest at the top, as population pyramids are drawn.
  [...data.rows].reverse().forEach((r, i) => {
    const y = g.top + i * g.rowH;
    svg.appendChild(el("text", { x: g.left - 6, y: y + 12, "text-anchor": "end" }, labelOf(data.rowsDim, r)));
    data.series.forEach((s, k) => {
      if (data.withheld(r, s)) {
        svg.appendChild(el("text", { x: k === 0 ? mid - 4 : mid + 4, y: y + 12, "text-anchor": k === 0 ? "end" : "start", class: "withheld" }, FLAG_SYMBOL.withheld));
        return;
      }
      const w = (data.value(r, s) / scale.top) * half;
      svg.appendChild(el("rect", { x: k === 0 ? mid - w : mid, y, width: w, height: g.rowH - 3, fill: COLORS[k] }));
    });
  });
  const at = g.top + g.plotH + 2;
  valueAxis(svg, scale, mid, mid - half, at);
  valueAxis(svg, scale, mid, mid + half, at, false);
  svg.appendChild(el("text", { x: mid, y: at + 30, "text-anchor": "middle", class: "axis-title" }, data.axis));
  data.series.forEach((s, k) => svg.appendChild(el("text", { x: k === 0 ? mid - half : mid + half, y: g.legendY, "text-anchor": k === 0 ? "start" : "end", fill: COLORS[k] }, labelOf(data.colsDim, s))));
}

function drawBars(svg, data, scale, g) {
  const width = g.W - g.left - 90;
  let y = g.top;
  for (const r of data.rows) {
    svg.appendChild(el("text", { x: g.left - 6, y: y + 12, "text-anchor": "end" }, labelOf(data.rowsDim, r)));
    data.series.forEach((s, k) => {
      if (data.withheld(r, s)) {
        svg.appendChild(el("text", { x: g.left + 4, y: y + 12, class: "withheld" }, FLAG_SYMBOL.withheld));
        y += g.rowH;
        return;
      }
      const w = (data.value(r, s) / scale.top) * width;
      const cell = data.find(r, s);
      svg.appendChild(el("rect", { x: g.left, y, width: w, height: g.rowH - 3, fill: COLORS[k % COLORS.length] }));
      svg.appendChild(el("text", { x: g.left + w + 4, y: y + 12 }, fmt(cell ? cell[data.stat] : null, data.stat)));
      y += g.rowH;
    });
    y += 4;
  }
  const at = g.top + g.plotH + 2;
  valueAxis(svg, scale, g.left, g.left + width, at);
  svg.appendChild(el("text", { x: g.left + width / 2, y: at + 30, "text-anchor": "middle", class: "axis-title" }, data.axis));
  if (data.colsDim) data.series.forEach((s, k) => svg.appendChild(el("text", { x: g.left + k * 110, y: g.legendY, fill: COLORS[k % COLORS.length] }, labelOf(data.colsDim, s))));
}

function chartSvgText() {
  return new XMLSerializer().serializeToString($("chart").querySelector("svg"));
}

function save(blob, filename) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob); a.download = filename;
  document.body.appendChild(a); a.click(); a.remove();
}

// A chart's file name is the table's: meta.file_stem, which also names the server's downloads.
const fileStem = (doc) => doc.meta.file_stem || "table";

function attachmentName(response, fallback) {
  const match = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") || "");
  return match ? match[1] : fallback;
}

async function exportChart(format) {
  if (!state.doc) return;
  const name = `${fileStem(state.doc)}-chart.${format}`;
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

// A download is always of the table on screen (state.last is cleared with it).
async function download(format) {
  const body = state.last, doc = state.doc;
  if (!body || !doc) return;
  $("message").textContent = "";
  try {
    const name = $("dataset").value;
    // Files for people: category labels beside the codes in the CSV and the XLSX's cells
    // sheet (the API's default is codes only).
    const query = `format=${format}&labels=true`;
    const response = await api(`/api/datasets/${encodeURIComponent(name)}/tables?${query}`, { method: "POST", body: JSON.stringify(body) });
    save(await response.blob(), attachmentName(response, `${fileStem(doc)}.${format}`));
  } catch (e) {
    $("message").textContent = e.message;
  }
}

// -- jobs: a table over the direct limit, built in the background ------------------------------

function clearJob() {
  state.job = null;
  $("job-box").hidden = true;
  $("job-progress-box").hidden = true;
  $("job-download").hidden = true;
  $("job-build").disabled = false;
}

function offerJob(name, body) {
  state.job = { name, body, id: null };
  $("job-box").hidden = false;
}

async function buildJob() {
  const job = state.job;
  if (!job || job.id) return;
  $("message").textContent = "";
  $("job-build").disabled = true;
  try {
    const path = `/api/datasets/${encodeURIComponent(job.name)}/jobs?format=csv&labels=true`;
    const answer = await (await api(path, { method: "POST", body: JSON.stringify(job.body) })).json();
    job.id = answer.id;
    // A job the key already asked for is answered as it is (queued, running or done).
    showJob({ stage: answer.status, progress: 0, ...answer });
    await followJob(job);
  } catch (e) {
    $("message").textContent = e.message;
    if (state.job === job) $("job-build").disabled = false;
  }
}

function showJob(status) {
  $("job-progress-box").hidden = false;
  $("job-progress").value = status.progress || 0;
  const words = { queued: "Queued: waiting for a worker", building: "Building the table", writing: "Writing the file", done: "Done: the file is ready", failed: "Failed" };
  const share = status.stage === "writing" ? ` (${Math.round(100 * status.progress)}%)` : "";
  // No worker runs for the site: the server says so, and what to do.
  const head = status.message && status.stage === "queued" ? "Queued" : words[status.stage] || status.status;
  $("job-status").textContent = status.message ? `${head}: ${status.message}` : `${head}${share}`;
}

// Polls the job until it is done or failed (or another request replaces it).
async function followJob(job) {
  for (;;) {
    if (state.job !== job) return;
    const status = await (await api(`/api/jobs/${encodeURIComponent(job.id)}`)).json();
    if (state.job !== job) return;
    showJob(status);
    if (status.status === "done") { $("job-download").hidden = false; return; }
    if (status.status === "failed") { $("message").textContent = status.error.message; return; }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function downloadJob() {
  const job = state.job;
  if (!job || !job.id) return;
  try {
    const response = await api(`/api/jobs/${encodeURIComponent(job.id)}/result`);
    save(await response.blob(), attachmentName(response, "table.csv"));
  } catch (e) {
    $("message").textContent = e.message;
  }
}

async function loadSite() {
  $("message").textContent = "";
  try {
    const list = await (await api("/api/datasets")).json();
    state.datasets = list.datasets;
    $("dataset").replaceChildren(...list.datasets.map((d) => option(d.name, d.title)));
    await loadDataset();
  } catch (e) {
    $("message").textContent = e.message;
    return;
  }
  await restoreFromUrl();
}

function wire() {
  $("key-form").addEventListener("submit", useKey);
  $("key-forget").addEventListener("click", forgetKey);
  $("dataset").addEventListener("change", () => loadDataset().catch((e) => { $("message").textContent = e.message; }));
  $("uvar").addEventListener("change", fillCategories);
  for (const id of DIMENSIONS) $(id).addEventListener("change", () => { $("dims-status").textContent = ""; });
  $("builder").addEventListener("submit", build);
  $("cancel").addEventListener("click", () => { if (state.controller) state.controller.abort(); });
  $("var-search").addEventListener("input", search);
  $("gvar").addEventListener("change", fillGroupCategories);
  $("add-group").addEventListener("click", addGroup);
  $("download-svg").addEventListener("click", () => exportChart("svg"));
  $("download-png").addEventListener("click", () => exportChart("png"));
  $("download-csv").addEventListener("click", () => download("csv"));
  $("download-xlsx").addEventListener("click", () => download("xlsx"));
  $("download-jsonstat").addEventListener("click", () => download("jsonstat"));
  $("download-sdmx-csv").addEventListener("click", () => download("sdmx-csv"));
  $("download-sdmx-json").addEventListener("click", () => download("sdmx-json"));
  $("download-sdmx-structure").addEventListener("click", () => download("sdmx-structure"));
  $("job-build").addEventListener("click", buildJob);
  $("job-download").addEventListener("click", downloadJob);
  // Every change to the request is checked again once the user pauses.
  $("builder").addEventListener("change", scheduleCheck);
  $("builder").addEventListener("input", scheduleCheck);
}

async function start() {
  wire();
  if (keysRequired()) showKeyForm(!apiKey());
  if (keysRequired() && !apiKey()) {
    $("key-status").textContent = 'This site needs an API key: enter it above and press "Use this key".';
    return;
  }
  await loadSite();
}

start();
