// A target's page (`/target/NAME`): every series grouped by family, charts of the last minutes, events and
// state history, kept live by /api/v1/stream?target=NAME.
import { el, svg, setText, fmt, ago, clock, follow, measured } from "./common.js";

const name = decodeURIComponent(location.pathname.slice("/target/".length));
const api = "/api/v1/targets/" + encodeURIComponent(name);
const MAX_LINES = 6;   // lines per chart (the rest are in the family's table)
const MAX_CHARTS = 6;  // charts per family
const SCALE = 10;      // a chart's largest line is at most this many times its smallest (non-zero) one
const QUANTILES = ["p50", "p90", "p99"]; // what a histogram's `plotted` holds, in order
const W = 900, H = 180, LEFT = 64, BOTTOM = 18;
// Labels in order, numbers as numbers: channel 8 before channel 13.
const collator = new Intl.Collator(undefined, { numeric: true });

let at = 0, window_ = 600, tOffset = 0, bound = 0;
let fields = {};
let families = [];            // [{name, help, kind, unit, series: [s], section, charts: [chart], visible}]
const byKey = new Map();      // key -> series {key, labels, labelText, value, rate, plotted, bound, pts, cells, fam}

const $ = (id) => document.getElementById(id);
document.title = "telemon: " + name;
setText($("name"), name);
$("metrics").href = api + "/metrics";
$("json").href = api;

function now() { return Date.now() / 1000 + tOffset; }

function labelText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => k + "=" + v).join(", ");
}

/** The unit of a series' value (a counter's count, a histogram's count of observations, have none). */
function valueUnit(fam) {
  return fam.kind === "gauge" ? fam.unit : "";
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
  showEmpty();
}

/** A target with no series says why: down (since when, and its error), connecting, or sending none. */
function showEmpty() {
  if (families.length || fields.state === "gone") return;
  let text;
  if (fields.state === "down") {
    text = "No series: the target is down" + (fields.since ? " since " + clock(fields.since) : "") +
      (fields.last_error ? " (" + fields.last_error + ")" : "") + ".";
  } else if (fields.state === "connecting") {
    text = "No series yet: connecting to the target.";
  } else {
    text = "No series: the target sends none (yet).";
  }
  const shown = $("families").querySelector(".empty");
  if (shown) setText(shown, text);
  else $("families").replaceChildren(el("p", { class: "empty" }, text));
}

const observer = new IntersectionObserver((entries) => {
  for (const e of entries) {
    const fam = families.find((f) => f.section === e.target);
    if (fam) { fam.visible = e.isIntersecting; if (fam.visible) drawCharts(fam); }
  }
});

/** The largest absolute value a series plots (its history and now), or null when it has none. */
function magnitude(s) {
  let m = null;
  const see = (y) => { if (y !== null && Number.isFinite(y)) m = Math.max(m ?? 0, Math.abs(y)); };
  for (const [, y] of s.pts) see(y);
  see(s.plotted);
  return m;
}

/**
 * A family's charts: each of one scale (its largest line at most SCALE times its smallest, lines at 0
 * or with no values yet drawn with the smallest), the largest first; a histogram's are one per series,
 * with a line per quantile.
 */
function chartsOf(fam) {
  if (fam.kind === "histogram") {
    return fam.series.slice(0, MAX_CHARTS).map((s) => ({
      title: s.labelText,
      lines: QUANTILES.map((q, i) => ({ s, i, label: q })),
    }));
  }
  const shown = fam.series.filter((s) => s.plotted !== null || s.pts.length || s.bound);
  const sized = shown.map((s) => [magnitude(s), s]).sort((a, b) => (b[0] ?? -1) - (a[0] ?? -1));
  const groups = [];
  for (const [m, s] of sized) {
    const last = groups[groups.length - 1];
    if (last && (m === null || m === 0 || last.top <= m * SCALE)) last.series.push(s);
    else groups.push({ top: m ?? 0, series: [s] });
  }
  return groups.slice(0, MAX_CHARTS).map((g) => ({
    title: "",
    lines: g.series.slice(0, MAX_LINES).map((s) => ({ s, i: null, label: s.labelText || "(no labels)" })),
    more: g.series.length - MAX_LINES,
  }));
}

/** The value a line plots at a point: a number, or one quantile of a histogram's. */
function yOf(line, y) {
  if (line.i === null) return y;
  return Array.isArray(y) ? y[line.i] : null;
}

