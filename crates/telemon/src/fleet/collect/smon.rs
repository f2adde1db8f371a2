//! Tino's smon stream, from TCP or from a file followed as it grows: numbers become
//! `smon_value{name,index}`, strings `smon_info{name,index,value}`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use smon_codec::{DecodeError, DecoderConfig, UpdateReader, UpdateRef, ValueRef};
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
/// replay a recording through this collector). Updates are borrowed from the decoder, so a value
/// that reaches an existing series allocates nothing.
pub async fn collect<R: AsyncRead + Unpin>(p: &mut Publisher, mut reader: UpdateReader<R>) -> Failure {
    let mut texts = Texts::default();
    let mut index_text = String::new();
    loop {
        while let Some(result) = reader.next_buffered_ref() {
            match result {
                Ok(update) => {
                    if p.state() != TargetState::Up {
                        p.up();
                    }
                    if let UpdateRef::Value { name, index, value, .. } = update {
                        record(p, &mut texts, &mut index_text, name, index, value);
                    }
                }
                Err(DecodeError::Io(e)) => return Failure::new(ErrorKind::Connect, e),
                // The decoder skips to the next resync.
                Err(e) => p.error(&Failure::new(ErrorKind::Decode, e)),
            }
        }
        p.maybe_flush();
        tokio::select! {
            more = reader.fill() => match more {
                None => return Failure::new(ErrorKind::Connect, "the stream ended"),
                Some(Err(e)) => return Failure::new(ErrorKind::Connect, e),
                Some(Ok(())) => {}
            },
            () = flush_due(p.flush_due()) => p.flush_if_dirty(),
        }
    }
}

/// The current text of each string's (name, index), so that a new string replaces the old series.
#[derive(Debug, Default)]
struct Texts {
    /// By `name`, a NUL, then the index text.
    current: HashMap<String, Box<str>>,
    key: String,
}

fn record(
    p: &mut Publisher,
    texts: &mut Texts,
    index_text: &mut String,
    name: &str,
    index: &[u64],
    value: ValueRef<'_>,
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
        ValueRef::Unsigned(v) => p.put(
            "smon_value",
            "A number from the smon stream, by name and index path.",
            MetricKind::Gauge,
            &[("name", name), ("index", index)],
            v,
        ),
        ValueRef::Text(t) => {
            let text = String::from_utf8_lossy(t);
            let text = crate::fleet::store::cut_label(&text);
            let key = &mut texts.key;
            key.clear();
            key.push_str(name);
            key.push('\0');
            key.push_str(index);
            if let Some(old) = texts.current.get(key.as_str()) {
                if **old == *text {
                    return;
                }
                p.remove("smon_info", &[("name", name), ("index", index), ("value", old)]);
            } else if texts.current.len() >= p.series_limit() {
                return;
            }
            p.put(
                "smon_info",
                "A string from the smon stream, as the value label.",
                MetricKind::Info,
                &[("name", name), ("index", index), ("value", text)],
                1u64,
            );
            texts.current.insert(key.clone(), Box::from(text));
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
            let (mut texts, mut index_text) = (Texts::default(), String::new());
            record(&mut p, &mut texts, &mut index_text, &name, &index, ValueRef::Unsigned(number));
            record(&mut p, &mut texts, &mut index_text, &name, &index, ValueRef::Text(&text));
            prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }
}
