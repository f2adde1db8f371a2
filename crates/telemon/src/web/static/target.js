// A target's page (`/target/NAME`): every series grouped by family, charts of the last minutes, events and
// state history, kept live by /api/v1/stream?target=NAME.
import { el, svg, setText, fmt, ago, clock, follow, measured } from "./common.js";

const name = decodeURIComponent(location.pathname.slice("/target/".length));
const api = "/api/v1/targets/" + encodeURIComponent(name);
const MAX_LINES = 6;   // series drawn per chart (the rest are in its table)
const W = 900, H = 180, LEFT = 64, BOTTOM = 18;

let at = 0, window_ = 600, tOffset = 0;
let fields = {};
let families = [];            // [{name, help, kind, unit, series: [s], section, chart, visible}]
const byKey = new Map();      // key -> series {key, labels, value, rate, plotted, pts, cells, fam}

const $ = (id) => document.getElementById(id);
document.title = "telemon: " + name;
setText($("name"), name);
$("metrics").href = api + "/metrics";
$("json").href = api;

function now() { return Date.now() / 1000 + tOffset; }

function labelText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => k + "=" + v).join(", ");
}

/** The unit of a series' value (a counter's count has none; its rate has the family's). */
function valueUnit(fam) {
  return fam.kind === "counter" ? "" : fam.unit;
}

function showFields() {
  setText($("protocol"), fields.protocol || "");
  const st = $("state");
  st.dataset.state = fields.state || "connecting";
  setText(st, (fields.state || "") + (fields.since ? " for " + ago(now() - fields.since) : ""));
  setText($("error"), fields.last_error || "none");
  setText($("labels"), labelText(fields.labels) || "none");
  setText($("connects"), String(fields.connects ?? ""));
  setText($("errors"), Object.entries(fields.errors || {}).filter(([, n]) => n > 0).map(([k, n]) => k + " " + n).join(", ") || "0");
  const states = $("states");
  states.replaceChildren(...(fields.states || []).slice().reverse().map(([t, s]) =>
    el("li", { "data-state": s }, el("time", {}, clock(t)), el("span", { class: "state", "data-state": s }, s))));
  const events = $("events");
  events.replaceChildren(...(fields.events || []).slice().reverse().map(([t, text]) =>
    el("li", {}, el("time", {}, clock(t)), text)));
  if (!events.children.length) events.append(el("li", { class: "muted" }, "none"));
}

const observer = new IntersectionObserver((entries) => {
  for (const e of entries) {
    const fam = families.find((f) => f.section === e.target);
    if (fam) { fam.visible = e.isIntersecting; if (fam.visible) drawChart(fam); }
  }
});

function build(full) {
  observer.disconnect();
  byKey.clear();
  families = full.families.map((f) => {
    const fam = { name: f.name, help: f.help, kind: f.kind, unit: f.unit, series: [], visible: false };
    for (const s of f.series) {
      const pts = s.history.map(([dt, v]) => [full.at + dt, v]);
      const ser = { key: s.key, labels: s.labels, value: s.value, rate: s.rate, plotted: s.plotted, pts, fam };
      fam.series.push(ser);
      byKey.set(s.key, ser);
    }
    return fam;
  });
  const sections = families.map((fam) => {
    const head = el("h3", {}, fam.name, " ", el("span", { class: "unit" }, fam.unit ? "(" + fam.unit + ")" : ""));
    const section = el("section", { class: "family", "data-family": fam.name }, head, el("p", { class: "help" }, fam.help || ""));
    const plotted = fam.series.some((s) => s.plotted !== null || s.pts.length);
    if (plotted) {
      fam.chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
      section.append(fam.chart);
    }
    const table = el("table", { class: "series" },
      el("tr", {}, el("th", {}, "labels"), el("th", {}, "value"), el("th", {}, fam.kind === "counter" ? "rate" : "")));
    fam.series.forEach((s, i) => {
      const value = el("td", { class: "num value", "data-key": s.key });
      const rate = el("td", { class: "num rate" });
      const lab = el("td", { class: i < MAX_LINES && fam.chart ? "key" + i : "" }, labelText(s.labels) || "(no labels)");
      s.cells = { value, rate };
      table.append(el("tr", {}, lab, value, rate));
      showValue(s);
    });
    section.append(table);
    fam.section = section;
    return section;
  });
  $("families").replaceChildren(...sections);
  for (const fam of families) observer.observe(fam.section);
}

function showValue(s) {
  s.cells.value.dataset.value = s.value === null ? "" : String(s.value);
  setText(s.cells.value, fmt(s.value, valueUnit(s.fam)));
  setText(s.cells.rate, s.fam.kind === "counter" ? fmt(s.rate, s.fam.unit) : "");
}

