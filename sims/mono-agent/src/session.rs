//! One agent connection (or file), and the reconnecting loop around it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use mono_counters::{
    encode_agent_message, AddResponse, AgentCodec, AgentMessage, CounterName, Hello, InspectorMessage,
    Limits, Sample, SampleValue, Status, PROTOCOL_VERSION,
};
use sim_common::Shutdown;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::codec::Framed;

use crate::config::{AgentConfig, ConfigError, Destination, DuplicateAdd};
use crate::counters::{builtin_counters, dotnet_ticks_now, CounterDef, ValueOverrides, ValueReader};

/// Why the fake agent stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The configuration is unusable.
    #[error("config: {0}")]
    Config(#[from] ConfigError),
    /// Socket or file I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The inspector sent something that is not a request (the real agent stops there too).
    #[error("protocol: {0}")]
    Protocol(#[from] mono_counters::ClientError),
}

/// How one connection ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The inspector said Good Bye.
    GoodBye,
    /// The inspector closed the connection.
    Closed,
    /// A duplicate Add under [`DuplicateAdd::DropConnection`], as the real agent does.
    DroppedOnDuplicateAdd,
    /// [`AgentConfig::max_samples`] samples were sent.
    SampleLimit,
    /// The shutdown token was cancelled.
    Shutdown,
}

/// The counters one connection samples, and the bytes last sent for each (samples are deltas).
struct Sampler {
    defs: Vec<CounterDef>,
    active: BTreeMap<i16, usize>,
    next_index: i16,
    last_sent: BTreeMap<i16, Vec<u8>>,
    reader: ValueReader,
}

impl Sampler {
    fn new(config: &AgentConfig, overrides: &ValueOverrides) -> Self {
        let mut sampler = Sampler {
            defs: builtin_counters(),
            active: BTreeMap::new(),
            next_index: 0,
            last_sent: BTreeMap::new(),
            reader: ValueReader::new(config.values, overrides.clone(), config.word_size),
        };
        for name in &config.counters {
            match sampler.find(name) {
                None => tracing::warn!(counter = %name, "unknown counter in counters=, skipped"),
                Some(pos) if sampler.active.values().any(|&p| p == pos) => {
                    tracing::warn!(counter = %name, "counter listed twice in counters=, skipped")
                }
                Some(pos) => {
                    sampler.activate(pos);
                }
            }
        }
        sampler
    }

    fn find(&self, name: &CounterName) -> Option<usize> {
        self.defs.iter().position(|d| &d.name == name)
    }

    fn activate(&mut self, pos: usize) -> i16 {
        let index = self.next_index;
        self.next_index = self.next_index.saturating_add(1);
        self.active.insert(index, pos);
        index
    }

    fn hello(&self) -> Hello {
        let headers = self.active.iter().map(|(&i, &pos)| self.defs[pos].header(i)).collect();
        Hello { version: PROTOCOL_VERSION, headers }
    }

    fn list(&self) -> Vec<CounterName> {
        self.defs.iter().map(|d| d.name.clone()).collect()
    }

    /// `None` for a duplicate.
    fn add(&mut self, name: &CounterName) -> Option<AddResponse> {
        let Some(pos) = self.find(name) else { return Some(AddResponse::NotFound) };
        if self.active.values().any(|&p| p == pos) {
            return None;
        }
        if self.next_index == i16::MAX {
            return Some(AddResponse::Nok);
        }
        let index = self.activate(pos);
        Some(AddResponse::Ok(self.defs[pos].header(index)))
    }

    fn remove(&mut self, index: i16) -> Status {
        if index < 0 {
            self.active.clear();
            self.last_sent.clear();
            return Status::Ok;
        }
        match self.active.remove(&index) {
            Some(_) => {
                self.last_sent.remove(&index);
                Status::Ok
            }
            None => Status::NotFound,
        }
    }

