//! System/161's meter socket: one counter per `HEAD` field, the six 32-bit sums unwrapped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use meter161::{Client, ClientConfig, ClientError, ProtocolError, Sample};

use super::{flush_due, within, Retry, CONNECT_TIMEOUT};
use crate::fleet::model::{ErrorKind, MetricKind};
use crate::fleet::store::Unwrap32;
use crate::fleet::target::{label, Failure, Publisher};

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
    let config = ClientConfig::default().interval(interval).handshake_timeout(CONNECT_TIMEOUT);
    let mut retry = Retry::default();
    loop {
        let failure = session(&mut p, &path, &config).await;
        retry.after(&mut p, failure).await;
    }
}

async fn session(p: &mut Publisher, path: &Path, config: &ClientConfig) -> Failure {
    let mut client = match within(CONNECT_TIMEOUT, "connect", Client::connect_path(path, config)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Failure::new(kind(&e), e),
        Err(f) => return f,
    };
    p.up();
    // A new connection is a new simulator run: its counters start afresh.
    let mut unwrap = Vec::new();
    loop {
        tokio::select! {
            item = client.next() => match item {
                None => return Failure::new(ErrorKind::Connect, "the simulator closed the connection"),
                Some(Err(e)) if e.is_fatal() => return Failure::new(kind(&e), e),
                Some(Err(e)) => p.error(&Failure::new(kind(&e), e)),
                Some(Ok(sample)) => {
                    record(p, &sample, &mut unwrap);
                    p.maybe_flush();
                }
            },
            () = flush_due(p.flush_due()) => p.flush_if_dirty(),
        }
    }
}

/// Sets one series per field of `sample`.
pub fn record(p: &mut Publisher, sample: &Sample, unwrap: &mut Vec<Unwrap32>) {
    let names = sample.header().names();
    unwrap.resize(names.len(), Unwrap32::default());
    for ((name, &value), u) in names.iter().zip(sample.values()).zip(unwrap.iter_mut()) {
        let value = match u32::try_from(value) {
            Ok(v) if WRAPPING.contains(&name.as_str()) => u.next(v),
            _ => value,
        };
        match family(name) {
            Some((fam, help)) if name == "nsec" => {
                p.set(fam, help, MetricKind::Counter, vec![], value as f64 / 1e9)
            }
            Some((fam, help)) => p.set(fam, help, MetricKind::Counter, vec![], value as f64),
            None => p.set(
                "sys161_field_total",
                "A HEAD field this telemon does not know, by name.",
                MetricKind::Counter,
                vec![label("field", name)],
                value as f64,
            ),
        }
    }
}

/// The most directories one `dir_glob` watches.
pub const MAX_GLOB_TARGETS: usize = 10_000;

/// What a `dir_glob` block needs to start its targets.
#[derive(Debug, Clone)]
pub struct GlobBlock {
    /// The block's name; each match is the target `NAME/DIR`.
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
    pub shard: Option<crate::fleet::config::Shard>,
}

/// Watches every directory matching the glob that holds a meter socket: a match is picked up when
/// its socket appears and dropped (with its series) when the socket or the directory vanishes.
/// The glob is evaluated every `rescan`.
pub async fn run_glob(registry: crate::fleet::Registry, block: GlobBlock, rescan: Duration) {
    let mut running: std::collections::HashMap<PathBuf, super::AbortOnDrop> = Default::default();
    let mut warned = false;
    loop {
        let found: std::collections::BTreeSet<PathBuf> = match glob::glob(&block.pattern) {
            Ok(paths) => paths
                .filter_map(Result::ok)
                .filter(|d| meter161::socket_path(d).exists())
                .filter(|d| block.shard.is_none_or(|s| s.owns(&format!("{}/{}", block.name, d.display()))))
                .take(MAX_GLOB_TARGETS)
                .collect(),
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
        for dir in found {
            if running.contains_key(&dir) {
                continue;
            }
            let name = format!("{}/{}", block.name, dir.display());
            let p = Publisher::new(
                &registry,
                name,
                crate::fleet::Protocol::Meter161,
                block.labels.clone(),
                block.series_limit,
            )
            .remove_on_drop();
            let task = tokio::spawn(run(p, dir.clone(), block.interval));
            running.insert(dir, super::AbortOnDrop(task));
        }
        tokio::time::sleep(rescan).await;
    }
}
