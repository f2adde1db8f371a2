//! System/161's meter socket: one counter per `HEAD` field, the six 32-bit sums unwrapped.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use meter161::{Client, ClientConfig, ClientError, ProtocolError, Sample};

use super::{flush_due, within, Retry, CONNECT_TIMEOUT};
use crate::model::{ErrorKind, MetricKind};
use crate::record;
use crate::series::Num;
use crate::store::{SlotId, Unwrap32};
use crate::target::{Failure, Publisher};

/// The `HEAD` fields that are sums of `uint32_t` counters and wrap at 2^32 (meter161 notes, item 10).
const WRAPPING: [&str; 6] = ["irqs", "exns", "disk", "con", "emu", "net"];

/// The family, HELP text and scale of a known `HEAD` field.
fn family(field: &str) -> Option<(&'static str, &'static str)> {
    Some(match field {
        "nsec" => ("sys161_simulated_seconds_total", "Simulated time since the simulator started."),
        "kinsns" => ("sys161_kernel_instructions_total", "Instructions executed in kernel mode."),
        "uinsns" => ("sys161_user_instructions_total", "Instructions executed in user mode."),
        "udud" => ("sys161_user_stall_cycles_total", "Cycles stalled on user-mode data dependencies (udud)."),
        "idle" => ("sys161_idle_cycles_total", "Cycles spent idle (waiting for an interrupt)."),
        "irqs" => ("sys161_interrupts_total", "Interrupts taken (unwrapped from 32 bits)."),
        "exns" => ("sys161_exceptions_total", "Exceptions taken (unwrapped from 32 bits)."),
        "disk" => ("sys161_disk_blocks_total", "Disk blocks transferred (unwrapped from 32 bits)."),
        "con" => ("sys161_console_chars_total", "Console characters transferred (unwrapped from 32 bits)."),
        "emu" => ("sys161_emufs_operations_total", "Emufs operations (unwrapped from 32 bits)."),
        "net" => ("sys161_network_packets_total", "Network packets (unwrapped from 32 bits)."),
        _ => return None,
    })
}

/// Maps a client error to its kind.
fn kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::HandshakeTimeout(_) => ErrorKind::Timeout,
        ClientError::Protocol(ProtocolError::Decode(_)) => ErrorKind::Decode,
        ClientError::Protocol(_) | ClientError::IntervalOutOfRange { .. } => ErrorKind::Protocol,
        _ => ErrorKind::Connect,
    }
}

/// Watches the simulator in `dir` forever, asking for `interval`.
pub async fn run(mut p: Publisher, dir: PathBuf, interval: Duration) {
    let path = meter161::socket_path(&dir);
    // Only the socket's path is used from here on, for as long as the target: its heap copy goes now.
    drop(dir);
    let mut retry = Retry::default();
    loop {
        let failure = session(&mut p, &path, interval).await;
        retry.after(&mut p, failure).await;
    }
}

async fn session(p: &mut Publisher, path: &Path, interval: Duration) -> Failure {
    // In a block: the config, name and address are for connecting, and would otherwise be held (in
    // the task's future, and on the heap) for as long as the connection.
    let client = {
        let config = ClientConfig::default().interval(interval).handshake_timeout(CONNECT_TIMEOUT);
        let (name, address, received) = (p.name().clone(), path.display().to_string(), p.received().clone());
        let tap = |s| record::tap(s, &name, record::Protocol::Meter161, &address, received);
        match within(CONNECT_TIMEOUT, "connect", Client::connect_path_with(path, &config, tap)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Failure::new(kind(&e), e),
            Err(f) => return f,
        }
    };
    collect(p, client).await
}

