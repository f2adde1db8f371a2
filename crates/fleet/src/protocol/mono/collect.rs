//! Mono counters agents dial in; each agent is a target named `NAME/HOST:PORT`, whose counters
//! become the `mono_runtime*` families by variance and unit.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use mono_counters::{
    ClientConfig, ClientError, CounterName, CounterTable, Reading, Session, Unit, ValueData, Variance,
};

use tokio::net::TcpListener;

use super::MonoBlock;
use crate::collect::dialin::{Admitted, DialIn};
use crate::collect::{flush_due, within, CONNECT_TIMEOUT};
use crate::model::{ErrorKind, MetricKind};
use crate::protocol::{Component as _, Start};
use crate::recording;
use crate::series::Num;
use crate::target::{Failure, Publisher};

fn kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::Decode(_) => ErrorKind::Decode,
        ClientError::Timeout { .. } => ErrorKind::Timeout,
        ClientError::Encode(_)
        | ClientError::ExpectedHello(_)
        | ClientError::Unexpected(_)
        | ClientError::OtherProtocol { .. } => ErrorKind::Protocol,
        _ => ErrorKind::Connect,
    }
}

/// Binds the block's address and returns the accept loop: every agent that connects (and passes
/// the block's `allow`, `hello_timeout` and `max_targets`, see [`DialIn`]) is collected in its own
/// task and stays listed as down for `linger` after it leaves. Dropping the loop ends every session.
pub async fn listen(
    ctx: &Start,
    block: &MonoBlock,
    linger: Duration,
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let limits = block.listener_limits();
    let config = ClientConfig { hello_timeout: limits.hello_timeout, ..ClientConfig::default() }
        .request_timeout(CONNECT_TIMEOUT);
    let listener = TcpListener::bind(&block.listen).await?;
    let labels = crate::config::block::labels(&block.labels);
    let add: Arc<[CounterName]> = block.add.iter().filter_map(|c| CounterName::parse(c)).collect();
    let name = block.name.clone();
    let (series_limit, recording) = (ctx.series_limit, ctx.recording.clone());
    let dial = DialIn::new(&name, limits, ctx.registry.clone(), linger);
    Ok(dial.clone().accept_loop(listener, "an agent", move |stream, peer, pending| {
        let (dial, add, config, labels) = (dial.clone(), add.clone(), config.clone(), labels.clone());
        let target = format!("{name}/{peer}");
        // The stream wrapped in a recording tap (see [`recording::tap`]) as the target `NAME/PEER`.
        let received = Arc::new(AtomicU64::new(0));
        let (link, address) = (super::Mono.link_type(), peer.to_string());
        let stream = recording::tap(recording.as_deref(), stream, &target, link, &address, received.clone());
        async move {
            // The handshake is boxed: its state is the larger, and inline it would size the
            // task for as long as the session.
            let mut session = match Box::pin(Session::start(stream, config)).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "no Hello");
                    return pending.failed();
                }
            };
            let Ok(Admitted { publisher: mut p, claim }) =
                dial.admit(pending, &[target], crate::model::Protocol::MONO, labels, series_limit)
            else {
                return;
            };
            p.count_received_in(received);
            p.up();
            let failure = collect(&mut p, &mut session, &add).await;
            p.down(&failure);
            dial.ended(p.name(), claim);
        }
    }))
}

/// Runs the collector over an already connected agent `stream` (a replayed recording: `telemon export`,
/// `telemon top --replay`) until the connection ends. No counter is added: the recorded Add responses
/// that come in add their counters, as they did live.
pub async fn over<S>(p: &mut Publisher, stream: S) -> Failure
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let config = ClientConfig::default().request_timeout(CONNECT_TIMEOUT);
    let mut session = match Session::start(stream, config).await {
        Ok(s) => s,
        Err(e) => return Failure::new(kind(&e), e),
    };
    p.up();
    collect(p, &mut session, &[]).await
}

async fn collect(p: &mut Publisher, session: &mut mono_counters::Session, add: &[CounterName]) -> Failure {
    let hello = session.hello().clone();
    let table = CounterTable::from_hello(&hello);
    for counter in add {
        // The real agent drops the connection when asked for a counter it already samples.
        if table.find(&format!("{}/{}", counter.category, counter.name)).is_some() {
            continue;
        }
        match within(CONNECT_TIMEOUT, "Add", session.add_counter(counter.clone())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Failure::new(kind(&e), e),
            Err(f) => return f,
        }
    }
    let mut counters = table.len();
    set_info(p, hello.version, counters);
    p.flush();
    loop {
        let update = tokio::select! {
            next = session.next_sample() => next,
            () = flush_due(p.flush_due()) => {
                p.flush_if_dirty();
                continue;
            }
        };
        match update {
            Ok(None) => return Failure::new(ErrorKind::Connect, "the agent closed the connection"),
            Err(e) => return Failure::new(kind(&e), e),
            Ok(Some(update)) => {
                if update.table.len() != counters {
                    // Counters came or went: start the families over so removed ones disappear.
                    counters = update.table.len();
                    for fam in FAMILIES {
                        p.retain_family(fam, |_| false);
                    }
                    set_info(p, hello.version, counters);
                }
                for r in update.table.readings() {
                    reading(p, r);
                }
                p.maybe_flush();
            }
        }
    }
}