    fn sample(&mut self) -> Sample {
        let values = self.reader.read(self.active.values().map(|&pos| (pos, &self.defs[pos])));
        let mut changed = Vec::new();
        for ((&index, _), value) in self.active.iter().zip(values) {
            let bytes = value.to_le_bytes();
            if self.last_sent.get(&index) != Some(&bytes) {
                self.last_sent.insert(index, bytes);
                changed.push(SampleValue { index, data: value.into() });
            }
        }
        Sample { timestamp: dotnet_ticks_now(), values: changed }
    }
}

/// Runs the agent until `shutdown`: to a file, or connecting to the inspector with backoff and, when
/// [`AgentConfig::reconnect`] is set, reconnecting after each connection ends.
pub async fn run(config: AgentConfig, shutdown: Shutdown) -> Result<(), SimError> {
    run_with_overrides(config, ValueOverrides::default(), shutdown).await
}

/// [`run`], with values forced from outside while the agent runs.
pub async fn run_with_overrides(
    config: AgentConfig,
    overrides: ValueOverrides,
    shutdown: Shutdown,
) -> Result<(), SimError> {
    let addr = match &config.destination {
        Destination::File(path) => return run_file(path, &config, &overrides, shutdown).await.map(|_| ()),
        Destination::Tcp(addr) => *addr,
    };
    let mut delay = config.backoff.initial;
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            s = TcpStream::connect(addr) => s,
        };
        match stream {
            Ok(stream) => {
                delay = config.backoff.initial;
                let _ = stream.set_nodelay(true);
                tracing::info!(%addr, "connected to the inspector");
                match serve_connection(stream, &config, &overrides, shutdown.clone()).await {
                    Ok(SessionEnd::Shutdown) => return Ok(()),
                    Ok(end) => tracing::info!(?end, "connection ended"),
                    Err(e) => tracing::warn!(error = %e, "connection failed"),
                }
                if !config.reconnect {
                    return Ok(());
                }
            }
            Err(e) => {
                tracing::info!(%addr, error = %e, retry_in = ?delay, "inspector not reachable");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(config.backoff.max);
            }
        }
    }
}

