//! The right pane, per protocol: each picks the series its users look at first.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Bar, BarChart, BarGroup, Block, Chart, Dataset, GraphType, Paragraph, Row, Table,
};
use ratatui::Frame;

use super::fmt_secs;
use super::history::{key, History, Point};
use telemon_fleet::{MetricKind, SeriesRef, TargetSnapshot, ValueRef};

/// What a view draws from.
pub(super) struct Ctx<'a> {
    pub t: &'a TargetSnapshot,
    pub history: &'a History,
    pub window: u32,
    pub scroll: usize,
}

impl<'a> Ctx<'a> {
    fn series<'f>(&self, family: &'f str) -> impl Iterator<Item = SeriesRef<'a>> + use<'a, 'f> {
        self.t.series.family(family)
    }

    fn one(&self, family: &str) -> Option<SeriesRef<'a>> {
        self.series(family).next()
    }

    fn labelled(&self, family: &str, name: &str, value: &str) -> Option<SeriesRef<'a>> {
        self.series(family).find(|s| s.labels().get(name).as_deref() == Some(value))
    }

    fn points(&self, s: &SeriesRef) -> Vec<Point> {
        self.history.points(self.t, &key(s), self.window)
    }
}

/// How a protocol's pane is drawn.
type Pane = fn(&mut Frame, Rect, &Ctx);

/// The panes of the built-in protocols, by name: each picks the series its users look at first. A
/// protocol without one of its own (added by a program) gets [`every_series`].
const PANES: [(&str, Pane); 5] =
    [("meter161", meter161), ("hmon", hmon), ("mono", mono), ("smon", smon), ("sysinfo", sysinfo)];

/// Draws the selected target's pane.
pub(super) fn draw(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let protocol = ctx.t.protocol.as_str();
    let pane =
        PANES.iter().find(|(name, _)| *name == protocol).map_or(every_series as Pane, |(_, pane)| *pane);
    pane(f, area, ctx);
}

/// A target of a protocol with no pane of its own: every series it has, with its sparkline.
fn every_series(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let rows = ctx
        .t
        .series
        .iter()
        .filter(|s| crate::history::plotted(s).is_some())
        .map(|s| {
            let label = if s.label_text().is_empty() {
                s.family().to_owned()
            } else {
                format!("{}{{{}}}", s.family(), s.label_text())
            };
            let now = crate::history::plotted(&s).map_or("…".to_owned(), si);
            (label, now, ctx.points(&s))
        })
        .collect();
    spark_table(f, area, rows, ctx.window, ctx.scroll);
}

/// `1.23k`, `45.6M`: a number in SI prefixes.
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (d, p) = match a {
        a if a >= 1e12 => (1e12, "T"),
        a if a >= 1e9 => (1e9, "G"),
        a if a >= 1e6 => (1e6, "M"),
        a if a >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let x = v / d;
    if p.is_empty() && x.fract() == 0.0 {
        format!("{x}")
    } else if x.abs() >= 100.0 {
        format!("{x:.0}{p}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}{p}")
    } else {
        format!("{x:.2}{p}")
    }
}

/// `1.5 MiB`: bytes in binary prefixes.
pub fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut u = 0;
    while x.abs() >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{x:.0} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// A sparkline as text, `width` columns over the window: each column the highest point in it.
pub fn spark(points: &[Point], window: u32, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if width == 0 {
        return String::new();
    }
    let mut cols: Vec<Option<f64>> = vec![None; width];
    for &(t, v) in points {
        // t runs from -window to 0.
        let i = (((t + f64::from(window)) / f64::from(window.max(1))) * (width as f64 - 1.0)).round();
        if let Some(c) = cols.get_mut(i.clamp(0.0, width as f64 - 1.0) as usize) {
            *c = Some(c.map_or(v, |c: f64| c.max(v)));
        }
    }
    let (lo, hi) =
        points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, v)| (lo.min(v), hi.max(v)));
    cols.iter()
        .map(|c| match c {
            None => ' ',
            Some(_) if hi <= lo => BARS[0],
            Some(v) => BARS[(((v - lo) / (hi - lo)) * 7.0).round().clamp(0.0, 7.0) as usize],
        })
        .collect()
}