/// Reads samples from a connected client until the connection fails (also used to replay a recording
/// through this collector).
#[allow(clippy::manual_async_fn)] // see the comment in the body
pub fn collect<'a, S>(p: &'a mut Publisher, mut client: Client<S>) -> impl Future<Output = Failure> + 'a
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'a,
{
    // Not an `async fn`: that would keep `client` twice in its future (the argument as passed, and
    // moved into the body), and it is the largest part of a target's task, alive as long as it.
    async move {
        p.up();
        // A new connection is a new simulator run: its counters start afresh.
        let mut fields = Fields::default();
        loop {
            tokio::select! {
                item = client.next() => match item {
                    None => return Failure::new(ErrorKind::Connect, "the simulator closed the connection"),
                    Some(Err(e)) if e.is_fatal() => return Failure::new(kind(&e), e),
                    Some(Err(e)) => p.error(&Failure::new(kind(&e), e)),
                    Some(Ok(sample)) => {
                        record(p, &sample, &mut fields);
                        p.maybe_flush();
                    }
                },
                () = flush_due(p.flush_due()) => p.flush_if_dirty(),
            }
        }
    }
}

/// What one connection remembers of its fields: the 32-bit unwrapping and the slot of each field's
/// series, for the header they were resolved against.
#[derive(Debug, Default)]
pub struct Fields {
    header: Option<std::sync::Arc<meter161::Header>>,
    /// How each field's value is read, from its name (found once per header).
    kinds: Vec<FieldKind>,
    unwrap: Vec<Unwrap32>,
    slots: Vec<Option<SlotId>>,
}

/// How a `HEAD` field's value becomes its series' value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    /// As it is.
    Count,
    /// A sum of 32-bit counters ([`WRAPPING`]): unwrapped.
    Wrapping,
    /// `nsec`: nanoseconds, written as seconds.
    Nanoseconds,
}

impl FieldKind {
    fn of(name: &str) -> FieldKind {
        match name {
            "nsec" => FieldKind::Nanoseconds,
            n if WRAPPING.contains(&n) => FieldKind::Wrapping,
            _ => FieldKind::Count,
        }
    }
}

/// Sets one series per field of `sample`: each field's series is looked up once per connection,
/// then its value is written into its slot.
pub fn record(p: &mut Publisher, sample: &Sample, fields: &mut Fields) {
    let names = sample.header().names();
    if !fields.header.as_ref().is_some_and(|h| std::sync::Arc::ptr_eq(h, sample.header())) {
        fields.header = Some(sample.header().clone());
        fields.slots.clear();
        fields.unwrap.resize(names.len(), Unwrap32::default());
        fields.kinds.clear();
        fields.kinds.extend(names.iter().map(|n| FieldKind::of(n)));
    }
    fields.slots.resize(names.len(), None);
    for (i, (name, &value)) in names.iter().zip(sample.values()).enumerate() {
        let kind = fields.kinds[i];
        let value = match u32::try_from(value) {
            Ok(v) if kind == FieldKind::Wrapping => fields.unwrap[i].next(v),
            _ => value,
        };
        let num = match kind {
            FieldKind::Nanoseconds => Num::Float(value as f64 / 1e9),
            _ => Num::Uint(value),
        };
        let slot = match fields.slots[i] {
            Some(slot) => slot,
            None => {
                let found = match family(name) {
                    Some((fam, help)) => p.slot(fam, help, MetricKind::Counter, &[]),
                    None => p.slot(
                        "sys161_field_total",
                        "A HEAD field this telemon does not know, by name.",
                        MetricKind::Counter,
                        &[("field", name)],
                    ),
                };
                let Some(slot) = found else { continue };
                fields.slots[i] = Some(slot);
                slot
            }
        };
        if !p.put_slot(slot, num) {
            fields.slots[i] = None;
        }
    }
}

/// The most directories one `dir_glob` watches.
pub const MAX_GLOB_TARGETS: usize = 10_000;