/// Serves one inspector connection: Hello, then samples every interval and answers between them.
pub async fn serve_connection<S>(
    stream: S,
    config: &AgentConfig,
    overrides: &ValueOverrides,
    shutdown: Shutdown,
) -> Result<SessionEnd, SimError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut sampler = Sampler::new(config, overrides);
    let mut framed = Framed::new(stream, AgentCodec::new(Limits::default(), config.opcodes));
    framed.send(AgentMessage::Hello(sampler.hello())).await?;
    let mut sent = 0u64;
    let mut next_sample = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(SessionEnd::Shutdown),
            request = framed.next() => {
                let reply = match request {
                    None => return Ok(SessionEnd::Closed),
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(InspectorMessage::GoodBye)) => {
                        tracing::info!("Closing connection");
                        return Ok(SessionEnd::GoodBye);
                    }
                    Some(Ok(InspectorMessage::Unknown(op))) => {
                        tracing::warn!("Unknown perf-agent command {op}");
                        continue;
                    }
                    Some(Ok(InspectorMessage::List)) => AgentMessage::List(sampler.list()),
                    Some(Ok(InspectorMessage::Add(name))) => match sampler.add(&name) {
                        Some(response) => AgentMessage::Add(response),
                        None if config.duplicate_add == DuplicateAdd::DropConnection => {
                            tracing::warn!(counter = %name, "duplicate add: closing the connection like the real agent");
                            return Ok(SessionEnd::DroppedOnDuplicateAdd);
                        }
                        None => AgentMessage::Add(AddResponse::Existing),
                    },
                    Some(Ok(InspectorMessage::Remove(index))) => AgentMessage::Remove(sampler.remove(index)),
                };
                framed.send(reply).await?;
            }
            _ = tokio::time::sleep_until(next_sample) => {
                framed.send(AgentMessage::Sampling(sampler.sample())).await?;
                sent += 1;
                if config.max_samples.is_some_and(|max| sent >= max) {
                    framed.get_mut().shutdown().await?;
                    return Ok(SessionEnd::SampleLimit);
                }
                next_sample = (next_sample + config.interval).max(Instant::now());
                if config.interval == Duration::ZERO {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
}

/// File mode: truncates `path`, writes Hello, then a sample every interval until the sample limit or
/// `shutdown`. Each record is flushed whole, so a reader sees complete records.
pub async fn run_file(
    path: &Path,
    config: &AgentConfig,
    overrides: &ValueOverrides,
    shutdown: Shutdown,
) -> Result<SessionEnd, SimError> {
    let mut file = tokio::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path).await?;
    let mut sampler = Sampler::new(config, overrides);
    let mut buf = BytesMut::new();
    encode_agent_message(&AgentMessage::Hello(sampler.hello()), &mut buf)
        .map_err(mono_counters::ClientError::from)?;
    file.write_all(&buf).await?;
    let mut sent = 0u64;
    loop {
        buf.clear();
        encode_agent_message(&AgentMessage::Sampling(sampler.sample()), &mut buf)
            .map_err(mono_counters::ClientError::from)?;
        file.write_all(&buf).await?;
        file.flush().await?;
        sent += 1;
        if config.max_samples.is_some_and(|max| sent >= max) {
            file.sync_all().await?;
            return Ok(SessionEnd::SampleLimit);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(SessionEnd::Shutdown),
            _ = tokio::time::sleep(config.interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::ValueMode;
    use mono_counters::CounterValue;

    fn sampler(counters: &str) -> (Sampler, ValueOverrides) {
        let mut config = AgentConfig::from_options(&format!("counters={counters}")).unwrap();
        config.values = ValueMode::Fixed;
        let overrides = ValueOverrides::default();
        (Sampler::new(&config, &overrides), overrides)
    }

    #[test]
    fn unknown_counters_are_skipped_and_indexes_start_at_zero() {
        let (s, _) = sampler("Mono JIT/Compiled methods;Mono JIT/No such thing;Mono System/Working Set");
        let hello = s.hello();
        let names: Vec<_> = hello.headers.iter().map(|h| (h.full_name(), h.index)).collect();
        assert_eq!(
            names,
            vec![("Mono JIT/Compiled methods".to_string(), 0), ("Mono System/Working Set".to_string(), 1)]
        );
    }

    #[test]
    fn samples_are_deltas() {
        let (mut s, overrides) = sampler("Mono JIT/Compiled methods;Mono System/Working Set");
        assert_eq!(s.sample().values.len(), 2, "first sample carries every counter");
        assert!(s.sample().values.is_empty(), "nothing changed");
        overrides.set("Mono System/Working Set", CounterValue::Long(52428800));
        let third = s.sample();
        assert_eq!(third.values, vec![SampleValue { index: 1, data: CounterValue::Long(52428800).into() }]);
        // An override in another type is sent in the counter's own type (Compiled methods is an INT).
        overrides.set("Mono JIT/Compiled methods", CounterValue::Double(1234.0));
        let fourth = s.sample();
        assert_eq!(fourth.values, vec![SampleValue { index: 0, data: CounterValue::Int(1234).into() }]);
    }

    #[test]
    fn indexes_are_never_reused() {
        let (mut s, _) = sampler("Mono JIT/Compiled methods");
        assert_eq!(s.remove(0), Status::Ok);
        assert_eq!(s.remove(0), Status::NotFound);
        let Some(AddResponse::Ok(h)) = s.add(&CounterName::new("Mono JIT", "Compiled methods")) else {
            panic!()
        };
        assert_eq!(h.index, 1);
        assert_eq!(s.remove(-1), Status::Ok);
        let Some(AddResponse::Ok(h)) = s.add(&CounterName::new("Mono GC", "Heap size")) else { panic!() };
        assert_eq!(h.index, 2);
        assert_eq!(s.add(&CounterName::new("Mono GC", "Heap size")), None, "duplicate");
        assert_eq!(s.add(&CounterName::new("Nope", "x")), Some(AddResponse::NotFound));
    }
}