/// The time axis of a window: `-60s`, `-30s`, `now`.
pub fn time_labels(window: u32) -> [String; 3] {
    [format!("-{}", fmt_secs(window)), format!("-{}", fmt_secs(window / 2)), "now".to_owned()]
}

/// A line chart of `lines` over the window, with the time axis and the y range labelled by `fmt`.
fn chart(
    f: &mut Frame,
    area: Rect,
    title: &str,
    lines: &[(&str, Color, Vec<Point>)],
    window: u32,
    fmt: fn(f64) -> String,
) {
    let hi = lines.iter().flat_map(|(_, _, p)| p.iter().map(|&(_, v)| v)).fold(0.0f64, f64::max);
    let hi = if hi > 0.0 { hi * 1.1 } else { 1.0 };
    let datasets: Vec<Dataset> = lines
        .iter()
        .map(|(name, color, points)| {
            Dataset::default()
                .name(name.to_string())
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(*color))
                .data(points)
        })
        .collect();
    let [a, b, c] = time_labels(window);
    // The legend is the title: the series names in their colours.
    let mut spans = vec![Span::styled(format!("{title}: "), Style::new().add_modifier(Modifier::BOLD))];
    for (i, (name, color, _)) in lines.iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(", "));
        }
        spans.push(Span::styled(name.to_string(), Style::new().fg(*color).add_modifier(Modifier::BOLD)));
    }
    let chart = Chart::new(datasets)
        .block(Block::new().title(Line::from(spans)))
        .x_axis(Axis::default().bounds([-f64::from(window), 0.0]).labels([a, b, c]))
        .y_axis(Axis::default().bounds([0.0, hi]).labels(["0".to_owned(), fmt(hi / 1.1)]))
        .legend_position(None);
    f.render_widget(chart, area);
}

/// A table of `(label, current value, points)` rows with a sparkline column.
fn spark_table(
    f: &mut Frame,
    area: Rect,
    rows: Vec<(String, String, Vec<Point>)>,
    window: u32,
    scroll: usize,
) {
    let label_w = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(5).clamp(5, 36) as u16;
    let value_w = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(5).clamp(5, 14) as u16;
    let spark_w = area.width.saturating_sub(label_w + value_w + 2) as usize;
    let visible = area.height.saturating_sub(1) as usize;
    let scroll = scroll.min(rows.len().saturating_sub(visible));
    let body: Vec<Row> = rows
        .into_iter()
        .skip(scroll)
        .map(|(l, v, p)| Row::new(vec![l, v, spark(&p, window, spark_w)]))
        .collect();
    let header = Row::new(vec!["".to_owned(), "now".to_owned(), format!("last {}", fmt_secs(window))])
        .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [Constraint::Length(label_w), Constraint::Length(value_w), Constraint::Min(0)];
    f.render_widget(Table::new(body, widths).header(header), area);
}

fn meter161(f: &mut Frame, area: Rect, ctx: &Ctx) {
    // The table below takes what its rows need (up to 8 and a header); the chart the rest.
    let [top, rest] = Layout::vertical([Constraint::Min(6), Constraint::Length(9)]).areas(area);
    let line = |family: &str| ctx.one(family).map(|s| ctx.points(&s)).unwrap_or_default();
    chart(
        f,
        top,
        "instructions/s",
        &[
            ("kernel", Color::Red, line("sys161_kernel_instructions_total")),
            ("user", Color::Green, line("sys161_user_instructions_total")),
        ],
        ctx.window,
        si,
    );
    let mut rows = Vec::new();
    for (label, family) in [
        ("kernel insns/s", "sys161_kernel_instructions_total"),
        ("user insns/s", "sys161_user_instructions_total"),
        ("idle cycles/s", "sys161_idle_cycles_total"),
        ("interrupts/s", "sys161_interrupts_total"),
        ("exceptions/s", "sys161_exceptions_total"),
        ("disk blocks/s", "sys161_disk_blocks_total"),
        ("console chars/s", "sys161_console_chars_total"),
        ("sim s / wall s", "sys161_simulated_seconds_total"),
    ] {
        if let Some(s) = ctx.one(family) {
            let now = s.rate().map_or("…".to_owned(), si);
            rows.push((label.to_owned(), now, ctx.points(&s)));
        }
    }
    spark_table(f, rest, rows, ctx.window, ctx.scroll);
}