function build(full) {
  observer.disconnect();
  byKey.clear();
  families = full.families.map((f) => {
    const fam = { name: f.name, help: f.help, kind: f.kind, unit: f.unit, series: [], charts: [], visible: false };
    for (const s of f.series) {
      const pts = s.history.map(([dt, v]) => [full.at + dt, v]);
      const ser = { key: s.key, labels: s.labels, labelText: labelText(s.labels), value: s.value, rate: s.rate,
        plotted: s.plotted, bound: s.bound, pts, fam };
      fam.series.push(ser);
      byKey.set(s.key, ser);
    }
    fam.series.sort((a, b) => collator.compare(a.labelText, b.labelText));
    return fam;
  });
  const sections = families.map((fam) => {
    const head = el("h3", {}, fam.name, " ", el("span", { class: "unit" }, fam.unit ? "(" + fam.unit + ")" : ""));
    const section = el("section", { class: "family", "data-family": fam.name }, head, el("p", { class: "help" }, fam.help || ""));
    const unrecorded = fam.series.filter((s) => s.bound).length;
    if (unrecorded) {
      section.append(el("p", { class: "note" }, unrecorded + (unrecorded === 1 ? " series has" : " series have") +
        " no history: the history keeps at most " + bound.toLocaleString("en") +
        " series across the fleet, and holds that many. Drawn from when this page opened."));
    }
    const charts = el("div", { class: "charts" });
    for (const c of chartsOf(fam)) {
      c.svg = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
      const legend = el("div", { class: "legend" }, ...c.lines.map((l, i) => el("span", { class: "key" + i }, l.label)));
      if (c.more > 0) legend.append(el("span", { class: "muted" }, "+" + c.more + " more in the table"));
      charts.append(el("figure", { class: "plot" }, c.title ? el("figcaption", {}, c.title) : "", c.svg, legend));
      fam.charts.push(c);
    }
    if (fam.charts.length) section.append(charts);
    const third = fam.kind === "counter" ? "rate" : fam.kind === "histogram" ? QUANTILES.join(" · ") + " (last change)" : "";
    const table = el("table", { class: "series" },
      el("tr", {}, el("th", {}, "labels"), el("th", {}, fam.kind === "histogram" ? "observations" : "value"), el("th", {}, third)));
    for (const s of fam.series) {
      const value = el("td", { class: "num value", "data-key": s.key });
      const rate = el("td", { class: "num rate" });
      const lab = el("td", { class: "labels" }, s.labelText || "(no labels)");
      if (s.bound) lab.append(el("span", { class: "muted" }, " · no history (bound)"));
      s.cells = { value, rate };
      table.append(el("tr", {}, lab, value, rate));
      showValue(s);
    }
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
  let third = "";
  if (s.fam.kind === "counter") third = fmt(s.rate, s.fam.unit);
  else if (s.fam.kind === "histogram") third = QUANTILES.map((_, i) => fmt(yOf({ i }, s.plotted), s.fam.unit)).join(" · ");
  setText(s.cells.rate, third);
}

function drawCharts(fam) {
  for (const c of fam.charts) drawChart(c, fam.unit);
}

function drawChart(chart, unit) {
  const lines = chart.lines;
  // The x axis spans the seconds there are (at least a minute, at most the window).
  let oldest = at;
  for (const l of lines) for (const [x, y] of l.s.pts) if (yOf(l, y) !== null) { oldest = Math.min(oldest, x); break; }
  const x0 = Math.max(at - window_, Math.min(oldest, at - 60)), x1 = at;
  let lo = Infinity, hi = -Infinity, points = 0;
  for (const l of lines) {
    for (const [x, p] of l.s.pts) {
      const y = yOf(l, p);
      if (x >= x0 && y !== null) { lo = Math.min(lo, y); hi = Math.max(hi, y); points++; }
    }
  }
  const parts = [];
  const plotW = W - LEFT, plotH = H - BOTTOM;
  if (lo <= hi) {
    if (lo === hi) { lo -= Math.abs(lo) * 0.05 || 1; hi += Math.abs(hi) * 0.05 || 1; }
    lines.forEach((l, i) => {
      // One scale for the whole chart.
      const pts = l.s.pts.filter(([x]) => x >= x0).map(([x, y]) => [x, yOf(l, y)]);
      parts.push(svg("path", { class: "s" + i, d: scaled(pts, x0, x1, lo, hi, plotW, plotH), transform: `translate(${LEFT} 0)` }));
    });
  }
  const axis = (x1_, y1, x2, y2) => svg("line", { class: "axis", x1: x1_, y1, x2, y2 });
  parts.push(axis(LEFT, 0, LEFT, plotH), axis(LEFT, plotH, W, plotH));
  const text = (x, y, s, anchor = "start") => { const t = svg("text", { x, y, "text-anchor": anchor }); t.textContent = s; return t; };
  if (lo <= hi) {
    parts.push(text(LEFT - 4, 10, fmt(hi, unit), "end"), text(LEFT - 4, plotH, fmt(lo, unit), "end"),
      text(LEFT - 4, plotH / 2 + 4, fmt((lo + hi) / 2, unit), "end"));
  } else if (lines.some((l) => l.s.bound)) {
    parts.push(text(LEFT + 8, plotH / 2, "no history (the history's bound): drawn from when this page opened"));
  } else {
    parts.push(text(LEFT + 8, plotH / 2, lines.some((l) => l.i !== null) ? "no observations yet" : "no values yet"));
  }
  const t1 = fields_t(at), t0 = t1 - (x1 - x0);
  parts.push(text(LEFT, H - 4, clock(t0)), text(LEFT + plotW / 2, H - 4, clock((t0 + t1) / 2), "middle"), text(W, H - 4, clock(t1) + " (now)", "end"));
  chart.svg.replaceChildren(...parts);
  chart.svg.dataset.points = String(points);
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
    baseT = full.t; baseAt = full.at; bound = full.history_bound || 0;
    fields = full;
    build(full);
    showFields();
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
    for (const fam of families) if (fam.visible) drawCharts(fam);
  });
  document.body.dataset.at = String(at);
}

function onGone() {
  fields = Object.assign(fields, { state: "gone" });
  families = [];
  $("families").replaceChildren(el("p", { class: "gone" }, "This target is not in the fleet (now)."));
  const st = $("state");
  st.dataset.state = "down";
  setText(st, "not in the fleet");
  document.body.dataset.ready = "1";
}

follow("/api/v1/stream?target=" + encodeURIComponent(name), { full: onFull, delta: onDelta, gone: onGone }, $("live"));
