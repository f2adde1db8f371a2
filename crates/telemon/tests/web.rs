//! The web view (`/` and `/target/NAME` of `telemon serve`) in a real headless Chromium, driven over
//! WebDriver by its own chromedriver:
//!
//! - over the five sims: every row up; a stopped smon sim's row turns down without a reload and up again
//!   after its restart; sparklines gain points; a protocol filter and a search narrow the rows; a target
//!   page's values equal `/metrics`; its chart has points; a lost stream is said on the page and comes back
//!   by itself;
//! - hostile text (a config target name, a label value, a dial-in Mono agent's target name, an HMON user
//!   message) shows as text: no element is made of it, no dialog opens, and the console holds no error;
//! - 1,000 targets: `/` draws its first rows, each live update's main-thread time (the page's own
//!   `performance.measure`), the stream's bytes per second, and telemon's CPU with three views open beside
//!   none (printed; the assertions are generous);
//! - over a made-up fleet: a target page's series in label order (numbers numerically), a chart per scale
//!   (smon's clock apart from its load), a histogram's quantiles drawn, why a down target has no series, and
//!   `/`'s "–" for the figures of a Mono agent with no counters;
//! - screenshots of `/` and a target page, light and dark (`TELEMON_SCREENSHOTS=DIR` writes them there:
//!   `cargo xtask screenshots`).
//!
//! Without `chromium`/`chromedriver` the tests fail under `CI=true` (`.ci/browser.sh` installs them) and
//! elsewhere print SKIPPED. Waits poll under the safety net; nothing asserts how long anything took except
//! where the brief asks for a bound, and then generously.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use telemon::config::Config;
use telemon_fleet::{Fleet, LabelSet, MetricKind, Protocol, Series, SeriesSet, TargetSnapshot, TargetState};

mod support;

use support::browser::{self, need_browser, Browser};
use support::{http_get, until, SimOptions, Sims};

const POLL: Duration = Duration::from_millis(100);
const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>";
const HOSTILE_LISTEN: &str = "<svg onload=alert(2)>";
const HOSTILE_LABEL: &str = "<b onmouseover=alert(3)>b12</b>";
const HOSTILE_EVENT: &str = "<img src=y onerror=alert(4)> & \"quotes\"";

/// Rows of `/` in the DOM: (name, state).
async fn rows(b: &Browser) -> Vec<(String, String)> {
    let v = b.js("return [...document.querySelectorAll('[data-target]')].map(r => [r.dataset.target, r.dataset.state]);").await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned()))
        .collect()
}

async fn state_of(b: &Browser, name: &str) -> Option<String> {
    rows(b).await.into_iter().find(|r| r.0 == name).map(|r| r.1)
}

/// The page's `/metrics` series of `target`, keyed as the page keys them (`family{k=v,...}`).
fn exposition(text: &str, target: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (family, labels) = match series.split_once('{') {
            Some((f, l)) => (f, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut pairs = Vec::new();
        let mut ours = false;
        // Label values here hold no `",` (the sims' series), so a plain split is enough.
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").unwrap();
            let v = v.trim_end_matches('"').replace("\\\"", "\"").replace("\\\\", "\\");
            if k == "target" {
                ours = v == target;
            } else {
                pairs.push(format!("{k}={v}"));
            }
        }
        if ours {
            let key =
                if pairs.is_empty() { family.to_owned() } else { format!("{family}{{{}}}", pairs.join(",")) };
            out.insert(key, value.parse().unwrap_or(f64::NAN));
        }
    }
    out
}

/// `telemon serve`'s config over the sims, with hostile text in a name, a label and a listener's name.
fn config(sims: &Sims) -> Config {
    let toml = sims
        .toml(Some("250ms"))
        .replace("name = \"mono\"", &format!("name = {HOSTILE_LISTEN:?}"))
        .replacen("\n\n[[hmon]]", &format!("\nlabels = {{ room = {HOSTILE_LABEL:?} }}\n\n[[hmon]]"), 1)
        + &format!("\n[[smon]]\nname = {HOSTILE_NAME:?}\nconnect = \"127.0.0.1:1\"\n");
    Config::parse("web.toml", &toml).unwrap_or_else(|e| panic!("{e}\n{toml}"))
}

