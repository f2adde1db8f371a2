//! Tino's smon stream, from TCP or from a file followed as it grows: numbers become
//! `smon_value{name,index}`, strings `smon_info{name,index,value}`. A value without an index path has
//! no `index` label (an empty label value is no label: the store leaves it out), and an empty string
//! no `value` label.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use smon_codec::{DecodeError, DecoderConfig, UpdateReader, UpdateRef, ValueRef};
use tokio::io::AsyncRead;

use crate::collect::{connecting, flush_due, Retry, CONNECT_TIMEOUT};
use crate::model::{ErrorKind, MetricKind, TargetState};
use crate::store::SlotId;
use crate::target::{Failure, Publisher};

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
            match connecting(CONNECT_TIMEOUT, "connect", tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let stream = p.tapper(addr)(stream);
                    collect(p, UpdateReader::new(stream, DecoderConfig::default())).await
                }
                Ok(Err(e)) => Failure::new(ErrorKind::Connect, format!("{addr}: {e}")),
                Err(f) => f,
            }
        }
        Source::File(path) => match tokio::fs::File::open(path).await {
            Ok(file) => {
                let file = telemon_capture::Tap::off(file).counting(p.received().clone());
                // Boxed: a file reader's state is the larger, and inline it would size the task of
                // every stream, TCP ones (most of a fleet) included.
                Box::pin(collect(p, UpdateReader::new(file, DecoderConfig::default()).follow(FOLLOW_POLL)))
                    .await
            }
            Err(e) => Failure::new(ErrorKind::Connect, format!("{}: {e}", path.display())),
        },
    }
}