/// Writes the bytes of a path (or of one component) as text, losslessly: UTF-8 is kept, a
/// backslash becomes `\\` and every byte that is not part of valid UTF-8 becomes `\xHH` (two
/// lowercase hex digits). Two different byte strings never give the same text.
pub fn escape_path_bytes(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

fn escape_os(s: &std::ffi::OsStr) -> String {
    escape_path_bytes(s.as_encoded_bytes())
}

fn has_wildcard(component: &std::ffi::OsStr) -> bool {
    component.as_encoded_bytes().iter().any(|b| matches!(b, b'*' | b'?' | b'['))
}

/// The target name of a `dir_glob` match: `BLOCK/PART/...`, the parts being the directory's path
/// components that the pattern's wildcard components (those with `*`, `?` or `[`) matched, in
/// order, each escaped by [`escape_path_bytes`]; a `**` contributes every component it matched.
/// `/home/*/os161/root` names `/home/alice/os161/root` `BLOCK/alice`. A pattern without wildcards
/// names its one match `BLOCK`. Different directories matched by one pattern get different names.
pub fn glob_target_name(block: &str, pattern: &str, dir: &Path) -> String {
    let pat: Vec<_> = Path::new(pattern).components().map(|c| c.as_os_str().to_owned()).collect();
    let got: Vec<_> = dir.components().map(|c| c.as_os_str().to_owned()).collect();
    let mut parts: Vec<String> = Vec::new();
    match pat.iter().position(|c| c.as_encoded_bytes() == b"**") {
        Some(deep) if got.len() + 1 >= pat.len() => {
            let tail = pat.len() - deep - 1;
            let (head_pat, tail_pat) = (&pat[..deep], &pat[deep + 1..]);
            let (head_got, rest) = got.split_at(deep);
            let (middle, tail_got) = rest.split_at(rest.len() - tail);
            parts.extend(
                head_pat.iter().zip(head_got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)),
            );
            parts.extend(middle.iter().map(|g| escape_os(g)));
            parts.extend(
                tail_pat.iter().zip(tail_got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)),
            );
        }
        None if got.len() == pat.len() => {
            parts.extend(pat.iter().zip(&got).filter(|(p, _)| has_wildcard(p)).map(|(_, g)| escape_os(g)));
        }
        // The glob crate never yields such a path; keep the name unique anyway.
        _ => parts.push(escape_os(dir.as_os_str()).trim_start_matches('/').to_owned()),
    }
    let mut name = block.to_owned();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        name.push('/');
        name.push_str(part);
    }
    name
}

/// One component of a `dir_glob` pattern.
enum Step {
    Literal(std::ffi::OsString),
    Wild(glob::Pattern),
    Deep,
}

/// How deep a `**` descends.
const MAX_GLOB_DEPTH: usize = 32;

/// The first `max` directories (in name order) that match `pattern` and pass `keep`, walked a
/// component at a time. Unlike `glob::glob`, which skips names that are not UTF-8, a name is
/// matched through its lossy form (an invalid byte is one `?`), so such directories are found too.
pub fn glob_dirs(
    pattern: &str,
    max: usize,
    keep: &dyn Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, glob::PatternError> {
    use std::path::Component;
    let mut base = PathBuf::new();
    let mut steps = Vec::new();
    for c in Path::new(pattern).components() {
        match c {
            Component::Normal(os) if os.as_encoded_bytes() == b"**" => steps.push(Step::Deep),
            Component::Normal(os) if has_wildcard(os) => {
                steps.push(Step::Wild(glob::Pattern::new(&os.to_string_lossy())?))
            }
            c if steps.is_empty() => base.push(c.as_os_str()),
            c => steps.push(Step::Literal(c.as_os_str().to_owned())),
        }
    }
    let mut out = Vec::new();
    walk(&Walk { max, keep }, &base, &steps, 0, &mut out);
    Ok(out)
}

struct Walk<'a> {
    max: usize,
    keep: &'a dyn Fn(&Path) -> bool,
}

fn walk(w: &Walk<'_>, base: &Path, steps: &[Step], depth: usize, out: &mut Vec<PathBuf>) {
    if out.len() >= w.max {
        return;
    }
    let Some((step, rest)) = steps.split_first() else {
        if base.is_dir() && (w.keep)(base) {
            out.push(base.to_owned());
        }
        return;
    };
    let children = || {
        let dir = if base.as_os_str().is_empty() { Path::new(".") } else { base };
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir())))
            .collect();
        names.sort();
        names
    };
    match step {
        Step::Literal(c) => walk(w, &base.join(c), rest, depth, out),
        Step::Wild(p) => {
            for (name, _) in children() {
                if p.matches(&name.to_string_lossy()) {
                    walk(w, &base.join(name), rest, depth, out);
                }
            }
        }
        Step::Deep => {
            walk(w, base, rest, depth, out);
            if depth < MAX_GLOB_DEPTH {
                // Real directories only: a symlink loop is not followed.
                for (name, _) in children().into_iter().filter(|(_, is_dir)| *is_dir) {
                    walk(w, &base.join(name), steps, depth + 1, out);
                }
            }
        }
    }
}

