//! System/161's meter socket: one counter per `HEAD` field, the six 32-bit sums unwrapped.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use meter161::{Client, ClientConfig, ClientError, DecodeError, ProtocolError, Sample};

use crate::collect::{connecting, flush_due, AbortOnDrop, Retry, CONNECT_TIMEOUT};
use crate::discover::glob::{escape_os, glob_dirs, glob_target_name, MAX_GLOB_TARGETS};
use crate::model::{ErrorKind, MetricKind};
use crate::protocol::Start;
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
        ClientError::Protocol(ProtocolError::Decode(DecodeError::OtherProtocol { .. })) => {
            ErrorKind::Protocol
        }
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
        let tap = p.tapper(&path.display().to_string());
        match connecting(CONNECT_TIMEOUT, "connect", Client::connect_path_with(path, &config, tap)).await {
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

/// What a `dir_glob` block needs to start its targets.
#[derive(Debug, Clone)]
pub struct Glob {
    /// The block's name; each match is the target named by [`glob_target_name`], with the label
    /// `dir` holding the whole directory.
    pub name: String,
    /// The glob, e.g. `/home/*/os161/root`.
    pub pattern: String,
    /// Labels of every match.
    pub labels: Vec<(String, String)>,
    /// The interval asked of each simulator.
    pub interval: Duration,
}

/// Watches every directory matching the glob that holds a meter socket: a match is picked up when
/// its socket appears and dropped (with its series) when the socket or the directory vanishes.
/// The glob is evaluated every `rescan`; only the matches whose target name `ctx.shard` owns are watched.
pub async fn run_glob(ctx: Start, block: Glob, rescan: Duration) {
    let mut running: std::collections::HashMap<PathBuf, AbortOnDrop> = Default::default();
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
            if ctx.shard.is_some_and(|s| !s.owns(&name)) {
                continue;
            }
            let mut labels = block.labels.clone();
            labels.push(("dir".to_owned(), escape_os(dir.as_os_str())));
            let Some(p) = ctx.try_publisher(name.clone(), &super::Meter161, labels) else {
                if refused.insert(dir.clone()) {
                    tracing::warn!(target_name = %name, dir = %dir.display(), "another target has this name; not watching this directory");
                }
                continue;
            };
            let task = tokio::spawn(run(p, dir.clone(), block.interval));
            running.insert(dir, AbortOnDrop(task));
        }
        tokio::time::sleep(rescan).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            use crate::collect::testing::{check_rendered, publisher};
            use meter161::ServerMessage;
            let (reg, mut p) = publisher(crate::model::Protocol::METER161);
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

    }
}