fn hmon(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let events = ctx.t.events.len().min(8).min(usize::from(area.height / 4)) as u16;
    let [top, mid, bottom] =
        Layout::vertical([Constraint::Percentage(40), Constraint::Min(4), Constraint::Length(events + 1)])
            .areas(area);
    let line = |family: &str| ctx.one(family).map(|s| ctx.points(&s)).unwrap_or_default();
    chart(
        f,
        top,
        "workspace",
        &[
            ("used", Color::Red, line("dyalog_workspace_used_bytes")),
            ("available", Color::Green, line("dyalog_workspace_available_bytes")),
        ],
        ctx.window,
        bytes,
    );
    let mut rows = Vec::new();
    let mut push = |label: &str, s: Option<SeriesRef>, fmt: fn(f64) -> String| {
        if let Some(s) = s {
            let now = match s.kind() {
                MetricKind::Counter => {
                    format!("{} ({}/s)", si(s.number().unwrap_or(0.0)), s.rate().map_or("…".into(), si))
                }
                _ => s.number().map_or("-".into(), fmt),
            };
            rows.push((label.to_owned(), now, ctx.points(&s)));
        }
    };
    push("used", ctx.one("dyalog_workspace_used_bytes"), bytes);
    push("available", ctx.one("dyalog_workspace_available_bytes"), bytes);
    push("compactions", ctx.one("dyalog_workspace_compactions_total"), si);
    push("GCs", ctx.one("dyalog_workspace_garbage_collections_total"), si);
    push("threads", ctx.labelled("dyalog_threads", "state", "total"), si);
    push("suspended", ctx.labelled("dyalog_threads", "state", "suspended"), si);
    if let Some(info) = ctx.one("dyalog_interpreter_info") {
        let version = info.label("version");
        let wsid = info.label("wsid");
        rows.insert(0, ("interpreter".to_owned(), format!("{version} {wsid}"), Vec::new()));
    }
    spark_table(f, mid, rows, ctx.window, ctx.scroll);
    let mut lines = vec![Line::from(Span::styled("last events", Style::new().add_modifier(Modifier::BOLD)))];
    for e in ctx.t.events.iter().rev().take(events as usize) {
        let at = clock(e.at);
        let style =
            if e.text.starts_with("UntrappedSignal") { Style::new().fg(Color::Red) } else { Style::new() };
        lines.push(Line::from(vec![Span::raw(format!("{at} ")), Span::styled(e.text.to_string(), style)]));
    }
    if ctx.t.events.is_empty() {
        lines.push(Line::from("(none yet)"));
    }
    f.render_widget(Paragraph::new(lines), bottom);
}