/// Reads updates until the stream fails; the target is up from its first decoded update (also used to
/// replay a recording through this collector). Updates are borrowed from the decoder, and a number
/// for an existing series goes straight into its slot, kept by token and index path: no labels are
/// built for it.
#[allow(clippy::manual_async_fn)] // see the comment in the body
pub fn collect<'a, R: AsyncRead + Unpin + 'a>(
    p: &'a mut Publisher,
    mut reader: UpdateReader<R>,
) -> impl Future<Output = Failure> + 'a {
    // Not an `async fn`: that would keep `reader` twice in its future (the argument as passed, and
    // moved into the body), and it is the largest part of a target's task, alive as long as it.
    async move {
        let mut seen = Seen::default();
        loop {
            while let Some(result) = reader.next_buffered_ref() {
                match result {
                    Ok(update) => {
                        if p.state() != TargetState::Up {
                            p.up();
                        }
                        match update {
                            UpdateRef::Value { token, name, index, value } => {
                                record(p, &mut seen, token, name, index, value)
                            }
                            // A token's number may be given a new name: its series are other ones.
                            UpdateRef::Define { token, .. } => seen.slots.forget(token),
                            // A resync forgets every token.
                            UpdateRef::Resync => seen.slots = Slots::default(),
                        }
                    }
                    Err(DecodeError::Io(e)) => return Failure::new(ErrorKind::Connect, e),
                    // A peer of another protocol: reconnecting (after the back-off) may find the stream.
                    Err(e @ DecodeError::OtherProtocol { .. }) => {
                        return Failure::new(ErrorKind::Protocol, e)
                    }
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
}

/// What a stream's collector remembers from one update to the next.
#[derive(Debug, Default)]
struct Seen {
    texts: Texts,
    slots: Slots,
    /// Room for an index path's text.
    index_text: String,
}

/// The current text of each string's (name, index), so that a new string replaces the old series.
#[derive(Debug, Default)]
struct Texts {
    /// By `name`, a NUL, then the index text.
    current: HashMap<String, Box<str>>,
    key: String,
}

/// The slot of each number's series, by token and index path ([`key`]), 16 bytes a series, and the
/// last bytes of each string, each in one vector sorted by key: the encoder gives each indexed series
/// a token of its own (A13), so most tokens have one series, and a vector per token would cost more
/// than its one entry.
///
/// A slot is only ever kept for the series of its token's current name (a definition forgets the
/// token's slots), so a hit is always the right series; a slot the store no longer has (the target
/// reconnected) is refused by it and looked up again.
#[derive(Debug, Default)]
struct Slots {
    sorted: Vec<(u64, SlotId)>,
    /// Where the key after the last one found is: the encoder numbers tokens in the order it first
    /// sends them, and sends a run's values in the same order, so it is usually the next key.
    next: usize,
    /// The bytes of each string as they last came: a string sent again unchanged (smon-sim sends its
    /// names every run) is skipped before any text is made of it.
    texts: Vec<(u64, Box<[u8]>)>,
}

impl Slots {
    fn get(&mut self, key: u64) -> Option<SlotId> {
        let at = match self.sorted.get(self.next) {
            Some(&(k, _)) if k == key => self.next,
            _ => self.sorted.binary_search_by_key(&key, |&(k, _)| k).ok()?,
        };
        self.next = at + 1;
        Some(self.sorted[at].1)
    }

    fn set(&mut self, key: u64, slot: SlotId) {
        put_sorted(&mut self.sorted, key, slot);
    }

    /// Whether `bytes` are the string that last came for `key`.
    fn same_text(&self, key: u64, bytes: &[u8]) -> bool {
        self.texts.binary_search_by_key(&key, |(k, _)| *k).is_ok_and(|at| *self.texts[at].1 == *bytes)
    }

    fn set_text(&mut self, key: u64, bytes: &[u8]) {
        put_sorted(&mut self.texts, key, bytes.into());
    }

    /// Forgets the slots and strings of every index path of `token`.
    fn forget(&mut self, token: u64) {
        forget_sorted(&mut self.sorted, token);
        forget_sorted(&mut self.texts, token);
    }
}

/// Sets `key`'s entry in a vector sorted by key.
fn put_sorted<T>(sorted: &mut Vec<(u64, T)>, key: u64, value: T) {
    match sorted.binary_search_by_key(&key, |(k, _)| *k) {
        Ok(at) => sorted[at].1 = value,
        Err(at) => sorted.insert(at, (key, value)),
    }
}

/// Removes the entries of every [`key`] of `token` from a vector sorted by key.
fn forget_sorted<T>(sorted: &mut Vec<(u64, T)>, token: u64) {
    if token < SLOT_TOKENS {
        let first = sorted.partition_point(|(k, _)| k >> TOKEN_SHIFT < token);
        let end = sorted.partition_point(|(k, _)| k >> TOKEN_SHIFT <= token);
        sorted.drain(first..end);
    }
}

/// Token numbers below this have their numbers' slots kept (the encoder numbers tokens 1, 2, 3, ...).
const SLOT_TOKENS: u64 = 1 << (64 - TOKEN_SHIFT);
/// Where the token sits in a [`key`]; below it, two bits for the index depth and 50 for the path.
const TOKEN_SHIFT: u32 = 52;

/// A token and an index path as one number, for the tokens below [`SLOT_TOKENS`] and the paths that
/// most series have (none, one level below 2^50, two levels below 2^25: a CPU, a disk's major and
/// minor); different pairs never give the same key. Others are looked up by their labels each time.
fn key(token: u64, index: &[u64]) -> Option<u64> {
    let path = match *index {
        [] => 0,
        [a] if a < 1 << 50 => 1 << 50 | a,
        [a, b] if a < 1 << 25 && b < 1 << 25 => 2 << 50 | a << 25 | b,
        _ => return None,
    };
    (token < SLOT_TOKENS).then_some(token << TOKEN_SHIFT | path)
}

fn record(p: &mut Publisher, seen: &mut Seen, token: u64, name: &str, index: &[u64], value: ValueRef<'_>) {
    let slot_key = key(token, index);
    match value {
        ValueRef::Unsigned(v) => {
            let cached = slot_key.and_then(|k| seen.slots.get(k));
            if cached.is_some_and(|slot| p.put_slot(slot, v)) {
                return;
            }
        }
        ValueRef::Text(t) => {
            if slot_key.is_some_and(|k| seen.slots.same_text(k, t)) {
                return;
            }
        }
    }
    let index_text = &mut seen.index_text;
    index_text.clear();
    for (i, n) in index.iter().enumerate() {
        if i > 0 {
            index_text.push(',');
        }
        index_text.push_str(itoa::Buffer::new().format(*n));
    }
    let index = index_text.as_str();
    let texts = &mut seen.texts;
    match value {
        ValueRef::Unsigned(v) => {
            let labels = [("name", name), ("index", index)];
            let help = "A number from the smon stream, by name and index path.";
            if let Some(slot) = p.slot("smon_value", help, MetricKind::Gauge, &labels) {
                p.put_slot(slot, v);
                if let Some(k) = slot_key {
                    seen.slots.set(k, slot);
                }
            }
        }
        ValueRef::Text(t) => {
            let text = String::from_utf8_lossy(t);
            let text = crate::store::cut_label(&text);
            let key = &mut texts.key;
            key.clear();
            key.push_str(name);
            key.push('\0');
            key.push_str(index);
            // Unchanged when its token's bytes were forgotten (a definition, a resync) and the same
            // string came: the series holds it, and the bytes are kept again below.
            let old = texts.current.get(key.as_str());
            if old.is_none_or(|old| **old != *text) {
                if let Some(old) = old {
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
            if let Some(k) = slot_key {
                seen.slots.set_text(k, t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{render, Format};
    use bytes::BytesMut;
    use smon_codec::{Sample, StreamEncoder};

    /// The lines starting with `prefix` of the page that collecting `bytes` to their end publishes,
    /// sorted.
    async fn collected(bytes: &[u8], prefix: &str) -> Vec<String> {
        let (reg, mut p) = crate::collect::testing::publisher(crate::model::Protocol::SMON);
        let failure = collect(&mut p, UpdateReader::new(bytes, DecoderConfig::default())).await;
        assert!(failure.message.contains("ended"), "{failure:?}");
        p.flush();
        page_lines(&reg, prefix)
    }

    /// The lines of the registry's page that start with `prefix`, sorted.
    pub(super) fn page_lines(reg: &crate::registry::Registry, prefix: &str) -> Vec<String> {
        let page = render(&reg.snapshot(), Format::Text004);
        let mut lines: Vec<String> =
            page.lines().filter(|l| l.starts_with(prefix)).map(str::to_owned).collect();
        lines.sort_unstable();
        lines
    }

    #[test]
    fn tokens_and_index_paths_key_to_different_numbers() {
        let paths: [&[u64]; 8] =
            [&[], &[0], &[1], &[0, 0], &[0, 1], &[1, 0], &[(1 << 50) - 1], &[(1 << 25) - 1, (1 << 25) - 1]];
        let keys: Vec<u64> = [1, 2, SLOT_TOKENS - 1]
            .iter()
            .flat_map(|&t| paths.iter().map(move |p| key(t, p).unwrap()))
            .collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
        assert_eq!(key(1, &[1 << 50]), None);
        assert_eq!(key(1, &[1 << 25, 0]), None);
        assert_eq!(key(1, &[1, 2, 3]), None);
        assert_eq!(key(SLOT_TOKENS, &[]), None);
    }

    /// A string that comes again unchanged is skipped, by its bytes, but not when its token now names
    /// another string: the same bytes then make the other name's series.
    #[tokio::test]
    async fn a_repeated_string_is_kept_once_and_a_renamed_tokens_string_is_its_own() {
        let mut bytes = BytesMut::new();
        let mut enc = StreamEncoder::default();
        for (name, text) in [("sss.a", "x"), ("sss.a", "x"), ("sss.a", "y"), ("sss.a", "y")] {
            enc.encode(&Sample::new(name, vec![], text), &mut bytes).unwrap();
        }
        enc.resync(&mut bytes);
        enc.encode(&Sample::new("sss.b", vec![], "y"), &mut bytes).unwrap();
        assert_eq!(
            collected(&bytes, "smon_info{").await,
            [
                r#"smon_info{target="t",name="sss.a",value="y"} 1"#,
                r#"smon_info{target="t",name="sss.b",value="y"} 1"#,
            ]
        );
    }

    /// An empty label value is no label: a value without an index path has no `index`, an empty
    /// string no `value`, and a string that becomes empty (or stops being) replaces its series.
    #[tokio::test]
    async fn an_empty_index_or_string_is_no_label() {
        let mut bytes = BytesMut::new();
        let mut enc = StreamEncoder::default();
        for (name, text) in [("sss.a", "x"), ("sss.a", ""), ("sss.b", ""), ("sss.b", "y")] {
            enc.encode(&Sample::new(name, vec![], text), &mut bytes).unwrap();
        }
        enc.encode(&Sample::new("nnn.n", vec![], 5u64), &mut bytes).unwrap();
        let lines = collected(&bytes, "smon_").await;
        assert_eq!(
            lines,
            [
                r#"smon_info{target="t",name="sss.a"} 1"#,
                r#"smon_info{target="t",name="sss.b",value="y"} 1"#,
                r#"smon_value{target="t",name="nnn.n"} 5"#,
            ]
        );
    }

    #[test]
    fn a_string_that_comes_again_after_its_token_was_forgotten_is_skipped_by_its_bytes_again() {
        let (_reg, mut p) = crate::collect::testing::publisher(crate::model::Protocol::SMON);
        let mut seen = Seen::default();
        let k = key(1, &[]).unwrap();
        record(&mut p, &mut seen, 1, "sss.a", &[], ValueRef::Text(b"x"));
        assert!(seen.slots.same_text(k, b"x"));
        // A resync forgets the bytes; the same string then finds its series unchanged.
        seen.slots.forget(1);
        assert!(!seen.slots.same_text(k, b"x"));
        record(&mut p, &mut seen, 1, "sss.a", &[], ValueRef::Text(b"x"));
        assert!(seen.slots.same_text(k, b"x"), "the bytes are kept again");
    }

    #[test]
    fn a_definition_forgets_its_tokens_slots_only() {
        let (_reg, mut p) = crate::collect::testing::publisher(crate::model::Protocol::SMON);
        let mut slots = Slots::default();
        for (i, (t, path)) in
            [(1, &[][..]), (2, &[0][..]), (2, &[1, 2][..]), (3, &[][..])].into_iter().enumerate()
        {
            let slot = p.slot("smon_value", "h", MetricKind::Gauge, &[("index", &i.to_string())]).unwrap();
            slots.set(key(t, path).unwrap(), slot);
        }
        slots.forget(2);
        let kept: Vec<bool> = [(1, &[][..]), (2, &[0][..]), (2, &[1, 2][..]), (3, &[][..])]
            .iter()
            .map(|(t, p)| slots.get(key(*t, p).unwrap()).is_some())
            .collect();
        assert_eq!(kept, [true, false, false, true]);
    }

    /// A token number that names another series after a resync (or a definition) must not reach the
    /// series its old name's slot was kept for; deep index paths (not packed) still reach theirs.
    #[tokio::test]
    async fn numbers_reach_their_series_when_a_token_is_renamed() {
        let mut bytes = BytesMut::new();
        let mut enc = StreamEncoder::default();
        for (name, index, v) in [("aaa.x", vec![], 1u64), ("aaa.x", vec![3], 2), ("ccc.z", vec![1, 2, 3], 3)]
        {
            enc.encode(&Sample::new(name, index, v), &mut bytes).unwrap();
        }
        for (name, index, v) in
            [("aaa.x", vec![], 11u64), ("aaa.x", vec![3], 12), ("ccc.z", vec![1, 2, 3], 13)]
        {
            enc.encode(&Sample::new(name, index, v), &mut bytes).unwrap();
        }
        // Token 1 is now `bbb.y`, token 2 `aaa.x`.
        enc.resync(&mut bytes);
        for (name, index, v) in [("bbb.y", vec![], 21u64), ("aaa.x", vec![], 22), ("bbb.y", vec![3], 23)] {
            enc.encode(&Sample::new(name, index, v), &mut bytes).unwrap();
        }
        assert_eq!(
            collected(&bytes, "smon_value{").await,
            [
                r#"smon_value{target="t",name="aaa.x",index="3"} 12"#,
                r#"smon_value{target="t",name="aaa.x"} 22"#,
                r#"smon_value{target="t",name="bbb.y",index="3"} 23"#,
                r#"smon_value{target="t",name="bbb.y"} 21"#,
                r#"smon_value{target="t",name="ccc.z",index="1,2,3"} 13"#,
            ]
        );
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// One step of a stream as the collector sees it: a number for a token at an index path, or a
    /// token given another name.
    #[derive(Debug, Clone)]
    enum Op {
        Value { token: u64, index: Vec<u64>, value: u64 },
        Rename { token: u64, name: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few tokens and small paths, so that series repeat; some tokens and levels beyond what keys hold.
        let token = prop_oneof![0u64..4, Just(SLOT_TOKENS), Just(u64::MAX)];
        let level = prop_oneof![0u64..3, Just(1 << 25), Just(1 << 50), Just(u64::MAX)];
        prop_oneof![
            4 => (token.clone(), proptest::collection::vec(level, 0..4), any::<u64>())
                .prop_map(|(token, index, value)| Op::Value { token, index, value }),
            1 => (token, 0usize..3).prop_map(|(token, name)| Op::Rename { token, name }),
        ]
    }

    proptest! {
        /// The slots change nothing that is published: a stream's numbers give the same page as
        /// when each is looked up by its labels.
        #[test]
        fn the_slots_publish_what_the_labels_would(ops in proptest::collection::vec(op(), 0..60)) {
            use crate::collect::testing::publisher;
            const NAMES: [&str; 3] = ["aaa.x", "bbb.y", "ccc.z"];
            let (cached_reg, mut cached) = publisher(crate::model::Protocol::SMON);
            let (looked_up_reg, mut looked_up) = publisher(crate::model::Protocol::SMON);
            let mut seen = Seen::default();
            let mut names: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
            for op in ops {
                match op {
                    Op::Rename { token, name } => {
                        names.insert(token, name);
                        seen.slots.forget(token);
                    }
                    Op::Value { token, index, value } => {
                        let name = NAMES[names.get(&token).copied().unwrap_or(0)];
                        let v = ValueRef::Unsigned(value);
                        record(&mut cached, &mut seen, token, name, &index, v);
                        record(&mut looked_up, &mut Seen::default(), token, name, &index, v);
                    }
                }
            }
            cached.flush();
            looked_up.flush();
            let series = |reg| super::tests::page_lines(reg, "smon_value{");
            prop_assert_eq!(series(&cached_reg), series(&looked_up_reg));
        }

        /// Any number or text at any index path maps to a finite value without a panic.
        #[test]
        fn any_value_maps_to_a_finite_value(
            name in "[ -~]{0,30}",
            index in proptest::collection::vec(any::<u64>(), 0..4),
            number in any::<u64>(),
            text in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            use crate::collect::testing::{check_rendered, publisher};
            let (reg, mut p) = publisher(crate::model::Protocol::SMON);
            let mut seen = Seen::default();
            record(&mut p, &mut seen, 1, &name, &index, ValueRef::Unsigned(number));
            record(&mut p, &mut seen, 2, &name, &index, ValueRef::Text(&text));
            prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }
    }
}
