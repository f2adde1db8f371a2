//! `telemon meter161`: watch a System/161 simulator's meter socket, like stat161.
//!
//! The default output is stat161's table of per-interval deltas (the first row after each connect shows
//! the cumulative values), with the header reprinted every 22 rows. `--json` prints one object per
//! `DATA` line: each `HEAD` field with its cumulative value, and a `"delta"` object (absent on the first
//! row after a connect). Status and per-line errors go to stderr.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use std::time::Duration;
use telemon_capture::{link_type, Tap};

use ::meter161::{ClientError, DecodeError, Event, Header, ProtocolError, Sample};

use crate::cmd::record::{self, RecordArgs};
use crate::output::{self, CliError, CliResult, OutputArgs, Rows};

/// How late a row may be shown while the simulator sends lines close together: one wake-up reads
/// every line that came within it. A line after a quiet period (a 1 s interval) is read at once.
const READ_BATCHING: Duration = Duration::from_millis(5);

/// stat161 reprints its header when more than this many rows were printed since.
const ROWS_PER_HEADER: usize = 22;

/// Watch a System/161 simulator (`DIR/.sockets/meter`), like stat161.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory sys161 runs in; its socket is DIR/.sockets/meter.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Reporting interval in simulated time, 10us to 2s (e.g. 1s, 250ms, 0.5); default sys161's 0.2s.
    #[arg(long, value_parser = parse_interval)]
    interval: Option<Duration>,
    #[command(flatten)]
    output: OutputArgs,
    /// Connect once: fail if no simulator is there, stop when it disconnects (default: wait and
    /// reconnect, like stat161).
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    record: RecordArgs,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let interval = output::parse_duration(s)?;
    meter161::interval_ns(interval).map_err(|e| e.to_string())?;
    Ok(interval)
}

/// Runs the subcommand until the watch ends, `--count` is reached, or Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> CliResult {
    record::until_stopped(live(args)).await
}

async fn live(args: Args) -> CliResult {
    if args.output.countdown().is_done() {
        return Ok(());
    }
    let config = meter161::ClientConfig {
        interval: args.interval,
        reconnect: !args.once,
        read_batching: Some(READ_BATCHING),
        ..meter161::ClientConfig::default()
    };
    let path = meter161::socket_path(&args.dir);
    eprintln!("telemon: meter161: connecting to {}...", path.display());
    let recording = args.record.start(
        &args.dir.display().to_string(),
        link_type::METER161,
        &path.display().to_string(),
    )?;
    let events: Pin<Box<dyn Stream<Item = Result<Event, ClientError>> + Send>> = match &recording {
        Some(rec) => {
            let target = rec.target();
            Box::pin(meter161::watch_with(&args.dir, config, move |s| Tap::new(s, Arc::clone(&target))))
        }
        None => Box::pin(meter161::watch(&args.dir, config)),
    };
    show(events, &args.output).await
}

/// Shows the samples of `events` as stat161's table or JSON lines (`--count` stops early).
pub async fn show(
    mut events: Pin<Box<dyn Stream<Item = Result<Event, ClientError>> + Send>>,
    output: &OutputArgs,
) -> CliResult {
    let mut countdown = output.countdown();
    if countdown.is_done() {
        return Ok(());
    }
    let mut table = Table::default();
    let mut json = JsonRows::default();
    let mut rows = Rows::default();
    let mut samples = 0u64;
    let mut last_error: Option<ClientError> = None;
    // Rows are written in batches: at 10us intervals a write per row would cost more than the decoding.
    while let Some(event) = rows.next(&mut events).await? {
        match event {
            Ok(Event::Connected(header)) => {
                eprintln!("telemon: meter161: connected");
                table.reset(header);
            }
            Ok(Event::Sample(sample)) => {
                if output.json {
                    json.write(&sample, rows.buffer());
                    rows.row_done()?;
                } else {
                    table.print(&sample, &mut rows)?;
                }
                samples += 1;
                if countdown.tick() {
                    return rows.flush();
                }
            }
            Ok(Event::Disconnected) => eprintln!("telemon: meter161: disconnected"),
            Ok(other) => tracing::debug!(?other, "event not shown"),
            Err(e) if e.is_fatal() => {
                eprintln!("telemon: meter161: {}", message(&e));
                last_error = Some(e);
            }
            Err(e) => eprintln!("telemon: meter161: {}", message(&e)),
        }
    }
    // The watch ended: a wrong version or protocol, or (with --once) a failed connect or a disconnect.
    rows.flush()?;
    match (last_error, output.count) {
        (Some(e), _) => Err(CliError::Peer(message(&e))),
        (None, Some(count)) => {
            Err(CliError::Peer(format!("disconnected after {samples} of {count} samples")))
        }
        (None, None) => Ok(()),
    }
}

