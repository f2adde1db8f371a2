//! The committed seed corpora replayed through the same functions the fuzz targets call, and the stream
//! checks under proptest (arbitrary bytes from an agent and from an inspector, at any split point).

use bytes::BytesMut;
use proptest::prelude::*;

use crate::*;

#[test]
fn mono_agent_stream_corpus() {
    bench_harness::corpus::replay("mono_agent_stream", 1, super::agent_stream);
}

#[test]
fn mono_inspector_stream_corpus() {
    bench_harness::corpus::replay("mono_inspector_stream", 1, super::inspector_stream);
}

#[test]
fn mono_counter_table_corpus() {
    bench_harness::corpus::replay("mono_counter_table", 1, super::counter_table);
}

proptest! {
    #[test]
    fn arbitrary_agent_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), split in any::<prop::sample::Index>()) {
        super::agent_stream_split(&data, split.index(data.len() + 1));
    }

    #[test]
    fn arbitrary_agent_bytes_after_a_hello_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..256), split in any::<prop::sample::Index>()) {
        // A valid Hello first, so the sample decoder has counters of every type to look up.
        let headers = (0..5).map(|i| Header {
            category: Category::Jit, name: "n".into(), kind: CounterType::from_raw(i as i32), unit: Unit::None,
            variance: Variance::Variable, index: i,
        }).collect();
        let mut data = BytesMut::new();
        encode_agent_message(&AgentMessage::Hello(Hello { version: 1, headers }), &mut data).unwrap();
        data.extend_from_slice(&[4]);
        data.extend_from_slice(&tail);
        let split = split.index(data.len() + 1);
        super::agent_stream_split(&data, split);
    }

    #[test]
    fn arbitrary_inspector_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        super::inspector_stream(&data);
    }
}
