//! Sessions of the real sys161 2.0.8, checked against the table the real stat161 printed for the same
//! bytes (`tests/peers/sys161/README.md`).

use std::path::PathBuf;

use telemon_capture::{link_type, Capture, Direction, Limits};

use crate::support::{code, json_lines, run, stderr, stdout};

/// stat161's column order, which is also sys161's `HEAD`.
const FIELDS: [&str; 11] =
    ["nsec", "kinsns", "uinsns", "udud", "idle", "irqs", "exns", "disk", "con", "emu", "net"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/sys161").join(name)
}

/// The rows of stat161's table: the first holds the cumulative values, the others the deltas.
fn stat161_rows(name: &str) -> Vec<[u64; 11]> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let rows: Vec<[u64; 11]> = text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let cells: Vec<u64> = l.split_whitespace().map(|c| c.parse().unwrap()).collect();
            cells.try_into().unwrap_or_else(|c| panic!("not 11 columns: {c:?}"))
        })
        .collect();
    assert!(rows.len() >= 10, "{name}: {} rows", rows.len());
    rows
}

/// What each row of stat161 adds up to: the counters' values as sys161 sent them.
fn cumulative(rows: &[[u64; 11]]) -> Vec<[u64; 11]> {
    let mut sum = [0u64; 11];
    rows.iter()
        .map(|row| {
            for (s, d) in sum.iter_mut().zip(row) {
                *s += d;
            }
            sum
        })
        .collect()
}

async fn check(recording: &str, table: &str, outbound: &[u8]) {
    let file = fixture(recording);
    let path = file.to_str().unwrap();
    let rows = stat161_rows(table);

    let capture = Capture::from_file(&file, Limits::default()).unwrap();
    assert_eq!(capture.warning, None);
    assert_eq!(capture.targets().len(), 1);
    assert_eq!(capture.targets()[0].link_type, link_type::METER161);
    let connections = capture.connections(None);
    assert_eq!(connections.len(), 1);
    assert_eq!(connections[0].bytes(Direction::Outbound), outbound, "what telemon sent");
    assert!(connections[0].inbound().starts_with(
        b"HELLO 2\r\nHEAD nsec kinsns uinsns udud idle irqs exns disk con emu net\r\nWIDTH 11 9 9 4 9 4 4 4 5 4 4\r\n"
    ));

    // The one-target view: the first row is sys161's cumulative values, the others their deltas, as stat161 printed.
    let out = run(&["replay", path, "--json", "--speed", "max"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = json_lines(&stdout(&out));
    assert_eq!(shown.len(), rows.len(), "one row per DATA line");
    for (k, (row, json)) in rows.iter().zip(&shown).enumerate() {
        let values = if k == 0 { json } else { &json["delta"] };
        for (field, &want) in FIELDS.iter().zip(row) {
            assert_eq!(values[field].as_u64(), Some(want), "row {k}, {field}: {json}");
        }
    }

    // The fleet collector, through `telemon export`: every exported point is sys161's cumulative value at
    // one DATA line, in order, and the last is the last line's. (The collector publishes at most every
    // 200 ms of recorded time and folds the lines between, as `telemon serve` would.)
    let out = run(&["export", path, "--format", "openmetrics"], None).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.ends_with("# EOF\n"));
    let sums = cumulative(&rows);
    for (i, family) in [(0, "sys161_simulated_seconds_total"), (1, "sys161_kernel_instructions_total")] {
        let points: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{target=")))
            .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
            .collect();
        let want: Vec<f64> =
            sums.iter().map(|s| if i == 0 { s[0] as f64 / 1e9 } else { s[1] as f64 }).collect();
        assert!(points.len() >= 3, "{family}: {} points for {} lines", points.len(), want.len());
        assert_eq!(points.last(), want.last(), "{family}");
        let mut rest = want.iter();
        for p in &points {
            assert!(rest.any(|w| w == p), "{family}: {p} is not a later DATA line's value; want {want:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sys161_at_its_default_interval_matches_stat161() {
    check("spin-200ms.pcapng", "spin-200ms.stat161.txt", b"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sys161_after_an_interval_command_matches_stat161() {
    check("spin-1s.pcapng", "spin-1s.stat161.txt", b"INTERVAL 1000000000\r\n").await;
}
