// The fleet page (`/`): one row per target, drawn only for the rows in view (a thousand targets stay
// responsive), kept live by /api/v1/stream, with headline sparklines from /api/v1/sparklines.
import { el, svg, setText, fmt, ago, pathOf, follow, measured } from "./common.js";

const ROW = 44;          // px, as .row in app.css
const OVERSCAN = 6;      // rows drawn beyond the viewport
let SPARK = 300;         // seconds of a sparkline (the server says)

const targets = new Map(); // name -> target
let order = [];             // the names shown, filtered and sorted
let at = 0;                 // the server's second of the last update
let tOffset = 0;            // server Unix time - local Unix time
const sort = { key: "name", dir: 1 };
const filter = { q: "", protocol: "", state: "" };

const viewport = document.getElementById("viewport");
const spacer = document.getElementById("spacer");
const summary = document.getElementById("summary");
const count = document.getElementById("count");
const drawn = new Map(); // name -> row element in the DOM

function now() { return Date.now() / 1000 + tOffset; }

function newTarget(row) {
  return { row: {}, spark: [], stamp: [], fetched: false, labelText: "" };
}

/** Merges a row's changed fields into its target. */
function merge(row) {
  let t = targets.get(row.name);
  if (!t) { t = newTarget(row); targets.set(row.name, t); }
  Object.assign(t.row, row);
  if ("labels" in row) t.labelText = Object.entries(t.row.labels || {}).map(([k, v]) => k + "=" + v).join(" ");
  return t;
}

/** Writes each target's current headline figures at second `sec` of its sparkline rings. */
function sample(sec) {
  for (const t of targets.values()) {
    const h = t.row.h || [];
    for (let i = 0; i < h.length; i++) put(t, i, sec, h[i]);
  }
}

function put(t, i, sec, v) {
  if (!t.spark[i]) { t.spark[i] = new Float64Array(SPARK).fill(NaN); t.stamp[i] = new Int32Array(SPARK).fill(-1); }
  const slot = sec % SPARK;
  if (t.stamp[i][slot] > sec) return;
  t.spark[i][slot] = v === null ? NaN : v;
  t.stamp[i][slot] = sec;
}

function points(t, i) {
  const out = [];
  const ring = t.spark[i], stamp = t.stamp[i];
  if (!ring) return out;
  for (let sec = at - SPARK + 1; sec <= at; sec++) {
    if (sec < 0) continue;
    const slot = sec % SPARK;
    out.push([sec, stamp[slot] === sec && !Number.isNaN(ring[slot]) ? ring[slot] : null]);
  }
  return out;
}

function matches(name, t) {
  const r = t.row;
  if (filter.protocol && r.protocol !== filter.protocol) return false;
  if (filter.state && r.state !== filter.state) return false;
  if (filter.q) {
    const q = filter.q;
    if (!name.toLowerCase().includes(q) && !t.labelText.toLowerCase().includes(q)) return false;
  }
  return true;
}

function sortValue(name, t) {
  const r = t.row;
  switch (sort.key) {
    case "name": return name;
    case "protocol": return r.protocol + "\u0000" + name;
    case "state": return r.state + "\u0000" + String(1e12 - (r.since || 0)).padStart(14, "0");
    case "error": return (r.last_error || "\uffff") + "\u0000" + name;
    case "labels": return t.labelText || "\uffff";
    case "h0": return r.h && r.h[0] !== null && r.h[0] !== undefined ? r.h[0] : -Infinity;
    case "h1": return r.h && r.h[1] !== null && r.h[1] !== undefined ? r.h[1] : -Infinity;
  }
  return name;
}

function reorder() {
  const keyed = [];
  for (const [name, t] of targets) if (matches(name, t)) keyed.push([sortValue(name, t), name]);
  keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0) * sort.dir);
  order = keyed.map((k) => k[1]);
  spacer.style.height = order.length * ROW + "px";
  setText(count, order.length === targets.size ? targets.size + " targets" : order.length + " of " + targets.size + " targets");
}

function makeRow(name) {
  const link = el("a", { href: "/target/" + encodeURIComponent(name) });
  link.textContent = name;
  const row = el("div", { class: "row grid", "data-target": name },
    el("div", { class: "name" }, link),
    el("div", { class: "proto" }),
    el("div", { class: "state" }),
    el("div", { class: "err" }),
    el("div", { class: "labels muted" }));
  for (let i = 0; i < 2; i++) {
    const s = svg("svg", { class: "spark", viewBox: "0 0 100 18", preserveAspectRatio: "none", "data-points": "0" });
    s.append(svg("path"));
    row.append(el("div", { class: "fig" }, el("span", { class: "t" }), el("span", { class: "v" }), s));
  }
  return row;
}

