// Shared by the fleet page and the target page: DOM helpers (text only: nothing from a target is ever
// parsed as HTML), number formats, SVG paths and the live stream with its reconnection.

export const SVG = "http://www.w3.org/2000/svg";

/** An element with attributes and children; strings become text nodes. */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

/** An SVG element with attributes. */
export function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

/** Sets an element's text if it changed (no layout work otherwise). */
export function setText(e, text) {
  if (e.textContent !== text) e.textContent = text;
}

const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
const BIN = [[2 ** 40, "TiB"], [2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];

function short(v) {
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1000) return String(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 0.01 || a === 0) return v.toFixed(2);
  return v.toExponential(1);
}

/** A value with its unit, for people: `1.2 MiB`, `34%`, `5.6k/s`. */
export function fmt(v, unit = "") {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (unit === "ratio") return short(v * 100) + "%";
  if (unit === "B" || unit === "B/s") {
    const per = unit === "B/s" ? "/s" : "";
    for (const [d, p] of BIN) if (Math.abs(v) >= d) return short(v / d) + " " + p + per;
    return short(v) + " B" + per;
  }
  if (unit === "s" || unit === "s/s") {
    const per = unit === "s/s" ? "/s" : "";
    if (Math.abs(v) < 1 && v !== 0) return short(v * 1000) + " ms" + per;
    return short(v) + " s" + per;
  }
  for (const [d, p] of SI) if (Math.abs(v) >= d) return short(v / d) + p + unit;
  return short(v) + unit;
}

/** `3m 12s`: a duration in seconds, for people. */
export function ago(secs) {
  secs = Math.max(0, Math.floor(secs));
  if (secs < 60) return secs + "s";
  if (secs < 3600) return Math.floor(secs / 60) + "m " + (secs % 60) + "s";
  if (secs < 86400) return Math.floor(secs / 3600) + "h " + Math.floor((secs % 3600) / 60) + "m";
  return Math.floor(secs / 86400) + "d " + Math.floor((secs % 86400) / 3600) + "h";
}

/** `14:03:07`: a Unix time as local clock time. */
export function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour12: false });
}

/**
 * An SVG path through `points` ([x, y] with y possibly null: a gap), scaled into w×h (y up), and the
 * y range used. Returns { d, lo, hi, n } (n: points drawn).
 */
export function pathOf(points, x0, x1, w, h, pad = 1) {
  let lo = Infinity, hi = -Infinity, n = 0;
  for (const [, y] of points) if (y !== null && Number.isFinite(y)) { lo = Math.min(lo, y); hi = Math.max(hi, y); n++; }
  if (n === 0) return { d: "", lo: 0, hi: 0, n };
  if (hi === lo) { hi += Math.abs(hi) * 0.05 || 1; lo -= Math.abs(lo) * 0.05 || 0; }
  const sx = w / Math.max(1, x1 - x0), sy = (h - 2 * pad) / (hi - lo);
  let d = "", pen = false;
  for (const [x, y] of points) {
    if (y === null || !Number.isFinite(y)) { pen = false; continue; }
    const px = ((x - x0) * sx).toFixed(1), py = (h - pad - (y - lo) * sy).toFixed(1);
    d += (pen ? "L" : "M") + px + " " + py;
    pen = true;
  }
  return { d, lo, hi, n };
}

/**
 * Follows an SSE stream: `handlers` by event name. Says on `badge` whether the stream is live, and
 * reconnects by itself (EventSource retries; a stream that closed for good is opened again).
 */
export function follow(url, handlers, badge) {
  let es = null;
  let lostAt = null;
  const say = (state, text) => { badge.dataset.live = state; setText(badge, text); };
  const open = () => {
    es = new EventSource(url);
    es.onopen = () => { lostAt = null; say("live", "live"); };
    es.onerror = () => {
      if (lostAt === null) lostAt = Date.now() / 1000;
      say("lost", "stream lost at " + clock(lostAt) + ": reconnecting…");
      if (es.readyState === EventSource.CLOSED) setTimeout(open, 2000);
    };
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (ev) => {
        let data;
        try { data = JSON.parse(ev.data); } catch (e) { console.warn("bad event", e); return; }
        fn(data);
      });
    }
  };
  open();
  return () => es && es.close();
}

/** Marks the time an update took (`performance.measure`, for the browser tests and the curious). */
export function measured(name, fn) {
  const start = performance.now();
  try { return fn(); } finally { performance.measure(name, { start, end: performance.now() }); }
}