/// What a `dir_glob` block needs to start its targets.
#[derive(Debug, Clone)]
pub struct GlobBlock {
    /// The block's name; each match is the target named by [`glob_target_name`], with the label
    /// `dir` holding the whole directory.
    pub name: String,
    /// The glob, e.g. `/home/*/os161/root`.
    pub pattern: String,
    /// Labels of every match.
    pub labels: Vec<(String, String)>,
    /// Per-target series cap.
    pub series_limit: usize,
    /// The interval asked of each simulator.
    pub interval: Duration,
    /// This instance's shard: only the matches whose target name it owns are watched.
    pub shard: Option<crate::config::Shard>,
}

/// Watches every directory matching the glob that holds a meter socket: a match is picked up when
/// its socket appears and dropped (with its series) when the socket or the directory vanishes.
/// The glob is evaluated every `rescan`.
pub async fn run_glob(registry: crate::registry::Registry, block: GlobBlock, rescan: Duration) {
    let mut running: std::collections::HashMap<PathBuf, super::AbortOnDrop> = Default::default();
    let mut warned = false;
    let mut refused: std::collections::HashSet<PathBuf> = Default::default();
    loop {
        let has_socket = |d: &Path| meter161::socket_path(d).exists();
        let found: std::collections::BTreeSet<PathBuf> =
            match glob_dirs(&block.pattern, MAX_GLOB_TARGETS, &has_socket) {
                Ok(paths) => paths.into_iter().collect(),
                Err(e) => {
                    tracing::error!(pattern = %block.pattern, error = %e, "bad glob");
                    Default::default()
                }
            };
        if found.len() == MAX_GLOB_TARGETS && !warned {
            tracing::warn!(pattern = %block.pattern, "the glob matches more than {MAX_GLOB_TARGETS} simulators; watching the first");
            warned = true;
        }
        // Dropping a handle aborts the task, whose publisher then removes the target.
        running.retain(|dir, _| found.contains(dir));
        refused.retain(|dir| found.contains(dir));
        for dir in found {
            if running.contains_key(&dir) {
                continue;
            }
            let name = glob_target_name(&block.name, &block.pattern, &dir);
            // Another instance's share (see `[serve] shard`).
            if block.shard.is_some_and(|s| !s.owns(&name)) {
                continue;
            }
            let mut labels = block.labels.clone();
            labels.push(("dir".to_owned(), escape_os(dir.as_os_str())));
            let protocol = crate::model::Protocol::Meter161;
            let Some(p) =
                Publisher::try_new(&registry, name.clone(), protocol, labels, block.series_limit, |_| false)
            else {
                if refused.insert(dir.clone()) {
                    tracing::warn!(target_name = %name, dir = %dir.display(), "another target has this name; not watching this directory");
                }
                continue;
            };
            let p = p.remove_on_drop();
            let task = tokio::spawn(run(p, dir.clone(), block.interval));
            running.insert(dir, super::AbortOnDrop(task));
        }
        tokio::time::sleep(rescan).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_glob_match_is_named_by_what_its_wildcards_matched() {
        let name = |pattern: &str, dir: &str| glob_target_name("class", pattern, Path::new(dir));
        assert_eq!(name("/home/*/os161/root", "/home/alice/os161/root"), "class/alice");
        assert_eq!(name("/home/*/os161/*/root", "/home/alice/os161/a1/root"), "class/alice/a1");
        assert_eq!(name("/home/user-?/root", "/home/user-b/root"), "class/user-b");
        assert_eq!(name("/srv/**/root", "/srv/a/b/root"), "class/a/b");
        assert_eq!(name("/srv/x/root", "/srv/x/root"), "class");
        assert_eq!(name("rel/*", "rel/a"), "class/a");
    }

    #[test]
    fn the_walk_finds_what_glob_finds_and_non_utf8_names_too() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path();
        for d in [&b"ann/os161/root"[..], b"bob/os161/root", b"x\xff/os161/root", b"cy/other", b"d/e/f/root"]
        {
            std::fs::create_dir_all(root.join(OsStr::from_bytes(d))).unwrap();
        }
        let all = |p: &Path| p.exists();
        let pattern = format!("{}/*/os161/root", root.display());
        let found = glob_dirs(&pattern, 100, &all).unwrap();
        let names: Vec<String> = found.iter().map(|d| glob_target_name("c", &pattern, d)).collect();
        assert_eq!(names, ["c/ann", "c/bob", "c/x\\xff"]);
        let from_glob: Vec<PathBuf> = glob::glob(&pattern).unwrap().filter_map(Result::ok).collect();
        assert_eq!(from_glob, found[..2], "the same as the glob crate where it sees the names");
        assert_eq!(glob_dirs(&pattern, 1, &all).unwrap().len(), 1, "bounded");
        let deep = format!("{}/**/root", root.display());
        let found = glob_dirs(&deep, 100, &all).unwrap();
        let names: Vec<String> = found.iter().map(|d| glob_target_name("c", &deep, d)).collect();
        assert_eq!(names, ["c/ann/os161", "c/bob/os161", "c/d/e/f", "c/x\\xff/os161"]);
    }

    #[test]
    fn non_utf8_directories_get_distinct_lossless_names() {
        let a = Path::new(OsStr::from_bytes(b"/home/x\xff/root"));
        let b = Path::new(OsStr::from_bytes(b"/home/x\xfe/root"));
        assert_eq!(a.display().to_string(), b.display().to_string(), "display() is lossy");
        let (na, nb) = (glob_target_name("c", "/home/*/root", a), glob_target_name("c", "/home/*/root", b));
        assert_eq!((na.as_str(), nb.as_str()), ("c/x\\xff", "c/x\\xfe"));
        // A directory literally named `x\xff` is not confused with the byte 0xff.
        let literal = Path::new("/home/x\\xff/root");
        assert_eq!(glob_target_name("c", "/home/*/root", literal), "c/x\\\\xff");
        assert_eq!(escape_path_bytes("é\\".as_bytes()), "é\\\\");
    }

    /// The inverse of [`escape_path_bytes`]: if it exists, the escaping is lossless.
    fn unescape(s: &str) -> Vec<u8> {
        let (mut out, b) = (Vec::new(), s.as_bytes());
        let mut i = 0;
        while i < b.len() {
            match (b[i], b.get(i + 1)) {
                (b'\\', Some(b'\\')) => (out.push(b'\\'), i += 2).1,
                (b'\\', Some(b'x')) => {
                    out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
                    i += 4;
                }
                (c, _) => (out.push(c), i += 1).1,
            }
        }
        out
    }

    proptest::proptest! {
        /// Any HEAD (known and unknown fields) with any DATA values maps to finite values, wrapping
        /// fields unwrapped, without a panic.
        #[test]
        fn any_data_maps_to_finite_values(
            names in proptest::collection::vec(proptest::sample::select(
                vec!["nsec", "kinsns", "uinsns", "udud", "idle", "irqs", "exns", "disk", "con", "emu", "net", "x-1", "Field"]),
                1..12),
            rows in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u64>(), 12), 1..4),
        ) {
            use super::super::testing::{check_rendered, publisher};
            use meter161::ServerMessage;
            let (reg, mut p) = publisher(crate::model::Protocol::Meter161);
            let mut session = meter161::Session::new();
            let mut fields = Fields::default();
            let _ = session.handle(ServerMessage::Hello(1));
            let _ = session.handle(ServerMessage::Head(names.iter().map(|n| n.to_string()).collect()));
            for row in rows {
                let values = row[..names.len()].to_vec();
                if let Ok(Some(meter161::Update::Sample(sample))) = session.handle(ServerMessage::Data(values)) {
                    record(&mut p, &sample, &mut fields);
                }
            }
            proptest::prop_assert_eq!(check_rendered(&reg, &mut p, &[]), Ok(()));
        }

        #[test]
        fn path_escaping_is_lossless(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(unescape(&escape_path_bytes(&bytes)), bytes);
        }
    }
}