function drawChart(fam) {
  if (!fam.chart) return;
  const lines = fam.series.slice(0, MAX_LINES);
  // The x axis spans the seconds there are (at least a minute, at most the window).
  let oldest = at;
  for (const s of lines) for (const [x, y] of s.pts) if (y !== null) { oldest = Math.min(oldest, x); break; }
  const x0 = Math.max(at - window_, Math.min(oldest, at - 60)), x1 = at;
  let lo = Infinity, hi = -Infinity;
  for (const s of lines) for (const [x, y] of s.pts) if (x >= x0 && y !== null) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
  const parts = [];
  const plotW = W - LEFT, plotH = H - BOTTOM;
  if (lo <= hi) {
    if (lo === hi) { lo -= Math.abs(lo) * 0.05 || 1; hi += Math.abs(hi) * 0.05 || 1; }
    lines.forEach((s, i) => {
      const pts = s.pts.filter(([x]) => x >= x0);
      // One scale for the whole chart.
      const d = scaled(pts, x0, x1, lo, hi, plotW, plotH);
      const path = svg("path", { class: "s" + i, d, transform: `translate(${LEFT} 0)` });
      parts.push(path);
    });
  }
  const axis = (x1_, y1, x2, y2) => svg("line", { class: "axis", x1: x1_, y1, x2, y2 });
  parts.push(axis(LEFT, 0, LEFT, plotH), axis(LEFT, plotH, W, plotH));
  const text = (x, y, s, anchor = "start") => { const t = svg("text", { x, y, "text-anchor": anchor }); t.textContent = s; return t; };
  if (lo <= hi) {
    const unit = fam.unit;
    parts.push(text(LEFT - 4, 10, fmt(hi, unit), "end"), text(LEFT - 4, plotH, fmt(lo, unit), "end"),
      text(LEFT - 4, plotH / 2 + 4, fmt((lo + hi) / 2, unit), "end"));
  } else {
    parts.push(text(LEFT + 8, plotH / 2, "no values yet"));
  }
  const t1 = fields_t(at), t0 = t1 - (x1 - x0);
  parts.push(text(LEFT, H - 4, clock(t0)), text(LEFT + plotW / 2, H - 4, clock((t0 + t1) / 2), "middle"), text(W, H - 4, clock(t1) + " (now)", "end"));
  fam.chart.replaceChildren(...parts);
  fam.chart.dataset.points = String(lines.reduce((n, s) => n + s.pts.filter(([x, y]) => x >= x0 && y !== null).length, 0));
}

let baseT = 0, baseAt = 0;
function fields_t(sec) { return baseT + (sec - baseAt); }

function scaled(pts, x0, x1, lo, hi, w, h) {
  const sx = w / Math.max(1, x1 - x0), sy = (h - 2) / (hi - lo);
  let d = "", pen = false, last = null;
  for (const [x, y] of pts) {
    if (y === null || (last !== null && x - last > 15)) pen = false;
    last = x;
    if (y === null) continue;
    d += (pen ? "L" : "M") + ((x - x0) * sx).toFixed(1) + " " + (h - 1 - (y - lo) * sy).toFixed(1);
    pen = true;
  }
  return d;
}

function onFull(full) {
  measured("telemon:full", () => {
    at = full.at; window_ = full.window; tOffset = full.t - Date.now() / 1000;
    baseT = full.t; baseAt = full.at;
    fields = full;
    showFields();
    build(full);
  });
  document.body.dataset.ready = "1";
  document.body.dataset.at = String(at);
}

function onDelta(d) {
  if (!d.t || d.at <= at) return;
  measured("telemon:update", () => {
    at = d.at; tOffset = d.t - Date.now() / 1000;
    baseT = d.t; baseAt = d.at;
    for (const [key, value, rate, plotted] of d.values || []) {
      const s = byKey.get(key);
      if (!s) continue;
      s.value = value; s.rate = rate; s.plotted = plotted;
      showValue(s);
    }
    const keep = at - window_;
    for (const s of byKey.values()) {
      s.pts.push([at, s.plotted]);
      while (s.pts.length && s.pts[0][0] < keep) s.pts.shift();
    }
    if (d.fields && Object.keys(d.fields).length) Object.assign(fields, d.fields);
    showFields();
    for (const fam of families) if (fam.visible) drawChart(fam);
  });
  document.body.dataset.at = String(at);
}

function onGone() {
  fields = Object.assign(fields, { state: "gone" });
  $("families").replaceChildren(el("p", { class: "gone" }, "This target is not in the fleet (now)."));
  const st = $("state");
  st.dataset.state = "down";
  setText(st, "not in the fleet");
  document.body.dataset.ready = "1";
}

follow("/api/v1/stream?target=" + encodeURIComponent(name), { full: onFull, delta: onDelta, gone: onGone }, $("live"));