async fn no_errors(b: &Browser, page: &str) {
    let errors: Vec<_> = b.console().await.into_iter().filter(|(level, _)| level == "SEVERE").collect();
    assert!(errors.is_empty(), "{page}: console errors: {errors:?}");
    assert!(!b.dialog_open().await, "{page}: a dialog opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_and_target_pages_over_the_five_sims() {
    let Some(driver) = need_browser("fleet_and_target_pages_over_the_five_sims") else { return };
    let mut sims = Sims::start(SimOptions::steady()).await;
    sims.start_mono_agent();
    let config = config(&sims);
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let b = Browser::start(&driver, 1400, 900).await;
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    // The console log is read for real: an error logged on purpose is seen.
    b.js("console.error('telemon-probe');").await;
    let seen = b.console().await;
    assert!(seen.iter().any(|(l, m)| l == "SEVERE" && m.contains("telemon-probe")), "{seen:?}");

    // Every row, five up (the hostile smon target has nothing to connect to).
    let mono = until("the Mono agent's row", POLL, async || {
        let rows = rows(&b).await;
        let up = rows.iter().filter(|r| r.1 == "up").count();
        (rows.len() == 6 && up == 5)
            .then(|| rows.iter().find(|r| r.0.starts_with(HOSTILE_LISTEN)).map(|r| r.0.clone()))?
    })
    .await;
    let summary =
        b.js("const s = document.getElementById('summary'); return [s.dataset.up, s.dataset.total];").await;
    assert_eq!(summary, serde_json::json!(["5", "6"]));
    let tti = b
        .js("const m = performance.getEntriesByName('telemon:full')[0]; return m ? m.startTime + m.duration : null;")
        .await;
    eprintln!("web: 6 targets: first rows drawn {tti} ms after navigation");
    assert_eq!(state_of(&b, HOSTILE_NAME).await.as_deref(), Some("down"));

    // Hostile text is text: the names and the label are shown as written, and made no element.
    let shown = b.js("return [...document.querySelectorAll('.row .name a')].map(a => a.textContent);").await;
    for name in [HOSTILE_NAME, mono.as_str()] {
        assert!(shown.as_array().unwrap().iter().any(|n| n == name), "{name} not shown as text: {shown}");
    }
    let labels = b
        .js("return [...document.querySelectorAll('.row .labels')].map(a => a.textContent).join('|');")
        .await;
    assert!(labels.as_str().unwrap().contains(&format!("room={HOSTILE_LABEL}")), "{labels}");
    let made = b
        .js("return document.querySelectorAll('.viewport img, .viewport svg[onload], .viewport b').length;")
        .await;
    assert_eq!(made, 0);

    // Sparklines gain points.
    let points =
        "return Number(document.querySelector('[data-target=\"sys161\"] svg.spark').dataset.points);";
    let before = b.js(points).await.as_u64().unwrap();
    until("sys161's sparkline to gain points", POLL, async || {
        (b.js(points).await.as_u64()? >= before + 2).then_some(())
    })
    .await;

    // The protocol filter offers the fleet's protocols, in name order.
    let offered = b.js("return [...document.getElementById('protocol').options].map((o) => o.value);").await;
    assert_eq!(offered, serde_json::json!(["", "hmon", "meter161", "mono", "smon", "sysinfo"]));
    // A filter and a search narrow the rows.
    b.js("const s = document.getElementById('protocol'); s.value = 'smon'; s.dispatchEvent(new Event('change'));").await;
    let names: Vec<String> = rows(&b).await.into_iter().map(|r| r.0).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    b.js(
        "const s = document.getElementById('protocol'); s.value = ''; s.dispatchEvent(new Event('change'));
          const q = document.getElementById('search'); q.value = 'RVO'; q.dispatchEvent(new Event('input'));",
    )
    .await;
    assert_eq!(rows(&b).await.into_iter().map(|r| r.0).collect::<Vec<_>>(), ["rvos"]);
    b.js("const q = document.getElementById('search'); q.value = 'room=<b'; q.dispatchEvent(new Event('input'));").await;
    assert_eq!(rows(&b).await.into_iter().map(|r| r.0).collect::<Vec<_>>(), ["sys161"], "a search by label");
    b.js("const q = document.getElementById('search'); q.value = ''; q.dispatchEvent(new Event('input'));")
        .await;
    b.js(
        "const s = document.getElementById('state'); s.value = 'down'; s.dispatchEvent(new Event('change'));",
    )
    .await;
    assert_eq!(rows(&b).await.into_iter().map(|r| r.0).collect::<Vec<_>>(), [HOSTILE_NAME]);
    b.js("const s = document.getElementById('state'); s.value = ''; s.dispatchEvent(new Event('change'));")
        .await;

    // A stopped sim turns its row down without a reload, and up again after its restart.
    let stopped = Instant::now();
    sims.stop_smon();
    until("smon's row down", POLL, async || (state_of(&b, "smon").await? == "down").then_some(())).await;
    let down_after = stopped.elapsed();
    sims.restart_smon().await;
    until("smon's row up again", POLL, async || (state_of(&b, "smon").await? == "up").then_some(())).await;
    eprintln!("web: a stopped smon sim showed as down after {down_after:?}");
    assert!(
        down_after < Duration::from_secs(10),
        "down after {down_after:?} (the bound is 3 s; generous here)"
    );
    no_errors(&b, "/").await;

    // dyalog's page: its values equal /metrics at the same moment (its world stands still), a chart draws.
    sims.dyalog.world().user_message(None, HOSTILE_EVENT);
    b.client.goto(&format!("http://{addr}/target/dyalog")).await.unwrap();
    until("dyalog's page", POLL, async || {
        b.js("return document.body.dataset.ready === '1';").await.as_bool()?.then_some(())
    })
    .await;
    let compared = until("dyalog's page to agree with /metrics", Duration::from_millis(300), async || {
        let page = b.js("return [...document.querySelectorAll('td.value')].map(c => [c.dataset.key, c.dataset.value]);").await;
        let (_, text) = http_get(addr, "/metrics", &[]).await.ok()?;
        let metrics = exposition(&text, "dyalog");
        let page: Vec<(String, String)> = serde_json::from_value(page).ok()?;
        let numbers: Vec<_> = page.iter().filter(|(_, v)| !v.is_empty()).collect();
        let agree = numbers.iter().all(|(k, v)| {
            let (a, b) = (v.parse::<f64>().unwrap(), metrics.get(k).copied().unwrap_or(f64::NAN));
            a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
        });
        (numbers.len() > 5 && agree).then_some(numbers.len())
    })
    .await;
    eprintln!("web: dyalog's page shows {compared} values equal to /metrics");
    until("the chart's points", POLL, async || {
        let n = b.js("return Math.max(0, ...[...document.querySelectorAll('svg.chart')].map(c => Number(c.dataset.points || 0)));").await;
        (n.as_f64()? >= 3.0).then_some(())
    })
    .await;
    until("the user message in the events", POLL, async || {
        let events = b.js("return document.getElementById('events').textContent;").await;
        events.as_str()?.contains(HOSTILE_EVENT).then_some(())
    })
    .await;
    assert_eq!(b.js("return document.querySelectorAll('img').length;").await, 0);
    let href = b.js("return document.getElementById('metrics').getAttribute('href');").await;
    let (status, slice) = http_get(addr, href.as_str().unwrap(), &[]).await.unwrap();
    assert_eq!(status, 200);
    assert!(
        slice.contains("dyalog_workspace_used_bytes{target=\"dyalog\"") && !slice.contains("target=\"rvos\"")
    );
    no_errors(&b, "/target/dyalog").await;

    // The hostile names' pages: the name as the heading, as text.
    for name in [HOSTILE_NAME, mono.as_str()] {
        let path: String = name.bytes().map(|c| format!("%{c:02X}")).collect();
        b.client.goto(&format!("http://{addr}/target/{path}")).await.unwrap();
        until("the page", POLL, async || {
            b.js("return document.body.dataset.ready === '1';").await.as_bool()?.then_some(())
        })
        .await;
        assert_eq!(b.js("return document.getElementById('name').textContent;").await, name);
        assert_eq!(b.js("return document.querySelectorAll('img, svg[onload]').length;").await, 0);
        no_errors(&b, name).await;
    }

    // A lost stream is said on the page, and the page comes back by itself when telemon does.
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    let live = "return document.getElementById('live').dataset.live;";
    until("the stream", POLL, async || (b.js(live).await == "live").then_some(())).await;
    server.shutdown().await;
    until("the page to say the stream is lost", POLL, async || (b.js(live).await == "lost").then_some(()))
        .await;
    let lost = b.js("return document.getElementById('live').textContent;").await;
    assert!(lost.as_str().unwrap().contains("reconnecting"), "{lost}");
    let server = telemon::http::start(&config, Some(&addr.to_string())).await.unwrap();
    until("the stream back", POLL, async || (b.js(live).await == "live").then_some(())).await;
    until("the rows back up", POLL, async || {
        (rows(&b).await.iter().filter(|r| r.1 == "up").count() == 5).then_some(())
    })
    .await;
    // The failed reconnection attempts are the browser's own network errors, expected here.
    let _ = b.console().await;

    b.close().await;
    server.shutdown().await;
    sims.stop().await;
}

/// A target of `protocol` with its headline series at `v`.
fn fake(name: &str, protocol: Protocol, v: f64) -> TargetSnapshot {
    let mut t = TargetSnapshot::new(name, protocol, vec![("room".into(), format!("r{}", name.len() % 7))]);
    t.state = TargetState::Up;
    let counter = |family: &str, value: f64| Series {
        family: Arc::from(family),
        help: "a counter",
        labels: LabelSet::default(),
        kind: MetricKind::Counter,
        value: telemon_fleet::Value::Number(value),
        rate: Some(v),
    };
    let gauge = |family: &str, labels: LabelSet, value: f64| Series {
        family: Arc::from(family),
        help: "a gauge",
        labels,
        kind: MetricKind::Gauge,
        value: telemon_fleet::Value::Number(value),
        rate: None,
    };
    let mut series = match protocol {
        Protocol::METER161 => vec![
            counter("sys161_kernel_instructions_total", v * 100.0),
            counter("sys161_user_instructions_total", v * 50.0),
            counter("sys161_interrupts_total", v),
        ],
        _ => vec![
            gauge("dyalog_workspace_used_bytes", LabelSet::default(), v * 1024.0),
            gauge("dyalog_threads", LabelSet::new([("state", "total")]), (v as u64 % 7) as f64),
        ],
    };
    series.sort_by(|a, b| a.family.cmp(&b.family));
    t.series = SeriesSet::from(series);
    t
}

/// telemon's CPU time so far (this process: the fleet, the web view and the fake publisher), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

async fn cpu_over(d: Duration) -> f64 {
    let c = cpu_seconds();
    tokio::time::sleep(d).await;
    (cpu_seconds() - c) / d.as_secs_f64()
}

/// Bytes of `/api/v1/stream` per second over `d` (after its first `full` event).
async fn stream_rate(addr: SocketAddr, d: Duration) -> (usize, f64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /api/v1/stream HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut first = Vec::new();
    // The full event ends at the first blank line after `event: full`.
    while !String::from_utf8_lossy(&first).contains("event: delta") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0);
        first.extend_from_slice(&buf[..n]);
    }
    let full = first.len();
    let started = Instant::now();
    let mut bytes = 0usize;
    while started.elapsed() < d {
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            assert!(n > 0);
            bytes += n;
        }
    }
    (full, bytes as f64 / started.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_targets() {
    let Some(driver) = need_browser("a_thousand_targets") else { return };
    // A fleet of 1,000 targets (half sys161, half hmon) whose figures change every second.
    let fleet = Arc::new(Fleet::new());
    let names: Vec<(String, Protocol)> = (0..1000)
        .map(|i| {
            if i % 2 == 0 {
                (format!("os161-{i:04}"), Protocol::METER161)
            } else {
                (format!("apl-{i:04}"), Protocol::HMON)
            }
        })
        .collect();
    for (n, p) in &names {
        fleet.registry().put(fake(n, *p, 1.0));
    }
    let registry = fleet.registry().clone();
    let publisher = tokio::spawn(async move {
        let mut v = 1.0;
        loop {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            v += 1.0;
            for (i, (n, p)) in names.iter().enumerate() {
                let t = fake(n, *p, v + i as f64);
                registry.update(n, |old| old.series = t.series);
            }
        }
    });
    let _publisher = telemon_fleet::collect::AbortOnDrop(publisher);
    let app = telemon::web::routes(fleet.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let _server = telemon_fleet::collect::AbortOnDrop(server);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // No view yet (the sampler follows states only): the baseline.
    let idle = cpu_over(Duration::from_secs(10)).await;

    let (plain, gz) = telemon::web::bundle_size();
    eprintln!("web: the bundle is {plain} bytes, {gz} gzipped");
    let (full, per_second) = stream_rate(addr, Duration::from_secs(5)).await;
    eprintln!("web: 1,000 targets: the stream's first event {full} bytes, then {per_second:.0} bytes/s");

    let b = Browser::start(&driver, 1400, 900).await;
    b.js("window.__longtasks = []; try { new PerformanceObserver(l => window.__longtasks.push(...l.getEntries().map(e => e.duration))).observe({ type: 'longtask', buffered: true }); } catch (e) {}").await;
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    let tti = until("the first rows", Duration::from_millis(20), async || {
        let v = b.js("const m = performance.getEntriesByName('telemon:full')[0]; return m && document.querySelectorAll('[data-target]').length > 10 ? m.startTime + m.duration : null;").await;
        v.as_f64()
    })
    .await;
    eprintln!("web: 1,000 targets: first rows drawn {tti:.0} ms after navigation");
    assert!(tti < 10_000.0, "{tti} ms (the bound is 2 s; generous here)");
    let total = b.js("return document.getElementById('summary').dataset.total;").await;
    assert_eq!(total, "1000");
    // Two more views, then 10 s with three open.
    let mut handles = vec![];
    for _ in 0..2 {
        let w = b.client.new_window(false).await.unwrap();
        b.client.switch_to_window(w.handle.clone()).await.unwrap();
        b.client.goto(&format!("http://{addr}/")).await.unwrap();
        handles.push(w.handle);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let viewing = cpu_over(Duration::from_secs(10)).await;
    let updates = b.js("return performance.getEntriesByName('telemon:update').map(m => m.duration);").await;
    let updates: Vec<f64> = serde_json::from_value(updates).unwrap();
    let longtasks = b.js("return (window.__longtasks || []).length;").await;
    assert!(updates.len() >= 5, "{updates:?}");
    let max = updates.iter().cloned().fold(0.0, f64::max);
    let mean = updates.iter().sum::<f64>() / updates.len() as f64;
    eprintln!(
        "web: 1,000 targets: {} live updates, {mean:.1} ms mean, {max:.1} ms max on the main thread; {longtasks} long tasks",
        updates.len()
    );
    eprintln!(
        "web: 1,000 targets: CPU {:.1}% with no view, {:.1}% with three (x{:.2})",
        idle * 100.0,
        viewing * 100.0,
        viewing / idle.max(1e-3)
    );
    assert!(max < 250.0, "an update took {max} ms (the bound is 50 ms; generous here)");
    assert!(
        viewing < idle * 3.0 + 0.05,
        "three views: {viewing} CPU against {idle} (the bound is 1.2x; generous here)"
    );
    no_errors(&b, "/ with 1,000 targets").await;
    b.close().await;
    fleet.shutdown().await;
}

/// A gauge `family{labels}` at `v`.
fn gauge(family: &str, labels: &[(&str, &str)], v: f64) -> Series {
    Series {
        family: Arc::from(family),
        help: "a gauge",
        labels: LabelSet::new(labels.iter().copied()),
        kind: MetricKind::Gauge,
        value: telemon_fleet::Value::Number(v),
        rate: None,
    }
}

/// An rvOS-like target at second `n`: 200 channel queues in the order rvOS lists them (not sorted), the
/// watchdog's heartbeat age, and an IPC latency histogram that gains 10 observations a second (9 up to
/// 1 ms, 1 in (1 ms, 2 ms]).
fn rvos_like(n: u64) -> TargetSnapshot {
    let mut channels: Vec<u32> = (0..200).collect();
    channels.sort_by_key(|c| (c * 7919) % 200);
    let mut series: Vec<Series> = channels
        .iter()
        .map(|c| gauge("rvos_channel_queue_length", &[("channel", &c.to_string())], f64::from(c % 5)))
        .collect();
    series.push(gauge("rvos_watchdog_heartbeat_age_seconds", &[], 0.2));
    series.push(Series {
        family: Arc::from("rvos_ipc_latency_seconds"),
        help: "IPC latency",
        labels: LabelSet::default(),
        kind: MetricKind::Histogram,
        value: telemon_fleet::Value::Histogram {
            buckets: vec![(0.001, 9 * n), (0.002, 10 * n), (0.004, 10 * n)],
            sum: 0.0,
            count: 10 * n,
        },
        rate: None,
    });
    series.sort_by(|a, b| a.family.cmp(&b.family));
    let mut t = TargetSnapshot::new("vm", Protocol::SYSINFO, vec![]);
    t.state = TargetState::Up;
    t.series = SeriesSet::from(series);
    t
}

/// What a target page shows beside its numbers: series in label order (numbers as numbers), a chart per
/// scale, a histogram's quantiles, why a down target has no series; and `/`'s row of a Mono agent with no
/// counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_pages_order_group_and_explain_their_series() {
    let Some(driver) = need_browser("target_pages_order_group_and_explain_their_series") else { return };
    let fleet = Arc::new(Fleet::new());
    fleet.registry().put(rvos_like(0));
    // smon's one family: the clock (1.8e9), the uptime and the load on one axis were flat lines.
    let mut smon = TargetSnapshot::new("smon", Protocol::SMON, vec![]);
    smon.state = TargetState::Up;
    smon.series = SeriesSet::from(vec![
        gauge("smon_value", &[("name", "smon.time")], 1.8e9),
        gauge("smon_value", &[("name", "linux.uptime")], 2884.0),
        gauge("smon_value", &[("name", "linux.load.avg1_x100")], 371.0),
        gauge("smon_value", &[("name", "linux.load.avg5_x100")], 460.0),
    ]);
    fleet.registry().put(smon);
    let mut down = TargetSnapshot::new("down", Protocol::SMON, vec![]);
    down.state = TargetState::Down;
    down.last_error = Some(Arc::from("connection refused"));
    fleet.registry().put(down);
    let mut mono = TargetSnapshot::new("mono/10.0.0.5:1", Protocol::MONO, vec![]);
    mono.state = TargetState::Up;
    fleet.registry().put(mono);
    let registry = fleet.registry().clone();
    let publisher = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        for n in 1.. {
            every.tick().await;
            registry.update("vm", |t| t.series = rvos_like(n).series);
        }
    });
    let _publisher = telemon_fleet::collect::AbortOnDrop(publisher);
    let app = telemon::web::routes(fleet.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = telemon_fleet::collect::AbortOnDrop(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }));
    let b = Browser::start(&driver, 1400, 900).await;
    let ready = async || {
        until("the page", POLL, async || {
            b.js("return document.body.dataset.ready === '1';").await.as_bool()?.then_some(())
        })
        .await
    };

    // `/`: the Mono agent with no counters shows "–" for its figures, as a target with no value yet.
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    until("four rows", POLL, async || (rows(&b).await.len() == 4).then_some(())).await;
    let figures = b
        .js("return [...document.querySelectorAll('[data-target=\"mono/10.0.0.5:1\"] .fig .v')].map(v => v.textContent);")
        .await;
    assert_eq!(figures, serde_json::json!(["–", "–"]));

    // The rvOS-like page: its 200 channels in order, and its histogram's quantiles drawn.
    b.client.goto(&format!("http://{addr}/target/vm")).await.unwrap();
    ready().await;
    let channels = b
        .js("return [...document.querySelectorAll('[data-family=\"rvos_channel_queue_length\"] td.labels')].map(c => c.textContent);")
        .await;
    let expected: Vec<String> = (0..200).map(|c| format!("channel={c}")).collect();
    assert_eq!(channels, serde_json::json!(expected));
    let histogram = "[data-family=\"rvos_ipc_latency_seconds\"]";
    let legend = b.js(&format!("return document.querySelector('{histogram} .legend').textContent;")).await;
    assert_eq!(legend, "p50p90p99");
    // Charts are drawn while in view.
    b.js(&format!("document.querySelector('{histogram}').scrollIntoView();")).await;
    until("the histogram's quantiles drawn", POLL, async || {
        let n = b
            .js(&format!(
                "return Number(document.querySelector('{histogram} svg.chart').dataset.points || 0);"
            ))
            .await;
        (n.as_f64()? >= 6.0).then_some(())
    })
    .await;
    let quantiles = b.js(&format!("return document.querySelector('{histogram} td.rate').textContent;")).await;
    // Of each second's 10 observations, 9 are up to 1 ms and 1 is in (1 ms, 2 ms].
    assert_eq!(quantiles, "0.56 ms · 1 ms · 1.90 ms");
    no_errors(&b, "/target/vm").await;

    // smon's family: the clock on a chart of its own, apart from the load.
    b.client.goto(&format!("http://{addr}/target/smon")).await.unwrap();
    ready().await;
    let legends = b
        .js("return [...document.querySelectorAll('[data-family=\"smon_value\"] .legend')].map(l => [...l.children].map(c => c.textContent));")
        .await;
    let legends: Vec<Vec<String>> = serde_json::from_value(legends).unwrap();
    assert_eq!(
        legends,
        [
            vec!["name=smon.time"],
            vec!["name=linux.uptime", "name=linux.load.avg5_x100", "name=linux.load.avg1_x100"]
        ],
        "a chart per scale (lines within 10x of each other), the largest first"
    );

    // A down target with no series says so, and why.
    b.client.goto(&format!("http://{addr}/target/down")).await.unwrap();
    ready().await;
    let text = b.js("return document.getElementById('families').textContent;").await;
    let text = text.as_str().unwrap();
    assert!(
        text.starts_with("No series: the target is down since ") && text.ends_with("(connection refused)."),
        "{text}"
    );
    no_errors(&b, "/target/down").await;
    b.close().await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots() {
    let Some(driver) = need_browser("screenshots") else { return };
    let sims = Sims::start(SimOptions::default()).await;
    sims.start_mono_agent();
    let toml = sims.toml(Some("250ms"));
    let config = Config::parse("web.toml", &toml).unwrap();
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    let b = Browser::start(&driver, 1280, 720).await;
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    until("five rows up", POLL, async || {
        (rows(&b).await.iter().filter(|r| r.1 == "up").count() == 5).then_some(())
    })
    .await;
    // The target page shown below is asked for now, so that its series are recorded from here on (the
    // view records a target's series only while its page is watched, and a minute after it was asked
    // for): the pictures show `/` and the page some seconds after they were opened, as a user sees them.
    let (status, _) = http_get(addr, "/api/v1/targets/dyalog", &[]).await.unwrap();
    assert_eq!(status, 200);
    // Some seconds of sparkline and charts.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let dir = std::env::var_os("TELEMON_SCREENSHOTS").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir.unwrap_or_else(|| tmp.path().to_owned());
    std::fs::create_dir_all(&dir).unwrap();
    for (page, path) in [("fleet", "/".to_owned()), ("target", "/target/dyalog".to_owned())] {
        b.client.goto(&format!("http://{addr}{path}")).await.unwrap();
        until("the page", POLL, async || {
            b.js("return document.body.dataset.ready === '1';").await.as_bool()?.then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for scheme in ["light", "dark"] {
            b.color_scheme(scheme).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let png = b.client.screenshot().await.unwrap();
            assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a real screenshot");
            std::fs::write(dir.join(format!("{page}-{scheme}.png")), png).unwrap();
        }
        no_errors(&b, &path).await;
    }
    b.close().await;
    server.shutdown().await;
    sims.stop().await;
}

/// With users in the web config, the page, its assets, the API and the stream all need them: a browser given
/// the credentials sees the live fleet (the page's own requests and its stream carry them), one without sees
/// nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_basic_auth_the_page_the_api_and_the_stream_need_it() {
    let Some(driver) = need_browser("with_basic_auth_the_page_the_api_and_the_stream_need_it") else {
        return;
    };
    let shutdown = sim_common::Shutdown::new();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rvos = l.local_addr().unwrap();
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  alice: '{}'\n", bcrypt::hash("s3cret", 4).unwrap()))
        .unwrap();
    let mut config =
        Config::parse("auth.toml", &format!("[[sysinfo]]\nname = \"vm\"\nconnect = \"{rvos}\"\n")).unwrap();
    config.serve.web_config = Some(web);
    let server = telemon::http::start(&config, Some("127.0.0.1:0")).await.unwrap();
    let addr = server.local_addr();
    for path in
        ["/", "/target/vm", "/web/fleet.js", "/api/v1/targets", "/api/v1/targets/vm", "/api/v1/stream"]
    {
        let (status, _) = http_get(addr, path, &[]).await.unwrap();
        assert_eq!(status, 401, "{path} without credentials");
        let wrong = [("Authorization", "Basic YWxpY2U6d3Jvbmc=")]; // alice:wrong
        assert_eq!(http_get(addr, path, &wrong).await.unwrap().0, 401, "{path} with a wrong password");
    }
    let (status, body) =
        http_get(addr, "/api/v1/targets", &[("Authorization", "Basic YWxpY2U6czNjcmV0")]).await.unwrap();
    assert_eq!(status, 200, "{body}");

    // A browser that sends the credentials (as a proxy or an SSO front would): the page, its modules, its API
    // calls and its stream go through, and the row comes up live.
    let b = Browser::start(&driver, 1200, 800).await;
    b.extra_header("Authorization", "Basic YWxpY2U6czNjcmV0").await; // alice:s3cret
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    until("the row up", POLL, async || (state_of(&b, "vm").await.as_deref() == Some("up")).then_some(()))
        .await;
    no_errors(&b, "/ with credentials").await;
    b.close().await;

    // Without: no row, nothing of the fleet.
    let b = Browser::start(&driver, 1200, 800).await;
    b.client.goto(&format!("http://{addr}/")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rows(&b).await.is_empty());
    let text = b.js("return document.body ? document.body.innerText : '';").await;
    assert!(!text.as_str().unwrap_or("").contains("vm"), "{text}");
    b.close().await;
    server.shutdown().await;
    shutdown.cancel();
}

/// A test that panics with a browser open leaves nothing running: dropping the browser kills chromedriver's
/// whole process group, Chromium's processes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_test_leaves_no_browser_running() {
    let Some(driver) = need_browser("a_panicking_test_leaves_no_browser_running") else { return };
    let b = Browser::start(&driver, 800, 600).await;
    b.client.goto("about:blank").await.unwrap();
    let group = b.process_group().expect("chromedriver's process group");
    let running = browser::processes_in_group(group);
    // chromedriver and the browser's processes (the browser, its zygote, renderer, ...).
    assert!(running.len() > 2, "chromedriver and Chromium in group {group}: {running:?}");
    let panicked = tokio::spawn(async move {
        let _b = b;
        panic!("a failing test, with its browser open");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    until("every process of the group to end", POLL, async || {
        browser::processes_in_group(group).is_empty().then_some(())
    })
    .await;
}