/// `HH:MM:SS` (UTC) of a time.
fn clock(at: std::time::SystemTime) -> String {
    let s = at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

fn mono(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let mut rows: Vec<(String, String, Vec<Point>)> = ctx
        .t
        .series
        .iter()
        .filter(|s| s.family().starts_with("mono_runtime"))
        .map(|s| {
            let name = format!("{}/{}", s.label("category"), s.label("counter"));
            let v = s.number().unwrap_or(0.0);
            let fmt: fn(f64) -> String = match s.family() {
                f if f.starts_with("mono_runtime_bytes") => bytes,
                f if f.starts_with("mono_runtime_seconds") => |v| format!("{v:.3} s"),
                "mono_runtime_ratio" => |v| format!("{:.1}%", v * 100.0),
                _ => si,
            };
            let now = match (s.kind(), s.rate()) {
                (MetricKind::Counter, Some(r)) => format!("{}/s", fmt(r)),
                (MetricKind::Counter, None) => format!("{} (…/s)", fmt(v)),
                _ => fmt(v),
            };
            (name, now, ctx.points(&s))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut area = area;
    if let Some(info) = ctx.one("mono_agent_info") {
        let [head, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
        let text = format!("agent protocol {}, {} counters", info.label("version"), info.label("counters"));
        f.render_widget(Paragraph::new(text), head);
        area = rest;
    }
    spark_table(f, area, rows, ctx.window, ctx.scroll);
}

fn smon(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let values: Vec<SeriesRef> = ctx.series("smon_value").collect();
    let groups_len = {
        let mut names: Vec<Cow<str>> =
            values.iter().filter(|s| !s.label("index").is_empty()).map(|s| s.label("name")).collect();
        names.dedup();
        names.len().min(8) as u16
    };
    let [top, bottom] =
        Layout::vertical([Constraint::Min(4), Constraint::Length(groups_len + 1)]).areas(area);
    // The values that moved most in the window first.
    let mut moving: Vec<(f64, SeriesRef)> =
        values.iter().map(|s| (ctx.history.movement(ctx.t, &key(s), ctx.window), *s)).collect();
    moving.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| key(&a.1).cmp(&key(&b.1))));
    let rows = moving
        .iter()
        .map(|(_, s)| {
            let index = s.label("index");
            let name = if index.is_empty() {
                s.label("name").into_owned()
            } else {
                format!("{}[{index}]", s.label("name"))
            };
            (name, si(s.number().unwrap_or(0.0)), ctx.points(s))
        })
        .collect();
    spark_table(f, top, rows, ctx.window, ctx.scroll);
    // Per-index groups (per CPU, per disk...): one line per name.
    let mut groups: BTreeMap<Cow<str>, Vec<String>> = BTreeMap::new();
    for s in &values {
        let index = s.label("index");
        if !index.is_empty() {
            groups
                .entry(s.label("name"))
                .or_default()
                .push(format!("{index}:{}", si(s.number().unwrap_or(0.0))));
        }
    }
    let mut lines = vec![Line::from(Span::styled("per index", Style::new().add_modifier(Modifier::BOLD)))];
    for (name, cells) in groups.iter().take(groups_len as usize) {
        lines.push(Line::from(format!("{name}  {}", cells.join("  "))));
    }
    f.render_widget(Paragraph::new(lines), bottom);
}

fn sysinfo(f: &mut Frame, area: Rect, ctx: &Ctx) {
    let [procs, kstat, hist, wd] = Layout::vertical([
        Constraint::Min(4),
        Constraint::Length(2),
        Constraint::Length(7),
        Constraint::Length(1),
    ])
    .areas(area);
    // The process table with a CPU sparkline per process.
    let mut rows: Vec<(u64, Vec<String>, Vec<Point>)> = Vec::new();
    for s in ctx.series("rvos_process_cpu_ratio").filter(|s| s.label("window") == "1s") {
        let (pid, name) = (s.label("pid"), s.label("name"));
        let mem = ctx
            .series("rvos_process_memory_bytes")
            .find(|m| m.label("pid") == pid)
            .and_then(|m| m.number())
            .map_or("-".to_owned(), bytes);
        let state =
            ctx.series("rvos_process_state").find(|m| m.label("pid") == pid).map(|m| m.label("state"));
        let cpu = s.number().unwrap_or(0.0);
        let cells = vec![
            pid.to_string(),
            name.into_owned(),
            state.unwrap_or_default().into_owned(),
            format!("{:.1}%", cpu * 100.0),
            mem,
        ];
        rows.push((pid.parse().unwrap_or(u64::MAX), cells, ctx.points(&s)));
    }
    rows.sort_by_key(|r| r.0);
    let spark_w = procs.width.saturating_sub(5 + 13 + 8 + 7 + 10 + 5) as usize;
    let visible = procs.height.saturating_sub(1) as usize;
    let scroll = ctx.scroll.min(rows.len().saturating_sub(visible));
    let body: Vec<Row> = rows
        .into_iter()
        .skip(scroll)
        .map(|(_, mut cells, p)| {
            cells.push(spark(&p, ctx.window, spark_w));
            Row::new(cells)
        })
        .collect();
    let header = Row::new(vec![
        "PID".to_owned(),
        "NAME".into(),
        "STATE".into(),
        "CPU".into(),
        "MEM".into(),
        format!("CPU last {}", fmt_secs(ctx.window)),
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(4),
        Constraint::Length(12),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Min(0),
    ];
    f.render_widget(Table::new(body, widths).header(header), procs);

    // Kernel counters: the busiest first.
    let mut counters: Vec<(f64, SeriesRef)> =
        ctx.series("rvos_kstat_total").map(|s| (s.rate().unwrap_or(0.0), s)).collect();
    counters.sort_by(|a, b| b.0.total_cmp(&a.0));
    let text: Vec<String> =
        counters.iter().take(6).map(|(r, s)| format!("{} {}/s", s.label("counter"), si(*r))).collect();
    let kstat_lines = vec![
        Line::from(Span::styled("kstat", Style::new().add_modifier(Modifier::BOLD))),
        Line::from(text.join(" · ")),
    ];
    f.render_widget(Paragraph::new(kstat_lines), kstat);

    // The two latency histograms as bars.
    let [left, right] = Layout::horizontal([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(hist);
    histogram(f, left, "sched latency", ctx.one("rvos_scheduler_latency_seconds"));
    histogram(f, right, "IPC latency", ctx.one("rvos_ipc_latency_seconds"));

    let enabled = ctx.one("rvos_watchdog_enabled").and_then(|s| s.number()) == Some(1.0);
    let oldest = ctx
        .series("rvos_watchdog_heartbeat_age_seconds")
        .filter_map(|s| Some((s.number()?, s.label("task"))))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let text = match (enabled, oldest) {
        (false, _) => "watchdog: disabled".to_owned(),
        (true, Some((age, task))) => format!("watchdog: enabled, oldest heartbeat {age:.1} s ago ({task})"),
        (true, None) => "watchdog: enabled".to_owned(),
    };
    f.render_widget(Paragraph::new(text), wd);
}

fn histogram(f: &mut Frame, area: Rect, title: &str, s: Option<SeriesRef>) {
    let block = Block::new().title(Span::styled(title.to_owned(), Style::new().add_modifier(Modifier::BOLD)));
    let Some(ValueRef::Histogram(h)) = s.map(|s| s.value()) else {
        f.render_widget(Paragraph::new("(no data)").block(block), area);
        return;
    };
    // Per-bucket counts from the cumulative ones, over the non-empty range.
    let mut prev = 0;
    let counts: Vec<(f64, u64)> = h
        .bounds
        .iter()
        .zip(h.counts.iter())
        .map(|(&le, &c)| {
            let n = c.saturating_sub(prev);
            prev = c;
            (le, n)
        })
        .collect();
    let first = counts.iter().position(|c| c.1 > 0);
    let last = counts.iter().rposition(|c| c.1 > 0);
    let (Some(first), Some(last)) = (first, last) else {
        f.render_widget(Paragraph::new("(no samples)").block(block), area);
        return;
    };
    let n = (last - first + 1) as u16;
    let width = (area.width.saturating_sub(n) / n.max(1)).clamp(1, 5);
    // Bucket labels only when they fit under their bars; the title gives the range anyway.
    let labelled = width >= 4;
    let bars: Vec<Bar> = counts[first..=last]
        .iter()
        .map(|&(le, n)| {
            let bar = Bar::default().value(n).text_value(String::new());
            if labelled {
                bar.label(Line::from(short_secs(le)))
            } else {
                bar
            }
        })
        .collect();
    let lo = if first == 0 { 0.0 } else { counts[first - 1].0 };
    let title = format!("{title} {}–{}", short_secs(lo), short_secs(counts[last].0));
    let block = Block::new().title(Span::styled(title, Style::new().add_modifier(Modifier::BOLD)));
    let chart =
        BarChart::default().block(block).bar_width(width).bar_gap(1).data(BarGroup::default().bars(&bars));
    f.render_widget(chart, area);
}

/// `3µs`, `13ms`: a latency bound, as short as it goes.
fn short_secs(s: f64) -> String {
    if s == 0.0 {
        "0".to_owned()
    } else if s < 1e-3 {
        format!("{:.0}µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.0}ms", s * 1e3)
    } else {
        format!("{s:.0}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_sparklines_for_people() {
        assert_eq!(si(950.0), "950");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(2_500_000.0), "2.50M");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(10.0), "10 B");
        assert_eq!(time_labels(60), ["-60s", "-30s", "now"]);
        assert_eq!(time_labels(600), ["-10m", "-5m", "now"]);
        let points: Vec<Point> = (0..=10).map(|i| (f64::from(i) - 10.0, f64::from(i))).collect();
        let s = spark(&points, 10, 11);
        assert_eq!(s.chars().count(), 11);
        assert!(s.starts_with('▁') && s.ends_with('█'), "{s}");
        assert_eq!(spark(&[], 10, 4), "    ");
    }
}