const FAMILIES: [&str; 8] = [
    "mono_runtime",
    "mono_runtime_total",
    "mono_runtime_bytes",
    "mono_runtime_bytes_total",
    "mono_runtime_seconds",
    "mono_runtime_seconds_total",
    "mono_runtime_ratio",
    "mono_agent_info",
];

fn set_info(p: &mut Publisher, version: i16, counters: usize) {
    let (version, counters) = (format!("0.{version}"), counters.to_string());
    p.put(
        "mono_agent_info",
        "The connected Mono agent: protocol version and counters sampled.",
        MetricKind::Info,
        &[("version", &version), ("counters", &counters)],
        1u64,
    );
}

fn reading(p: &mut Publisher, r: &Reading) {
    let Some(ValueData::Typed(v)) = &r.value else { return };
    let h = &r.header;
    let full = h.full_name();
    let (category, counter) = full.split_once('/').unwrap_or(("", &full));
    let monotonic = h.variance == Variance::Monotonic;
    // Integer counters stay exact; scaled ones (ticks, percentages) become floats.
    let exact = exact_num(v);
    let f = v.as_f64();
    let (fam, help, value) = match (h.unit, monotonic) {
        (Unit::Bytes, true) => ("mono_runtime_bytes_total", "Monotonic Mono counters in bytes.", exact),
        (Unit::Bytes, false) => ("mono_runtime_bytes", "Mono counters in bytes.", exact),
        (Unit::Time, true) => (
            "mono_runtime_seconds_total",
            "Monotonic Mono time counters (from 100 ns ticks).",
            Num::Float(f / 1e7),
        ),
        (Unit::Time, false) => {
            ("mono_runtime_seconds", "Mono time counters (from 100 ns ticks).", Num::Float(f / 1e7))
        }
        (Unit::Percentage, _) => {
            ("mono_runtime_ratio", "Mono percentage counters, as a ratio.", Num::Float(f / 100.0))
        }
        (_, true) => ("mono_runtime_total", "Monotonic Mono counters.", exact),
        (_, false) => ("mono_runtime", "Mono counters (constant or variable).", exact),
    };
    let kind = if fam.ends_with("_total") { MetricKind::Counter } else { MetricKind::Gauge };
    p.put(fam, help, kind, &[("category", category), ("counter", counter)], value);
}

/// A Mono counter value as an exact number where it is an integer.
fn exact_num(v: &mono_counters::CounterValue) -> Num {
    match *v {
        mono_counters::CounterValue::Int(i) | mono_counters::CounterValue::Word32(i) => {
            Num::Int(i64::from(i))
        }
        mono_counters::CounterValue::Long(i) | mono_counters::CounterValue::Word64(i) => Num::Int(i),
        _ => Num::Float(v.as_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mono_counters::{Category, CounterType, CounterValue, Header};
    use proptest::prelude::*;

    fn counter_value() -> impl Strategy<Value = CounterValue> {
        prop_oneof![
            any::<i32>().prop_map(CounterValue::Int),
            any::<i64>().prop_map(CounterValue::Long),
            any::<i64>().prop_map(CounterValue::Word64),
            any::<f64>().prop_map(CounterValue::Double),
            Just(CounterValue::Double(f64::NAN)),
            Just(CounterValue::Double(f64::INFINITY)),
        ]
    }

    proptest! {
        /// Any value of any unit and variance maps to a series; only a DOUBLE the agent sent as
        /// NaN or ±Inf renders as such (documented in metrics.md).
        #[test]
        fn any_reading_maps_to_a_number(
            value in counter_value(),
            unit in 0u8..5,
            variance in 0u8..4,
            name in "[ -~]{0,40}",
        ) {
            let (reg, mut p) = crate::collect::testing::publisher(crate::model::Protocol::MONO);
            let header = Header {
                category: Category::Custom,
                name,
                kind: CounterType::Double,
                unit: Unit::from_raw(i32::from(unit)),
                variance: Variance::from_raw(i32::from(variance)),
                index: 0,
            };
            let finite = !matches!(value, CounterValue::Double(v) if !v.is_finite());
            reading(&mut p, &Reading { header, value: Some(ValueData::Typed(value)) });
            let allowed: &[&str] = if finite { &[] } else { &["mono_runtime"] };
            prop_assert_eq!(crate::collect::testing::check_rendered(&reg, &mut p, allowed), Ok(()));
        }
    }
}
