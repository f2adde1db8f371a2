//! The committed seed corpora of the `hmon_frame`, `hmon_message` and `hmon_proto` fuzz targets replayed
//! through the same functions, and the frame and message checks under proptest (arbitrary bytes, framed
//! bytes, and arbitrary JSON shaped like HMON's messages).

use bytes::BytesMut;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::Value;

use crate::encode_frame;

#[test]
fn hmon_frame_corpus() {
    bench_harness::corpus::replay("hmon_frame", 1, super::frame);
}

#[test]
fn hmon_message_corpus() {
    bench_harness::corpus::replay("hmon_message", 1, super::message);
}

#[test]
fn hmon_proto_corpus() {
    bench_harness::corpus::replay("hmon_proto", 1, super::proto);
}

/// Text with what JSON must escape and APL's non-ASCII (as `tests/props.rs` generates it).
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 #\\[\\]\"\\\\∧é←⍵]{0,12}"
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("JSON has no NaN or infinity", |f| f.is_finite()).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-zA-Z ]{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..512)) {
        super::frame(&data);
        super::message(&data);
    }

    #[test]
    fn arbitrary_framed_bytes_never_panic(payload in vec(any::<u8>(), 1..256), split in any::<u8>()) {
        let mut data = vec![split];
        let mut buf = BytesMut::new();
        encode_frame(&payload, &mut buf).unwrap();
        data.extend_from_slice(&buf);
        super::frame(&data);
    }

    #[test]
    fn arbitrary_json_never_panics(name in prop_oneof![
        Just("Facts".to_owned()), Just("Subscribed".to_owned()), Just("Notification".to_owned()),
        Just("LastKnownState".to_owned()), Just("GetFacts".to_owned()), Just("PollFacts".to_owned()),
        Just("Subscribe".to_owned()), "[A-Za-z]{0,8}"
    ], args in json(), facts in vec(json(), 0..3)) {
        let mut args = args;
        if let Value::Object(map) = &mut args {
            map.insert("Facts".into(), Value::Array(facts));
        }
        for payload in [serde_json::json!([name, args]), args.clone()] {
            super::message(&serde_json::to_vec(&payload).unwrap());
        }
    }
}
