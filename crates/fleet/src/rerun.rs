//! Recordings run again through the fleet's collectors, each recorded connection fed to its protocol's
//! collector as if the target were live (what `telemon record` and `--record` wrote: see [`crate::recording`]):
//!
//! * [`replay`], on a fake clock: what `telemon serve` would have exported, at the times it would have changed,
//!   which [`openmetrics`] and [`csv`] write out with timestamps (`telemon export`);
//! * [`play`], on the real clock into a [`Registry`] (`telemon top --replay`).
//!
//! Each recorded connection is served to its protocol's collector as a [`ReplayStream`] at the recorded
//! pace. [`replay`] runs them in a current-thread runtime whose clock is paused: tokio advances it to the next timer whenever
//! everything waits, so an hour of recording replays in the time its decoding takes, and every change the
//! collector publishes is seen at its recorded time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use telemon_capture::{Connection, ReplayStream, Speed};

use crate::model::ErrorKind;
use crate::protocol::Protocols;
use crate::registry::Registry;
use crate::render::{render, Format};
use crate::target::{Failure, Publisher};

/// One exposition of the replayed fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Scrape {
    /// When (ns since the Unix epoch, from the recording).
    pub time_ns: u64,
    /// The OpenMetrics text `/metrics` would have served then.
    pub text: String,
}

/// The most series one replayed target may have (as `[serve] series_limit`'s default).
const SERIES_LIMIT: usize = 10_000;

/// Replays `connections` (all of one target or several; in order of start) through the collectors of
/// `protocols` and returns an exposition after each published change. Connections of a link type no
/// protocol records are skipped with a warning on stderr.
pub fn replay(protocols: &Protocols, connections: Vec<Connection>) -> std::io::Result<Vec<Scrape>> {
    let protocols = protocols.clone();
    std::thread::spawn(move || {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()?;
        Ok(runtime.block_on(replay_all(&protocols, connections)))
    })
    .join()
    .map_err(|_| std::io::Error::other("the replay thread panicked"))?
}

async fn replay_all(protocols: &Protocols, connections: Vec<Connection>) -> Vec<Scrape> {
    let registry = Registry::new();
    let mut publishers: std::collections::HashMap<String, Publisher> = Default::default();
    let scrapes: Arc<Mutex<Vec<Scrape>>> = Arc::default();
    for connection in connections {
        let Some(component) = protocols.by_link_type(connection.target.link_type) else {
            eprintln!(
                "telemon: export: {}: no collector replays linktype {} recordings; skipped",
                connection.target.name, connection.target.link_type
            );
            continue;
        };
        let name = connection.target.name.clone();
        let p = publishers.entry(name.clone()).or_insert_with(|| {
            let mut p = Publisher::new(&registry, name.as_str(), component.protocol(), vec![], SERIES_LIMIT);
            // Every recorded sample is a point, however fast the target sent them.
            p.publish_every_change();
            p
        });
        let stream = ReplayStream::new(&connection, Speed::Times(1.0));
        // Every publication is rendered, stamped with the recorded time of the bytes that caused it.
        let (clock, start_ns, sink) = (stream.clock(), connection.start_ns, scrapes.clone());
        p.on_publish(move |registry| {
            let text = render(&registry.snapshot(), Format::OpenMetrics);
            let time_ns = start_ns + clock.last_read().as_nanos() as u64;
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(Scrape { time_ns, text });
        });
        let failure = component.replay(p, &connection, stream).await;
        tracing::debug!(target = %name, ?failure, "replay ended");
        // What the collector held back for its next publication when the stream ended (a live target would
        // publish it with its next change or as it goes down).
        p.flush_if_dirty();
    }
    drop(publishers);
    let scrapes = std::mem::take(&mut *scrapes.lock().unwrap_or_else(|e| e.into_inner()));
    scrapes
}