/// What an error of the watch says, and for a socket of another protocol what it looks like.
fn message(e: &ClientError) -> String {
    let first = match e {
        ClientError::Protocol(ProtocolError::Decode(DecodeError::OtherProtocol { first })) => {
            Some(&first[..])
        }
        _ => None,
    };
    output::peer_message(e, first)
}

/// stat161's table: columns `max(WIDTH, name)` wide, growing to fit values, each followed by a blank.
#[derive(Debug, Default)]
struct Table {
    header: Option<Arc<Header>>,
    widths: Vec<usize>,
    rows_since_header: usize,
}

impl Table {
    /// Starts over with `header` (after a connect, or when the header changes).
    fn reset(&mut self, header: Arc<Header>) {
        self.widths =
            header.names().iter().zip(header.widths()).map(|(name, &w)| name.len().max(w as usize)).collect();
        self.header = Some(header);
        self.rows_since_header = usize::MAX;
    }

    fn print(&mut self, sample: &Sample, rows: &mut Rows) -> CliResult {
        if !self.header.as_ref().is_some_and(|h| Arc::ptr_eq(h, sample.header())) {
            self.reset(Arc::clone(sample.header()));
        }
        let shown = sample.deltas().unwrap_or(sample.values());
        if self.rows_since_header >= ROWS_PER_HEADER {
            let names = sample.header().names();
            rows.line("")?;
            rows.line(self.line(names))?;
            self.rows_since_header = 0;
        }
        // Like stat161, a column grows to fit a wider value from that row on (the header keeps its
        // spacing until it is reprinted).
        for (width, value) in self.widths.iter_mut().zip(shown) {
            *width = (*width).max(decimal_len(*value));
        }
        let buf = rows.buffer();
        for (&value, &w) in shown.iter().zip(&self.widths) {
            push_cell(buf, value, w);
        }
        buf.push(b'\n');
        self.rows_since_header += 1;
        rows.row_done()
    }

    fn line(&self, cells: &[impl AsRef<str>]) -> String {
        cells.iter().zip(&self.widths).map(|(cell, &w)| format!("{:<w$} ", cell.as_ref())).collect()
    }
}

/// `--json` rows, written by hand: the same text as `serde_json::to_writer(sample)`, with each
/// field's `"name":` escaped once per header instead of once per row (serde's map writer cost more
/// than the decoding at a 10 us interval).
#[derive(Debug, Default)]
struct JsonRows {
    header: Option<Arc<Header>>,
    /// Each field's `"name":`, JSON-escaped, one after the other; `ends[i]` is where field `i`'s ends.
    keys: Vec<u8>,
    ends: Vec<usize>,
}

impl JsonRows {
    /// Appends `sample` as one JSON line.
    fn write(&mut self, sample: &Sample, buf: &mut Vec<u8>) {
        if !self.header.as_ref().is_some_and(|h| Arc::ptr_eq(h, sample.header())) {
            self.keys.clear();
            self.ends.clear();
            for name in sample.header().names() {
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut self.keys, name);
                self.keys.push(b':');
                self.ends.push(self.keys.len());
            }
            self.header = Some(Arc::clone(sample.header()));
        }
        buf.push(b'{');
        let any = self.fields(sample.values(), buf);
        if let Some(deltas) = sample.deltas() {
            if any {
                buf.push(b',');
            }
            buf.extend_from_slice(b"\"delta\":{");
            self.fields(deltas, buf);
            buf.push(b'}');
        }
        buf.extend_from_slice(b"}\n");
    }

    /// Appends `"name":value` for each field that has a value, comma-separated; whether there was any.
    fn fields(&self, values: &[u64], buf: &mut Vec<u8>) -> bool {
        let mut start = 0;
        for (i, (&end, &value)) in self.ends.iter().zip(values).enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(&self.keys[start..end]);
            buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
            start = end;
        }
        !self.ends.is_empty() && !values.is_empty()
    }
}