function fill(row, name, t) {
  const r = t.row;
  row.dataset.state = r.state || "connecting";
  const c = row.children;
  setText(c[1], r.protocol || "");
  setText(c[2], (r.state || "") + " " + ago(now() - (r.since || now())));
  setText(c[3], r.last_error || "");
  c[3].title = r.last_error || "";
  setText(c[4], t.labelText);
  c[4].title = t.labelText;
  for (let i = 0; i < 2; i++) {
    const fig = c[5 + i];
    const [title, unit] = (r.ht && r.ht[i]) || ["", ""];
    setText(fig.children[0], title);
    fig.children[0].title = title;
    // A figure the target does not have (a Mono agent with no counters) is "–", as one with no value yet.
    setText(fig.children[1], fmt(r.h ? r.h[i] : null, unit));
    // The x axis spans the seconds there are (up to SPARK), so a young sparkline is not a sliver.
    const pts = points(t, i);
    const first = pts.findIndex((p) => p[1] !== null);
    const x0 = first < 0 ? at - SPARK + 1 : Math.min(pts[first][0], at - 30);
    const p = pathOf(pts.slice(Math.max(0, first)), x0, at, 100, 18);
    const spark = fig.children[2];
    spark.firstChild.setAttribute("d", p.d);
    spark.dataset.points = String(p.n);
  }
}

/** Draws the rows in view (and a few beyond), reusing the elements of rows still in view. */
function draw() {
  const first = Math.max(0, Math.floor(viewport.scrollTop / ROW) - OVERSCAN);
  const last = Math.min(order.length, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW) + OVERSCAN);
  const want = new Set(order.slice(first, last));
  for (const [name, row] of drawn) if (!want.has(name)) { row.remove(); drawn.delete(name); }
  const missing = [];
  for (let i = first; i < last; i++) {
    const name = order[i];
    const t = targets.get(name);
    let row = drawn.get(name);
    if (!row) { row = makeRow(name); drawn.set(name, row); viewport.append(row); }
    row.style.transform = "translateY(" + i * ROW + "px)";
    fill(row, name, t);
    if (!t.fetched) missing.push(name);
  }
  if (missing.length) fetchSparks(missing);
}

let fetching = false;
/** Fetches the sparklines of rows drawn for the first time (their past before this page opened). */
async function fetchSparks(names) {
  if (fetching) return;
  fetching = true;
  for (const n of names) targets.get(n).fetched = true;
  try {
    const r = await fetch("/api/v1/sparklines", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(names) });
    if (!r.ok) throw new Error("sparklines: HTTP " + r.status);
    const body = await r.json();
    for (const [name, lines] of Object.entries(body.spark)) {
      const t = targets.get(name);
      if (!t) continue;
      lines.forEach((line, i) => line.forEach((v, j) => put(t, i, body.at - line.length + 1 + j, v)));
    }
  } catch (e) {
    for (const n of names) { const t = targets.get(n); if (t) t.fetched = false; }
    console.warn(e);
  } finally {
    fetching = false;
  }
  draw();
}

function showSummary(s) {
  summary.dataset.up = s.up;
  summary.dataset.total = s.total;
  const parts = [s.up + " / " + s.total + " up"];
  for (const [p, c] of Object.entries(s.protocols || {})) {
    parts.push(p + " " + c.up + "/" + c.total);
    offerProtocol(p);
  }
  setText(summary, parts.join(" · "));
}

// The protocol filter offers each protocol the fleet has had a target of (the registry's, not a fixed list),
// in name order after "all protocols".
function offerProtocol(p) {
  const select = document.getElementById("protocol");
  const options = [...select.options].slice(1);
  if (options.some((o) => o.value === p)) return;
  const option = document.createElement("option");
  option.value = p;
  option.textContent = p;
  select.insertBefore(option, options.find((o) => o.value > p) || null);
}

function onFull(full) {
  measured("telemon:full", () => {
    SPARK = full.spark_secs || SPARK;
    at = full.at;
    tOffset = full.t - Date.now() / 1000;
    const seen = new Set();
    for (const row of full.rows) { merge(row); seen.add(row.name); }
    for (const name of [...targets.keys()]) if (!seen.has(name)) targets.delete(name);
    sample(at);
    showSummary(full.summary);
    reorder();
    draw();
  });
  document.body.dataset.ready = "1";
}

function onDelta(d) {
  if (d.at <= at) return;
  measured("telemon:update", () => {
    at = d.at;
    tOffset = d.t - Date.now() / 1000;
    for (const row of d.rows) merge(row);
    for (const name of d.gone) targets.delete(name);
    sample(at);
    showSummary(d.summary);
    reorder();
    draw();
  });
  document.body.dataset.at = String(at);
}

// Controls: search, filters, sort; the view follows the scroll.
const search = document.getElementById("search");
search.addEventListener("input", () => { filter.q = search.value.trim().toLowerCase(); reorder(); draw(); });
for (const id of ["protocol", "state"]) {
  const s = document.getElementById(id);
  s.addEventListener("change", () => { filter[id] = s.value; reorder(); draw(); });
}
for (const b of document.querySelectorAll("#thead button")) {
  b.addEventListener("click", () => {
    if (sort.key === b.dataset.sort) sort.dir = -sort.dir; else { sort.key = b.dataset.sort; sort.dir = 1; }
    for (const o of document.querySelectorAll("#thead button")) delete o.dataset.dir;
    b.dataset.dir = sort.dir === 1 ? "asc" : "desc";
    reorder();
    draw();
  });
}
let scrolling = 0;
viewport.addEventListener("scroll", () => {
  if (!scrolling) scrolling = requestAnimationFrame(() => { scrolling = 0; draw(); });
});
addEventListener("resize", draw);

follow("/api/v1/stream", { full: onFull, delta: onDelta }, document.getElementById("live"));