/// Plays `connections` into `registry` on the real clock at `speed` (`telemon top --replay`) through the
/// collectors of `protocols`: every target's connections one after the other, each target starting at its
/// recorded offset from the first. A target whose recording is played out stays listed as down ("the
/// recording ended").
pub async fn play(registry: Registry, protocols: &Protocols, connections: Vec<Connection>, speed: Speed) {
    let first = connections.iter().map(|c| c.start_ns).min().unwrap_or(0);
    let mut by_target: Vec<(String, Vec<Connection>)> = Vec::new();
    for c in connections {
        match by_target.iter_mut().find(|(name, _)| *name == c.target.name) {
            Some((_, list)) => list.push(c),
            None => by_target.push((c.target.name.clone(), vec![c])),
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (name, list) in by_target {
        let registry = registry.clone();
        let Some(component) = protocols.by_link_type(list[0].target.link_type) else { continue };
        tasks.spawn(async move {
            let mut p = Publisher::new(&registry, name.as_str(), component.protocol(), vec![], SERIES_LIMIT);
            let start = tokio::time::Instant::now();
            for c in list {
                tokio::time::sleep_until(start + speed.scale(Duration::from_nanos(c.start_ns - first))).await;
                let failure = component.replay(&mut p, &c, ReplayStream::new(&c, speed)).await;
                tracing::debug!(target = %name, ?failure, "recorded connection played out");
            }
            p.down(&Failure::new(ErrorKind::Connect, "the recording ended"));
            std::future::pending::<()>().await;
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// One series' samples, in time order: (time in ns, value text).
type Points = Vec<(u64, String)>;

/// Turns expositions into one OpenMetrics text with timestamps (in seconds): each family once, its series
/// one after the other, each in time order, ending with `# EOF` — what `promtool tsdb create-blocks-from openmetrics` reads.
pub fn openmetrics(scrapes: &[Scrape]) -> String {
    let families = gather(scrapes);
    let mut out = String::new();
    for family in &families {
        out.push_str(&family.meta);
        for (series, points) in &family.series {
            for (t, v) in points {
                out.push_str(&format!("{series} {v} {}\n", seconds(*t)));
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The same samples as CSV: a `time` column (seconds) and one column per series, one row per scrape,
/// each cell the series' value at that time (empty before its first sample).
pub fn csv(scrapes: &[Scrape]) -> String {
    let families = gather(scrapes);
    let columns: Vec<(&String, &Points)> =
        families.iter().flat_map(|f| f.series.iter().map(|(n, p)| (n, p))).collect();
    let mut out = String::from("time");
    for (name, _) in &columns {
        out.push(',');
        out.push_str(&csv_cell(name));
    }
    out.push('\n');
    let mut cursor = vec![0usize; columns.len()];
    let mut current: Vec<Option<&str>> = vec![None; columns.len()];
    // One row per millisecond (the time column's precision) that holds a point, at the last point within it.
    let mut all: Vec<u64> = columns.iter().flat_map(|(_, p)| p.iter().map(|(t, _)| *t)).collect();
    all.sort_unstable();
    let mut times: Vec<u64> = Vec::new();
    for t in all {
        match times.last_mut() {
            Some(last) if *last / 1_000_000 == t / 1_000_000 => *last = t,
            _ => times.push(t),
        }
    }
    for t in times {
        out.push_str(&seconds(t));
        for (i, (_, points)) in columns.iter().enumerate() {
            while cursor[i] < points.len() && points[cursor[i]].0 <= t {
                current[i] = Some(&points[cursor[i]].1);
                cursor[i] += 1;
            }
            out.push(',');
            out.push_str(current[i].unwrap_or(""));
        }
        out.push('\n');
    }
    out
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Nanoseconds as seconds with millisecond precision (`1700000000.123`).
fn seconds(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000_000, (ns / 1_000_000) % 1000)
}

struct FamilyPoints {
    /// The `# TYPE`, `# HELP` and `# UNIT` lines.
    meta: String,
    /// Series (name and labels as exposed) in order of first appearance, with their points.
    series: Vec<(String, Points)>,
}

/// Adds `value` at `time_ns` to a series' points. Timestamps are written in milliseconds, and a TSDB
/// takes one sample per series and timestamp, in order. Within the millisecond of the last point:
/// - the same value again adds nothing;
/// - when the last point only repeated the one before it (a publication for another series, or the
///   first part of a message cut across reads), the new value replaces it: the later state stands;
/// - when the last point was itself a new sample (several samples that arrived in one read, so at one
///   recorded time), the new one is placed a millisecond after it, so that every sample stays a point,
///   in order.
fn add_point(points: &mut Points, time_ns: u64, value: &str) {
    const MS: u64 = 1_000_000;
    let n = points.len();
    let Some(last) = points.last() else {
        points.push((time_ns, value.to_owned()));
        return;
    };
    if last.0 / MS < time_ns / MS {
        points.push((time_ns, value.to_owned()));
        return;
    }
    if last.1 == value {
        return;
    }
    let last_was_new = n < 2 || points[n - 2].1 != last.1;
    if last_was_new {
        let at = (last.0 / MS + 1) * MS;
        points.push((at, value.to_owned()));
    } else {
        let at = last.0.max(time_ns);
        points[n - 1] = (at, value.to_owned());
    }
}

/// Parses each exposition and gathers the points of each series (every scrape's value, as a scraper
/// would have stored them).
fn gather(scrapes: &[Scrape]) -> Vec<FamilyPoints> {
    let mut families: Vec<FamilyPoints> = Vec::new();
    let mut family_index: std::collections::HashMap<String, usize> = Default::default();
    let mut series_index: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for scrape in scrapes {
        let mut family: Option<usize> = None;
        for line in scrape.text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(meta) = line.strip_prefix("# ") {
                let mut words = meta.splitn(3, ' ');
                let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let i = *family_index.entry(name.to_owned()).or_insert_with(|| {
                    families.push(FamilyPoints { meta: String::new(), series: Vec::new() });
                    families.len() - 1
                });
                if kind == "TYPE" && families[i].meta.contains(&format!("# TYPE {name} ")) {
                    // Metadata of a family already gathered.
                } else if !families[i].meta.contains(&format!("# {kind} {name} ")) {
                    families[i].meta.push_str(line);
                    families[i].meta.push('\n');
                }
                family = Some(i);
                continue;
            }
            let (Some(f), Some((series, value))) = (family, line.rsplit_once(' ')) else { continue };
            let (f, s) = *series_index.entry(series.to_owned()).or_insert_with(|| {
                families[f].series.push((series.to_owned(), Vec::new()));
                (f, families[f].series.len() - 1)
            });
            add_point(&mut families[f].series[s].1, scrape.time_ns, value);
        }
    }
    families
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(t: u64, text: &str) -> Scrape {
        Scrape { time_ns: t * 1_000_000_000, text: text.to_owned() }
    }

    #[test]
    fn a_series_has_one_value_per_millisecond_the_latest() {
        let at = |ns: u64, text: &str| Scrape { time_ns: ns, text: text.to_owned() };
        let scrapes = [
            at(10_000_000_000, "# TYPE x gauge\nx 1\n# EOF\n"),
            // A sample's first byte read at 11.000012 s, its last at 11.000029 s: two publications.
            at(11_000_012_000, "# TYPE x gauge\nx 1\n# EOF\n"),
            at(11_000_029_000, "# TYPE x gauge\nx 2\n# EOF\n"),
            at(11_001_000_000, "# TYPE x gauge\nx 3\n# EOF\n"),
        ];
        assert_eq!(openmetrics(&scrapes), "# TYPE x gauge\nx 1 10.000\nx 2 11.000\nx 3 11.001\n# EOF\n");
        assert_eq!(csv(&scrapes), "time,x\n10.000,1\n11.000,2\n11.001,3\n");
    }

    #[test]
    fn samples_read_at_one_time_stay_points_a_millisecond_apart() {
        let at = |ns: u64, text: &str| Scrape { time_ns: ns, text: text.to_owned() };
        // Three samples in one read (one recorded time), then one 1.5 ms later, then the same value again.
        let scrapes = [
            at(5_000_000_000, "# TYPE x gauge\nx 0\n# EOF\n"),
            at(5_000_000_000, "# TYPE x gauge\nx 1\n# EOF\n"),
            at(5_000_000_000, "# TYPE x gauge\nx 2\n# EOF\n"),
            at(5_001_500_000, "# TYPE x gauge\nx 3\n# EOF\n"),
            at(5_001_700_000, "# TYPE x gauge\nx 3\n# EOF\n"),
        ];
        assert_eq!(
            openmetrics(&scrapes),
            "# TYPE x gauge\nx 0 5.000\nx 1 5.001\nx 2 5.002\nx 3 5.003\n# EOF\n",
            "every sample a point, in order, strictly later each"
        );
        assert_eq!(csv(&scrapes), "time,x\n5.000,0\n5.001,1\n5.002,2\n5.003,3\n");
    }

    /// A Mono agent's recorded connection: its Hello (one INT counter), a sample at 1 s, the same
    /// value again at 2 s (an empty sample), then a new value at 3 s cut across two reads.
    fn mono_connection() -> Connection {
        use mono_counters::*;
        let hello = AgentMessage::Hello(Hello {
            version: PROTOCOL_VERSION,
            headers: vec![Header {
                category: Category::Jit,
                name: "Compiled methods".into(),
                kind: CounterType::Int,
                unit: Unit::None,
                variance: Variance::Variable,
                index: 0,
            }],
        });
        let sample = |timestamp: i64, value: Option<i32>| {
            AgentMessage::Sampling(Sample {
                timestamp,
                values: value
                    .map(|v| SampleValue { index: 0, data: CounterValue::Int(v).into() })
                    .into_iter()
                    .collect(),
            })
        };
        let bytes = |m: &AgentMessage| {
            let mut out = bytes::BytesMut::new();
            encode_agent_message(m, &mut out).unwrap();
            out.to_vec()
        };
        let last = bytes(&sample(30_000_000, Some(101)));
        let chunk =
            |s: u64, b: &[u8]| (Duration::from_secs(s), telemon_capture::Direction::Inbound, b.to_vec());
        Connection {
            target: telemon_capture::Target::new("agent", telemon_capture::link_type::MONO, "127.0.0.1:8888"),
            start_ns: 1_700_000_000_000_000_000,
            chunks: vec![
                chunk(0, &bytes(&hello)),
                chunk(1, &bytes(&sample(10_000_000, Some(100)))),
                chunk(2, &bytes(&sample(20_000_000, None))),
                chunk(3, &last[..1]),
                (Duration::from_millis(3500), telemon_capture::Direction::Inbound, last[1..].to_vec()),
            ],
            peer_closed: false,
        }
    }

    #[test]
    fn mono_agents_replay_through_their_collector() {
        let text = openmetrics(&replay(&Protocols::built_in(), vec![mono_connection()]).unwrap());
        let series = "mono_runtime{target=\"agent\",category=\"Mono JIT\",counter=\"Compiled methods\"}";
        let points: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix(series)).collect();
        assert_eq!(points, [" 100 1700000001.000", " 101 1700000003.500"], "{text}");
        assert!(text
            .contains("mono_agent_info{target=\"agent\",version=\"0.1\",counters=\"1\"} 1 1700000000.000"));
    }

    #[test]
    fn samples_that_came_in_one_read_are_each_a_point() {
        // An smon stream whose first read held two samples of `n.n` (the reader was late), then a third.
        let mut enc = smon_codec::StreamEncoder::default();
        let sample = |enc: &mut smon_codec::StreamEncoder, v: u64| {
            let mut out = bytes::BytesMut::new();
            enc.encode(&smon_codec::Sample::new("n.n", vec![0], v), &mut out).unwrap();
            out.to_vec()
        };
        let first = [sample(&mut enc, 100), sample(&mut enc, 200)].concat();
        let chunk = |ms: u64, b: Vec<u8>| (Duration::from_millis(ms), telemon_capture::Direction::Inbound, b);
        let connection = Connection {
            target: telemon_capture::Target::new("s", telemon_capture::link_type::SMON, "127.0.0.1:7878"),
            start_ns: 1_700_000_000_000_000_000,
            chunks: vec![chunk(0, first), chunk(10, sample(&mut enc, 300))],
            peer_closed: false,
        };
        let text = openmetrics(&replay(&Protocols::built_in(), vec![connection]).unwrap());
        let series = "smon_value{target=\"s\",name=\"n.n\",index=\"0\"}";
        let points: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix(series)).collect();
        assert_eq!(points, [" 100 1700000000.000", " 200 1700000000.001", " 300 1700000000.010"], "{text}");
    }

    #[test]
    fn families_are_written_once_with_their_series_in_time_order() {
        let a = "# TYPE x counter\n# HELP x An x.\nx_total{a=\"1\"} 1\nx_total{a=\"2\"} 5\n# TYPE y gauge\ny 0.5\n# EOF\n";
        let b = "# TYPE x counter\n# HELP x An x.\nx_total{a=\"1\"} 2\nx_total{a=\"2\"} 5\n# TYPE y gauge\ny 0.5\n# EOF\n";
        let out = openmetrics(&[scrape(10, a), scrape(20, b)]);
        assert_eq!(
            out,
            "# TYPE x counter\n# HELP x An x.\nx_total{a=\"1\"} 1 10.000\nx_total{a=\"1\"} 2 20.000\n\
             x_total{a=\"2\"} 5 10.000\nx_total{a=\"2\"} 5 20.000\n# TYPE y gauge\ny 0.5 10.000\ny 0.5 20.000\n# EOF\n"
        );
        assert_eq!(
            csv(&[scrape(10, a), scrape(20, b)]),
            "time,\"x_total{a=\"\"1\"\"}\",\"x_total{a=\"\"2\"\"}\",y\n10.000,1,5,0.5\n20.000,2,5,0.5\n"
        );
    }
}