/// Appends `value` in decimal, left-aligned in `width` columns, and a blank: `format!("{value:<width$} ")`
/// without the formatting machinery, which cost more than the decoding at a 10 us interval.
fn push_cell(buf: &mut Vec<u8>, value: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[start..]);
    let padding = width.saturating_sub(digits.len() - start) + 1;
    buf.resize(buf.len() + padding, b' ');
}

/// How many digits `value` prints as.
fn decimal_len(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_of(values: &[&[u64]]) -> Vec<Sample> {
        let mut session = meter161::Session::new();
        session.handle(meter161::ServerMessage::Head(vec!["nsec".into(), "irqs".into()])).unwrap();
        session.handle(meter161::ServerMessage::Width(vec![11, 4])).unwrap();
        values
            .iter()
            .map(|v| match session.handle(meter161::ServerMessage::Data(v.to_vec())).unwrap() {
                Some(meter161::Update::Sample(s)) => s,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn json_rows_keep_head_order_and_add_deltas_after_the_first() {
        let rows = rows_of(&[&[100, 4294967290], &[300, 5]]);
        assert_eq!(serde_json::to_string(&rows[0]).unwrap(), r#"{"nsec":100,"irqs":4294967290}"#);
        assert_eq!(
            serde_json::to_string(&rows[1]).unwrap(),
            r#"{"nsec":300,"irqs":5,"delta":{"nsec":200,"irqs":11}}"#
        );
    }

    proptest::proptest! {
        /// The hand-written JSON rows are serde's, whatever the names (escapes, non-ASCII) and values.
        #[test]
        fn json_rows_are_what_serde_writes(
            names in proptest::collection::vec("[a-z\\\\\"\n\u{1}é]{0,6}", 1..5),
            rows in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u64>(), 5), 1..4),
        ) {
            let mut session = meter161::Session::new();
            let n = names.len();
            session.handle(meter161::ServerMessage::Head(names)).unwrap();
            let mut json = JsonRows::default();
            let mut compared = 0;
            for mut values in rows {
                values.truncate(n);
                let update = session.handle(meter161::ServerMessage::Data(values)).unwrap();
                if let Some(meter161::Update::Sample(sample)) = update {
                    let mut ours = Vec::new();
                    json.write(&sample, &mut ours);
                    let mut serde = serde_json::to_vec(&sample).unwrap();
                    serde.push(b'\n');
                    proptest::prop_assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(serde).unwrap());
                    compared += 1;
                }
            }
            proptest::prop_assert!(compared > 0, "every DATA line is a sample");
        }
    }

    #[test]
    fn table_columns_are_as_wide_as_stat161s() {
        let rows = rows_of(&[&[788289383, 0], &[788289384, 123456]]);
        let mut table = Table::default();
        table.reset(Arc::clone(rows[0].header()));
        assert_eq!(table.line(rows[0].header().names()), "nsec        irqs ");
        assert_eq!(table.line(&["788289383", "0"]), "788289383   0    ");
        let mut out = Rows::default();
        table.rows_since_header = 0;
        table.print(&rows[1], &mut out).unwrap();
        assert_eq!(out.buffer(), b"1           123456 \n", "deltas, the column grown to fit");
        assert_eq!([0, 9, 10, 99, 100, u64::MAX].map(decimal_len), [1, 1, 2, 2, 3, 20]);
        for (value, width) in [(0, 0), (0, 4), (7, 1), (1234, 2), (1234, 11), (u64::MAX, 20), (u64::MAX, 25)]
        {
            let mut cell = Vec::new();
            push_cell(&mut cell, value, width);
            assert_eq!(String::from_utf8(cell).unwrap(), format!("{value:<width$} "));
        }
    }

    #[test]
    fn intervals_are_checked_on_the_command_line() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("10us"), Ok(Duration::from_micros(10)));
        assert!(parse_interval("9us").is_err());
        assert!(parse_interval("3s").is_err());
    }
}
