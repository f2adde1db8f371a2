//! Tino's smon stream, from TCP or from a file followed as it grows: numbers become
//! `smon_value{name,index}`, strings `smon_info{name,index,value}`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use smon_codec::{DecodeError, DecoderConfig, Update, UpdateReader, Value};
use tokio::io::AsyncRead;

use super::{flush_due, within, Retry, CONNECT_TIMEOUT};
use crate::fleet::model::{ErrorKind, MetricKind, TargetState};
use crate::fleet::target::{Failure, Publisher};
use crate::record;

/// How often a followed file is checked for growth.
pub const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// Where a smon stream comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A TCP address.
    Connect(String),
    /// A file, followed as it grows.
    File(PathBuf),
}

/// Reads the stream forever, reconnecting (or reopening) after each end.
pub async fn run(mut p: Publisher, source: Source) {
    let mut retry = Retry::default();
    loop {
        let failure = session(&mut p, &source).await;
        retry.after(&mut p, failure).await;
    }
}

async fn session(p: &mut Publisher, source: &Source) -> Failure {
    match source {
        Source::Connect(addr) => {
            match within(CONNECT_TIMEOUT, "connect", tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let stream = record::tap(
                        stream,
                        &p.name().clone(),
                        record::Protocol::Smon,
                        addr,
                        p.received().clone(),
                    );
                    collect(p, UpdateReader::new(stream, DecoderConfig::default())).await
                }
                Ok(Err(e)) => Failure::new(ErrorKind::Connect, format!("{addr}: {e}")),
                Err(f) => f,
            }
        }
        Source::File(path) => match tokio::fs::File::open(path).await {
            Ok(file) => {
                let file = telemon_capture::Tap::off(file).counting(p.received().clone());
                collect(p, UpdateReader::new(file, DecoderConfig::default()).follow(FOLLOW_POLL)).await
            }
            Err(e) => Failure::new(ErrorKind::Connect, format!("{}: {e}", path.display())),
        },
    }
}

/// Reads updates until the stream fails; the target is up from its first decoded update (also used to
/// replay a recording through this collector).
pub async fn collect<R: AsyncRead + Unpin>(p: &mut Publisher, mut reader: UpdateReader<R>) -> Failure {
    // The current text of each (name, index), so that a new string replaces the old series.
    let mut texts: HashMap<(Arc<str>, Box<str>), Box<str>> = HashMap::new();
    let mut index_text = String::new();
    loop {
        let first = tokio::select! {
            next = reader.next() => next,
            () = flush_due(p.flush_due()) => {
                p.flush_if_dirty();
                continue;
            }
        };
        let Some(first) = first else {
            return Failure::new(ErrorKind::Connect, "the stream ended");
        };
        let mut item = Some(first);
        while let Some(result) = item {
            match result {
                Ok(update) => {
                    if p.state() != TargetState::Up {
                        p.up();
                    }
                    if let Update::Value { name, index, value, .. } = update {
                        record(p, &mut texts, &mut index_text, name, &index, value);
                    }
                }
                Err(DecodeError::Io(e)) => return Failure::new(ErrorKind::Connect, e),
                // The decoder skips to the next resync.
                Err(e) => p.error(&Failure::new(ErrorKind::Decode, e)),
            }
            item = reader.next_buffered();
        }
        p.maybe_flush();
    }
}

fn record(
    p: &mut Publisher,
    texts: &mut HashMap<(Arc<str>, Box<str>), Box<str>>,
    index_text: &mut String,
    name: Arc<str>,
    index: &[u64],
    value: Value,
) {
    index_text.clear();
    for (i, n) in index.iter().enumerate() {
        if i > 0 {
            index_text.push(',');
        }
        index_text.push_str(itoa::Buffer::new().format(*n));
    }
    let index = index_text.as_str();
    match value {
        Value::Unsigned(v) => p.put(
            "smon_value",
            "A number from the smon stream, by name and index path.",
            MetricKind::Gauge,
            &[("name", &name), ("index", index)],
            v,
        ),
        Value::Text(t) => {
            let text = String::from_utf8_lossy(&t);
            let text = crate::fleet::store::cut_label(&text);
            let key = (name, Box::<str>::from(index));
            if let Some(old) = texts.get(&key) {
                if **old == *text {
                    return;
                }
                p.remove("smon_info", &[("name", &key.0), ("index", index), ("value", old)]);
            } else if texts.len() >= p.series_limit() {
                return;
            }
            p.put(
                "smon_info",
                "A string from the smon stream, as the value label.",
                MetricKind::Info,
                &[("name", &key.0), ("index", index), ("value", text)],
                1u64,
            );
            texts.insert(key, Box::from(text));
        }
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any number or text at any index path maps to a finite value without a panic.
        #[test]
        fn any_value_maps_to_a_finite_value(
            name in "[ -~]{0,30}",
            index in proptest::collection::vec(any::<u64>(), 0..4),
            number in any::<u64>(),
            text in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            use super::super::testing::{check_rendered, publisher};
            let (reg, mut p) = publisher(crate::fleet::Protocol::Smon);
            let (mut texts, mut index_text) = (HashMap::new(), String::new());
            let name: Arc<str> = Arc::from(name.as_str());
            record(&mut p, &mut texts, &mut index_text, name.clone(), &index, Value::Unsigned(number));
            record(&mut p, &mut texts, &mut index_text, name, &index, Value::Text(text.into()));
            prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }
}
